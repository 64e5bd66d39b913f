"""information_extraction (#48): schemas and their errors, PaddleNLP's output shape on a model whose outputs the test
controls, chunking offsets past max_seq_len, doccano / Label Studio readers and their errors, and a tiny model
fine-tuned from a doccano file run through Taskflow, the CLI and the server."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from torch import nn

from ernie_zoo import ErnieZooTokenizerFast
from ernie_zoo.data.annotations import PromptExample, prompt_examples, read_annotations
from ernie_zoo.models import ErnieZooForSpanExtraction
from ernie_zoo.models.span_extraction import SpanExtractionOutput, pair_pointers
from ernie_zoo.taskflow import Taskflow
from ernie_zoo.text.extraction import MAX_SCHEMA_NODES, SchemaNode, parse_schema

NAMES = ["李明", "王芳", "张伟", "刘洋", "陈静", "杨帆", "赵磊", "黄丽", "周杰", "吴敏"]
SCHOOLS = ["北京大学", "南京大学", "复旦大学", "浙江大学", "武汉大学", "清华大学"]
CITIES = ["上海", "广州", "成都", "西安", "杭州", "重庆"]
FILLER = "今天天气很好，我们去公园散步。"


# ----------------------------------------------------------------------------------------------- schemas
def test_the_three_schema_forms():
    assert parse_schema(["时间", "选手"]) == (SchemaNode("时间"), SchemaNode("选手"))
    assert parse_schema({"人物": ["出生地", "毕业院校"]}) == (
        SchemaNode("人物", (SchemaNode("出生地"), SchemaNode("毕业院校"))),
    )
    deep = parse_schema(["时间", {"人物": [{"毕业院校": ["所在城市"]}, "出生地"]}])
    assert deep == (
        SchemaNode("时间"),
        SchemaNode("人物", (SchemaNode("毕业院校", (SchemaNode("所在城市"),)), SchemaNode("出生地"))),
    )
    assert parse_schema("人物") == (SchemaNode("人物"),)
    assert parse_schema({"人物": None}) == (SchemaNode("人物"),)


def _cycle():
    inner: list = ["出生地"]
    schema = {"人物": inner}
    inner.append(schema)
    return schema


@pytest.mark.parametrize(
    "schema, message",
    [
        ([], "the schema is empty"),
        ({}, "the schema is empty"),
        ("", "the schema is empty"),
        (None, "no schema"),
        (["人物", 3], "root[1]: items are names"),
        ({"人物": [None]}, "root.人物[0]: items are names"),
        ({3: ["出生地"]}, "must be a string, got int"),
        (["人物", "  "], "must not be empty"),
        (["人物", "人物"], "'人物' appears twice"),
        (_cycle(), "contains itself (a cycle)"),
        ([f"类型{i}" for i in range(10_000)], f"more than {MAX_SCHEMA_NODES} type and relation names"),
        (["人" * 65], "longer than 64 characters"),
    ],
)
def test_bad_schemas_are_refused_with_the_reason(schema, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_schema(schema)


# ----------------------------------------------------------------------------------------------- a controlled model
class RuleModel(nn.Module):
    """A span extractor whose outputs the test controls: for a prompt in `rules`, each occurrence of each listed
    string in the text gets start logit START_LOGIT at its first token and end logit END_LOGIT at its last; every
    other position -6. Reads the prompt and the text back from the token ids (one token per Chinese character)."""

    START_LOGIT, END_LOGIT = 2.0, 1.0

    def __init__(self, tokenizer, rules: dict[str, list[str]]):
        super().__init__()
        self.tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.rules = rules
        self.calls: list[int] = []  # batch sizes

    def forward(self, input_ids, token_type_ids, attention_mask, **kwargs):
        self.calls.append(input_ids.shape[0])
        start = torch.full(input_ids.shape, -6.0)
        end = torch.full(input_ids.shape, -6.0)
        for row in range(input_ids.shape[0]):
            n = int(attention_mask[row].sum())
            kinds = token_type_ids[row, :n].tolist()
            tokens = [self.tokens[i] for i in input_ids[row, :n].tolist()]
            prompt = "".join(t for t, k in zip(tokens[1:], kinds[1:]) if k == 0 and t != "[SEP]")
            positions = [t for t in range(n) if kinds[t] == 1 and tokens[t] != "[SEP]"]
            text = "".join(tokens[t] for t in positions)
            for target in self.rules.get(prompt, []):
                at = text.find(target)
                while at >= 0:
                    start[row, positions[at]] = self.START_LOGIT
                    end[row, positions[at + len(target) - 1]] = self.END_LOGIT
                    at = text.find(target, at + 1)
        return SpanExtractionOutput(start_logits=start, end_logits=end)


P = 1 / (1 + math.exp(-RuleModel.START_LOGIT)) / (1 + math.exp(-RuleModel.END_LOGIT))  # start x end


@pytest.fixture(scope="module")
def random_ie_dir(tmp_path_factory):
    """A random tiny span extractor saved as a from_pretrained directory, with a tokenizer of the test's texts."""
    texts = [FILLER, *NAMES, *SCHOOLS, *CITIES, "毕业于现居出生在后来考入的人物学校城市所在院校地点。，"]
    tokenizer = ErnieZooTokenizerFast.train_vocab(texts, vocab_size=200, min_frequency=1, show_progress=False)
    torch.manual_seed(0)
    model = ErnieZooForSpanExtraction(tiny_config(tokenizer, max_position_embeddings=256))
    path = tmp_path_factory.mktemp("ie") / "random"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _controlled(path, rules, **kwargs) -> tuple[Taskflow, RuleModel]:
    flow = Taskflow("information_extraction", task_path=path, **kwargs)
    rule = RuleModel(flow._task.tokenizer, rules)
    flow._task.model = rule
    return flow, rule


RULES = {
    "人物": ["李明"],
    "城市": ["上海"],
    "李明的毕业院校": ["北京大学"],
    "北京大学的所在城市": ["北京"],
}


def test_output_shape_equals_the_hand_written_result(random_ie_dir):
    text = "李明毕业于北京大学，现居上海。"
    flow, _ = _controlled(random_ie_dir, RULES, schema=[{"人物": ["毕业院校", "出生地"]}, "城市", "时间"])
    expected = {
        "人物": [
            {
                "text": "李明",
                "start": 0,
                "end": 2,
                "probability": pytest.approx(P),
                "relations": {
                    "毕业院校": [{"text": "北京大学", "start": 5, "end": 9, "probability": pytest.approx(P)}]
                },
            }
        ],
        "城市": [{"text": "上海", "start": 12, "end": 14, "probability": pytest.approx(P)}],
    }
    assert flow(text) == expected  # 时间 and 出生地: nothing found, so no key
    assert flow([text, "今天天气很好。"]) == [expected, {}]

    flow.set_schema({"人物": [{"毕业院校": ["所在城市"]}]})  # deeper nesting
    assert flow(text) == {
        "人物": [
            {
                "text": "李明",
                "start": 0,
                "end": 2,
                "probability": pytest.approx(P),
                "relations": {
                    "毕业院校": [
                        {
                            "text": "北京大学",
                            "start": 5,
                            "end": 9,
                            "probability": pytest.approx(P),
                            "relations": {
                                "所在城市": [
                                    {"text": "北京", "start": 5, "end": 7, "probability": pytest.approx(P)}
                                ]
                            },
                        }
                    ]
                },
            }
        ]
    }
    with pytest.raises(ValueError, match="appears twice"):
        flow.set_schema(["城市", "城市"])
    assert "所在城市" in json.dumps(
        flow(text), ensure_ascii=False
    )  # the bad schema left the old one in place

    # position_prob: the start x end pointers of RuleModel are 0.88 and 0.73: above 0.8 only starts remain
    strict, _ = _controlled(random_ie_dir, RULES, schema=["城市"], position_prob=0.8)
    assert strict(text) == {}


def test_schema_errors_through_taskflow(random_ie_dir):
    with pytest.raises(ValueError, match="items are names"):
        Taskflow("information_extraction", task_path=random_ie_dir, schema=["人物", 3])
    with pytest.raises(ValueError, match="position_prob"):
        Taskflow("information_extraction", task_path=random_ie_dir, schema=["人物"], position_prob=1.5)
    flow = Taskflow(
        "information_extraction", task_path=random_ie_dir
    )  # the server builds one without a schema
    with pytest.raises(ValueError, match="has no schema"):
        flow("李明毕业于北京大学。")
    with pytest.raises(ValueError, match="takes no schema"):
        Taskflow("word_segmentation").set_schema(["人物"])


def test_long_texts_are_chunked_and_offsets_map_back(random_ie_dir):
    # 李明 at the start, in the middle and past 600 characters; max_seq_len=32 leaves ~27 characters per chunk
    text = "李明毕业于北京大学。" + FILLER * 20 + "李明现居上海。" + FILLER * 20 + "上海"
    flow, rule = _controlled(
        random_ie_dir, RULES, schema={"人物": ["毕业院校"]}, max_seq_len=32, batch_size=8
    )
    found = flow(text)
    people = [(p["start"], p["end"]) for p in found["人物"]]
    expected = [i for i in range(len(text)) if text.startswith("李明", i)]
    assert len(expected) == 2 and expected[1] > 300
    assert people == [(i, i + 2) for i in expected]
    assert all(text[p["start"] : p["end"]] == p["text"] == "李明" for p in found["人物"])
    schools = [r for p in found["人物"] for r in p["relations"]["毕业院校"]]
    assert {(r["start"], r["end"]) for r in schools} == {
        (5, 9)
    }  # both subjects share the prompt 李明的毕业院校
    assert max(rule.calls) == 8 and sum(rule.calls) > 2 * len(text) // 27  # many chunks, batched 8 at a time

    # the same findings whatever the batch size and chunk size
    wide, _ = _controlled(random_ie_dir, RULES, schema={"人物": ["毕业院校"]}, max_seq_len=128, batch_size=64)
    assert wide(text) == found


def test_an_entity_past_token_512_is_found_at_its_offsets(random_ie_dir):
    flow, rule = _controlled(random_ie_dir, RULES, schema=["人物", "城市"], max_seq_len=64, batch_size=16)
    text = FILLER * 40 + "李明现居上海。" + FILLER * 10  # 600 characters of filler first
    start = text.index("李明")
    tokens_before = len(flow._task.tokenizer(text[:start], add_special_tokens=False)["input_ids"])
    assert tokens_before >= 512  # one token per character: the name sits past token 512
    found = flow(text)
    assert [(p["start"], p["end"], p["text"]) for p in found["人物"]] == [(start, start + 2, "李明")]
    assert [(c["start"], c["end"]) for c in found["城市"]] == [(start + 4, start + 6)]
    assert len(rule.calls) > 1  # cut into many chunks, run in several batches


class CutNameModel(RuleModel):
    """RuleModel, and like a real model it takes a piece of a name cut by a chunk border for a name: a chunk
    that ends with 李 gets a span on that 李, a chunk that starts with 明 one on that 明."""

    def forward(self, input_ids, token_type_ids, attention_mask, **kwargs):
        out = super().forward(input_ids, token_type_ids, attention_mask)
        for row in range(input_ids.shape[0]):
            n = int(attention_mask[row].sum())
            kinds = token_type_ids[row, :n].tolist()
            positions = [
                t for t in range(n) if kinds[t] == 1 and self.tokens[int(input_ids[row, t])] != "[SEP]"
            ]
            first, last = positions[0], positions[-1]
            if self.tokens[int(input_ids[row, last])] == "李":
                out.start_logits[row, last] = out.end_logits[row, last] = self.START_LOGIT
            if self.tokens[int(input_ids[row, first])] == "明":
                out.start_logits[row, first] = out.end_logits[row, first] = self.START_LOGIT
        return out


def test_a_name_across_a_chunk_border_is_found_once(random_ie_dir):
    # no punctuation: chunk_spans cuts by length, wherever that falls; every placement of 李明 across the text
    flow = Taskflow("information_extraction", task_path=random_ie_dir, schema=["人物"], max_seq_len=32)
    flow._task.model = CutNameModel(flow._task.tokenizer, {"人物": ["李明"]})
    bare = Taskflow(
        "information_extraction", task_path=random_ie_dir, schema=["人物"], max_seq_len=32, chunk_overlap=0
    )
    bare._task.model = CutNameModel(bare._task.tokenizer, {"人物": ["李明"]})
    lost = 0
    for p in range(15, 45):
        text = "天" * p + "李明" + "天" * (70 - p)
        assert flow(text) == {
            "人物": [{"text": "李明", "start": p, "end": p + 2, "probability": pytest.approx(P)}]
        }
        lost += flow(text) != bare(text)
    assert lost >= 1  # without the overlap some placement is cut: 李 and 明 come back as two names
    with pytest.raises(ValueError, match="chunk_overlap must be an int >= 0"):
        Taskflow("information_extraction", task_path=random_ie_dir, schema=["人物"], chunk_overlap=-1)


def test_pair_pointers_is_uie_decoding():
    start = [0.0, 0.9, 0.0, 0.8, 0.0, 0.0]
    end = [0.0, 0.0, 0.0, 0.0, 0.7, 0.6]
    # both starts reach end 4 first: the later start keeps it; end 5 has no start of its own
    assert pair_pointers(start, end, 0.5, list(range(6))) == [(3, 4, pytest.approx(0.8 * 0.7))]
    assert pair_pointers(start, end, 0.5, [1, 2, 4, 5]) == [(1, 4, pytest.approx(0.9 * 0.7))]


# ----------------------------------------------------------------------------------------------- annotation files
def _doccano_rows(n: int = 48) -> list[dict]:
    rows = []
    for i in range(n):
        name, school, city = NAMES[i % 10], SCHOOLS[i % 6], CITIES[(i * 5) % 6]
        if i % 2:
            text = f"{name}毕业于{school}。"
            entities = [(1, 0, 2, "人物"), (2, 5, 9, "学校")]
            relations = [(1, 2, "毕业院校")]
        else:
            text = f"{name}出生在{city}，后来考入{school}。"
            entities = [(1, 0, 2, "人物"), (2, 5, 7, "城市"), (3, 12, 16, "学校")]
            relations = [(1, 2, "出生地"), (1, 3, "毕业院校")]
        rows.append(
            {
                "id": i,
                "text": text,
                "entities": [
                    {"id": a, "start_offset": s, "end_offset": e, "label": t} for a, s, e, t in entities
                ],
                "relations": [
                    {"id": k, "from_id": a, "to_id": b, "type": t} for k, (a, b, t) in enumerate(relations)
                ],
            }
        )
    return rows


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _label_studio(rows: list[dict]) -> list[dict]:
    tasks = []
    for row in rows:
        result = [
            {"id": f"e{e['id']}", "type": "labels", "from_name": "label", "to_name": "text",
             "value": {"start": e["start_offset"], "end": e["end_offset"], "labels": [e["label"]]}}
            for e in row["entities"]
        ] + [
            {"type": "relation", "from_id": f"e{r['from_id']}", "to_id": f"e{r['to_id']}", "labels": [r["type"]]}
            for r in row["relations"]
        ]  # fmt: skip
        tasks.append({"id": row["id"], "data": {"text": row["text"]}, "annotations": [{"result": result}]})
    return tasks


def test_doccano_and_label_studio_read_the_same(tmp_path):
    rows = _doccano_rows(6)
    doccano = read_annotations(_write_jsonl(tmp_path / "d.jsonl", rows))
    studio_path = tmp_path / "ls.json"
    studio_path.write_text(json.dumps(_label_studio(rows), ensure_ascii=False, indent=1), encoding="utf-8")
    studio = read_annotations(studio_path)
    assert [r.text for r in studio] == [r.text for r in doccano]
    for a, b in zip(doccano, studio):
        assert [(m.start, m.end, m.label) for m in a.entities] == [
            (m.start, m.end, m.label) for m in b.entities
        ]
        assert [r.type for r in a.relations] == [r.type for r in b.relations]
    assert doccano[1].where == f"{tmp_path / 'd.jsonl'}:2"
    assert studio[1].where.startswith(f"{studio_path}:") and int(studio[1].where.rsplit(":", 1)[1]) > 2


def test_prompt_examples_entities_relations_negatives():
    rows = read_annotations_from(_doccano_rows(2))
    examples = prompt_examples(rows, negative_ratio=3, seed=0)
    first = [e for e in examples if e.text == rows[0].text]  # 李明出生在上海，后来考入北京大学。
    assert PromptExample("人物", rows[0].text, ((0, 2),)) in first
    assert PromptExample("李明的出生地", rows[0].text, ((5, 7),)) in first
    assert PromptExample("李明的毕业院校", rows[0].text, ((12, 16),)) in first
    second = [e for e in examples if e.text == rows[1].text]  # 王芳毕业于南京大学。
    assert PromptExample("城市", rows[1].text) in second  # an entity type absent from the text
    assert PromptExample("王芳的出生地", rows[1].text) in second  # a relation of 人物 the subject lacks
    assert prompt_examples(rows, negative_ratio=3, seed=0) == examples
    assert not [e for e in prompt_examples(rows, negative_ratio=0, seed=0) if not e.spans]


def read_annotations_from(rows: list[dict]):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return read_annotations(_write_jsonl(Path(d) / "rows.jsonl", rows))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda r: r["entities"].append({"id": 9, "start_offset": 1, "end_offset": 3, "label": "人物"}),
            "overlap",
        ),
        (lambda r: r["relations"].append({"id": 9, "from_id": 1, "to_id": 7, "type": "出生地"}), "entity 7"),
        (lambda r: r["entities"][0].update(end_offset=99), r"offsets \[0, 99\) outside the text"),
        (lambda r: r["entities"][0].update(start_offset="0"), "outside the text"),
        (lambda r: r.update(text=""), "the text is missing or empty"),
        (lambda r: r["entities"][1].update(id=1), "entity id 1 is used twice"),
    ],
)
def test_bad_rows_are_named_by_file_and_line(tmp_path, change, message):
    rows = _doccano_rows(4)
    change(rows[2])
    path = _write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError, match=f"{path}:3: .*{message}"):
        read_annotations(path)


def test_bad_label_studio_item_and_bad_json_are_named(tmp_path):
    tasks = _label_studio(_doccano_rows(3))
    tasks[2]["annotations"][0]["result"][0]["value"]["end"] = 50
    path = tmp_path / "ls.json"
    path.write_text(
        "[\n" + ",\n".join(json.dumps(t, ensure_ascii=False) for t in tasks) + "\n]", encoding="utf-8"
    )
    with pytest.raises(ValueError, match=f"{path}:4: entity 'e1'.*outside the text"):
        read_annotations(path)
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(_doccano_rows(1)[0], ensure_ascii=False) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}:2: not JSON"):
        read_annotations(path)


# ----------------------------------------------------------------------------------------------- fine-tuning
SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "initializer_range": 0.2,
}


def _finetune(tmp_path: Path, method: str, steps: int, out: str) -> tuple[Path, dict]:
    """`ernie-finetune RECIPE --task information_extraction --train_file F` (the command line); (output dir, its
    eval_results.json)."""
    import yaml

    from ernie_zoo.finetune.cli import main

    train = _write_jsonl(tmp_path / "train.jsonl", _doccano_rows())
    recipe = {
        "data": {"max_length": 48},
        "model": {"vocab_size": 300, "config_overrides": SMALL},
        "method": {"method": method},
        "train": {
            "batch_size": 16,
            "learning_rate": 5e-3,
            "max_steps": steps,
            "eval_every": steps,
            "seed": 0,
        },
    }
    recipe["train"].update(progress=False, num_threads=1, output_dir=str(tmp_path / out))
    path = tmp_path / f"{out}.yaml"
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    assert main([str(path), "--task", "information_extraction", "--train_file", str(train)]) == 0
    return tmp_path / out, json.loads((tmp_path / out / "eval_results.json").read_text(encoding="utf-8"))


def test_dev_split_is_seeded(tmp_path):
    from ernie_zoo.finetune import build_args
    from ernie_zoo.finetune.objectives import make_objective

    train = _write_jsonl(tmp_path / "train.jsonl", _doccano_rows())

    def dev_texts(seed: int) -> set[str]:
        args = build_args(
            {"task": "information_extraction", "data": {"train_file": str(train)}, "train": {"seed": seed}}
        )
        objective = make_objective(args)
        objective.read()
        dev = {e.text for e in objective.splits["dev"]}
        assert dev and not dev & {e.text for e in objective.splits["train"]}
        return dev

    assert dev_texts(1) == dev_texts(1)
    assert dev_texts(1) != dev_texts(2)


@pytest.mark.slow
def test_finetuned_from_doccano_round_trips_through_taskflow_and_the_cli(tmp_path, capsys, monkeypatch):
    from ernie_zoo.cli import main

    out, result = _finetune(tmp_path, "full", 240, "full")
    assert result["dev"]["f1"] > 0.9
    out = str(out)
    flow = Taskflow("information_extraction", schema={"人物": ["毕业院校", "出生地"]}, task_path=out)
    text = "赵磊出生在成都，后来考入武汉大学。"
    found = flow(text)
    person = found["人物"][0]
    assert (person["text"], person["start"], person["end"]) == ("赵磊", 0, 2)
    assert [(r["text"], r["start"]) for r in person["relations"]["毕业院校"]] == [("武汉大学", 12)]
    assert [(r["text"], r["start"]) for r in person["relations"]["出生地"]] == [("成都", 5)]

    # the usage example of the task's module, on this model
    import doctest

    from ernie_zoo.taskflow import information_extraction

    finder, runner = (
        doctest.DocTestFinder(exclude_empty=True),
        doctest.DocTestRunner(optionflags=doctest.ELLIPSIS),
    )
    globs = {"Taskflow": Taskflow, "ie_dir": out}
    for test in finder.find(information_extraction, globs=globs):
        if test.name == information_extraction.__name__:
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted >= 4

    capsys.readouterr()
    argv = [
        "taskflow",
        "information_extraction",
        "--task-path",
        out,
        "--schema",
        '{"人物": ["毕业院校"]}',
        text,
    ]
    assert main([*argv, "--no-progress"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["人物"][0]["relations"]["毕业院校"][0]["text"] == "武汉大学"
    assert main(["taskflow", "information_extraction", "--task-path", out, "--schema", "[1]", text]) == 2
    assert "root[0]: items are names" in capsys.readouterr().err

    # ONNX: the exported head gives the same findings through the onnxruntime backend (fp32 and int8 graphs)
    from ernie_zoo.taskflow.onnx import export_onnx

    exported = export_onnx(out, tmp_path / "onnx")
    texts = [text, "王芳毕业于南京大学。" + FILLER * 8 + "张伟出生在西安。"]
    schema = {"人物": ["毕业院校", "出生地"]}
    torch_found = Taskflow("ie", schema=schema, task_path=out, max_seq_len=32)(texts)
    onnx_found = Taskflow("ie", schema=schema, task_path=exported, backend="onnxruntime", max_seq_len=32)(
        texts
    )
    assert json.dumps(onnx_found, ensure_ascii=False) != "[{}, {}]"

    def approx(found):
        return json.loads(json.dumps(found), parse_float=lambda v: pytest.approx(float(v), abs=1e-4))

    assert onnx_found == approx(torch_found)

    # LoRA: the merged output directory is what Taskflow loads
    lora_out, _ = _finetune(tmp_path, "lora", 20, "lora")
    lora = Taskflow("information_extraction", schema=["人物"], task_path=lora_out)
    assert isinstance(lora([text]), list)
    assert (lora_out / "adapter").is_dir()

    # fine-tuning goes on from an adapter model (the shipped default is one): from its weights merged once into a
    # cache directory named by the adapter's content
    import yaml

    from ernie_zoo.data import sources
    from ernie_zoo.finetune.cli import main as finetune_main

    monkeypatch.setattr(sources, "DEFAULT_CACHE", tmp_path / "cache")
    recipe = {
        "task": "information_extraction",
        "data": {"max_length": 48, "train_file": str(tmp_path / "train.jsonl")},
        "model": {"model_name_or_path": str(lora_out / "adapter")},
        "method": {"method": "lora"},
        "train": {"max_steps": 1, "learning_rate": 1e-9, "seed": 0, "progress": False, "num_threads": 1},
    }
    recipe["train"]["output_dir"] = str(tmp_path / "again")
    (tmp_path / "again.yaml").write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    assert finetune_main([str(tmp_path / "again.yaml")]) == 0
    (merged,) = (tmp_path / "cache" / "merged").iterdir()
    assert merged.name.startswith("adapter-") and (merged / "config.json").is_file()
    from ernie_zoo.finetune.export import load_finetuned

    (model, tok), (before, _) = load_finetuned(tmp_path / "again"), load_finetuned(lora_out)
    enc = tok(["人物", "学校"], [text, "王芳毕业于南京大学。"], padding=True, return_tensors="pt")
    enc = {k: v for k, v in enc.items() if k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        now, then = model(**enc), before(**enc)
    # 1 step at 1e-9 from the adapter's weights (its trained head too, not a new one)
    assert torch.allclose(now.start_logits, then.start_logits, atol=1e-4)
    assert torch.allclose(now.end_logits, then.end_logits, atol=1e-4)


@pytest.mark.slow
def test_served_with_a_schema_per_request(random_ie_dir):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from ernie_zoo.serving import ServeConfig, create_app

    app = create_app(
        ServeConfig(
            tasks=["information_extraction"], task_paths={"information_extraction": str(random_ie_dir)}
        )
    )
    with TestClient(app) as client:
        for _ in range(500):
            if client.get("/ready").status_code == 200:
                break
            import time

            time.sleep(0.02)
        body = {
            "texts": ["李明毕业于北京大学。"],
            "options": {"schema": {"人物": ["毕业院校"]}, "position_prob": 0.99},
        }
        reply = client.post("/v1/information_extraction", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["results"] == [{}]  # a random model: nothing above 0.99
        bad = client.post("/v1/information_extraction", json={"texts": ["李明"], "options": {"schema": [1]}})
        assert bad.status_code == 422 and "items are names" in bad.text


# ----------------------------------------------------------------------------------------------- UIE files, the MSRA mix
def test_uie_prompt_files_round_trip_and_feed_the_objective(tmp_path):
    from ernie_zoo.data.annotations import (
        detect_annotation_format,
        read_prompt_examples,
        write_prompt_examples,
    )
    from ernie_zoo.finetune import build_args
    from ernie_zoo.finetune.objectives import make_objective

    examples = prompt_examples(read_annotations_from(_doccano_rows(10)), negative_ratio=1)
    path = tmp_path / "uie.jsonl"
    assert write_prompt_examples(path, examples) == len(examples)
    assert detect_annotation_format(path.read_text(encoding="utf-8")) == "uie"
    assert read_prompt_examples(path) == examples
    with pytest.raises(ValueError, match="holds prompt examples"):
        read_annotations(path)

    args = build_args(
        {"task": "information_extraction", "data": {"train_file": str(path), "dev_fraction": 0.0}}
    )
    objective = make_objective(args)
    objective.read()
    assert objective.splits["train"] == examples and "dev" not in objective.splits

    lines = path.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[1])
    row["result_list"] = [{"text": "x", "start": 0, "end": 99}]
    lines[1] = json.dumps(row, ensure_ascii=False)
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}:2: result .* outside the text"):
        read_prompt_examples(path)


def test_msra_mix_asks_each_type_under_its_names(tmp_path):
    from ernie_zoo.data.annotations import read_prompt_examples
    from ernie_zoo.data.extraction_mix import (
        HELD_OUT_NAMES,
        TYPE_NAMES,
        build_extraction_mix,
        msra_prompt_examples,
    )

    records = [
        {
            "text": f"{name}在{city}工作。",
            "entities": [{"start": 0, "end": 2, "type": "PER"}, {"start": 3, "end": 5, "type": "LOC"}],
        }
        for name in NAMES
        for city in CITIES
    ]
    examples = list(msra_prompt_examples(records, seed=0))
    assert len(examples) == 3 * len(records)
    kind_of = {n: k for k, names in TYPE_NAMES.items() for n in names}
    for ex in examples:
        kind = kind_of[ex.prompt]
        expected = {"PER": ((0, 2),), "LOC": ((3, 5),), "ORG": ()}[kind]
        assert ex.spans == expected  # a negative only for the type the sentence lacks
    assert {ex.prompt for ex in examples} == set(kind_of)  # every name is drawn
    assert [ex.prompt for ex in msra_prompt_examples(records, seed=1)] != [ex.prompt for ex in examples]
    assert not set(kind_of) & {n for names in HELD_OUT_NAMES.values() for n in names}

    datasets = tmp_path / "datasets"
    (datasets / "ner").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        _write_jsonl(datasets / "ner" / f"{split}.jsonl", records[:6])
    counts = build_extraction_mix(tmp_path / "mix", datasets, rules=False)
    assert counts == {"dropped_heldout": 0, "train": 18, "dev": 18, "test": 18, "test_unseen": 18}
    # with the rules: these sentences hold no number, so each also asks 时间 and 金额 as negatives (not test_unseen)
    counts = build_extraction_mix(tmp_path / "mix_rules", datasets)
    assert counts == {"dropped_heldout": 0, "train": 30, "dev": 30, "test": 30, "test_unseen": 18}
    unseen = read_prompt_examples(tmp_path / "mix" / "test_unseen.jsonl")
    assert {ex.prompt for ex in unseen} == {"人", "地方", "单位"}


def test_rule_prompts_find_times_sums_and_posts():
    from ernie_zoo.data.extraction_mix import rule_prompt_examples

    def asked(text, entities=()):
        record = {"text": text, "entities": [{"start": s, "end": e, "type": t} for s, e, t in entities]}
        return {ex.prompt: [text[s:e] for s, e in ex.spans] for ex in rule_prompt_examples([record])}

    text = "1998年3月5日上午，公司拿出三十万元和2.5亿美元。"
    assert asked(text) == {"时间": ["1998年3月5日上午"], "金额": ["三十万元", "2.5亿美元"]}
    assert asked("昨天下午他们在八十年代的老厂房开会。")["时间"] == ["昨天下午", "八十年代"]
    # no time found but the sentence has numbers or time words: no negative prompt (the rule may have missed one)
    assert "时间" not in asked("他们三个人一起去了。") and "金额" not in asked("他们三个人一起去了。")
    assert asked("他们在公园散步。") == {"时间": [], "金额": []}
    text = "中共中央总书记江泽民和记者李明、副主席张伟。"
    found = asked(text, [(0, 4, "ORG"), (7, 10, "PER"), (13, 15, "PER"), (19, 21, "PER")])
    assert found["江泽民的职务"] == ["总书记"] and found["江泽民的任职机构"] == ["中共中央"]
    assert found["李明的职务"] == ["记者"] and "李明的任职机构" not in found
    assert found["张伟的职务"] == ["副主席"]  # 副 stays inside the post (the relation set's guide)
    # a post not right before the person, or a non-organisation before the post: no relation prompt
    found = asked("北京市长王刚说，书记也来了。", [(0, 3, "LOC"), (4, 6, "PER")])
    assert found["王刚的职务"] == ["市长"] and "王刚的任职机构" not in found


def test_relation_prompts_nationality_and_impossible_relations(tmp_path):
    from ernie_zoo.data.extraction_mix import (
        RELATION_OBJECTS,
        build_extraction_mix,
        relation_prompt_examples,
    )

    def asked(text, entities=(), seed=0):
        record = {"text": text, "entities": [{"start": s, "end": e, "type": t} for s, e, t in entities]}
        return {ex.prompt: [text[s:e] for s, e in ex.spans] for ex in relation_prompt_examples([record], seed)}

    text = "俄罗斯总统叶利钦会见了英国外交部长库克。"
    found = asked(text, [(0, 3, "LOC"), (5, 8, "PER"), (11, 13, "LOC"), (17, 19, "PER")])
    assert found["叶利钦的国籍"] == ["俄罗斯"] and found["库克的国籍"] == ["英国"]
    # stationed in a country is not its nationality; a province is not a country; a post that is not national
    assert asked("中国大使张庭延说。", [(0, 2, "LOC"), (4, 7, "PER")])["张庭延的国籍"] == ["中国"]
    assert "张庭延的国籍" not in asked("中国驻韩国大使张庭延说。", [(3, 5, "LOC"), (7, 10, "PER")])
    assert "王刚的国籍" not in asked("江苏省长王刚说。", [(0, 2, "LOC"), (3, 5, "PER")])
    assert "李明的国籍" not in asked("美国记者李明说。", [(0, 2, "LOC"), (4, 6, "PER")])
    # negatives: no organisation and no cue word -> a person can have no 毕业院校 / 任职机构 there; every negative
    # is a relation of the subject's type whose object type is absent or whose cue words are missing
    entities = [(0, 2, "PER"), (3, 5, "LOC")]
    for seed in range(20):
        negatives = {p: v for p, v in asked("李明在北京工作。", entities, seed).items() if not v}
        assert len(negatives) == 1
        (prompt,) = negatives
        relation = prompt.removeprefix("李明的")
        assert RELATION_OBJECTS[relation][0] == "PER" and relation not in {"国籍", "籍贯"}  # 北京 is there
    seen = {next(iter(asked("李明在北京工作。", entities, seed))) for seed in range(40)}
    assert seen == {"李明的毕业院校", "李明的任职机构", "李明的出生地", "李明的出生日期"}
    # a stated relation is never asked as a negative: 毕业 is there, an organisation is there
    text = "李明1990年毕业于北京大学。"
    for seed in range(20):
        assert "李明的毕业院校" not in asked(text, [(0, 2, "PER"), (10, 14, "ORG")], seed)
    # an organisation subject: no person -> 创始人 may be asked; a subject inside another one is not asked
    orgs = {p for seed in range(20) for p in asked("北京大学今年招生。", [(0, 4, "ORG")], seed)}
    assert orgs == {"北京大学的所在地", "北京大学的创始人", "北京大学的成立时间"}  # 今年: a time word, no cue
    nested = [(0, 1, "PER"), (2, 4, "PER")]
    assert {p for seed in range(20) for p in asked("李在李明家。", nested, seed)} <= {
        f"李明的{relation}" for relation in RELATION_OBJECTS
    }

    datasets = tmp_path / "datasets"
    (datasets / "ner").mkdir(parents=True)
    entities = [{"start": 0, "end": 3, "type": "LOC"}, {"start": 5, "end": 8, "type": "PER"}]
    records = [{"text": "俄罗斯总统叶利钦说。", "entities": entities}]
    for split in ("train", "dev", "test"):
        _write_jsonl(datasets / "ner" / f"{split}.jsonl", records)
    plain = build_extraction_mix(tmp_path / "plain", datasets, rules=False)
    more = build_extraction_mix(tmp_path / "more", datasets, rules=False, relations=True)
    # 3 type prompts; with relations + 国籍 and one impossible relation of 叶利钦 (no organisation: 毕业院校 /
    # 任职机构; no cue: 出生地 / 出生日期); test_unseen unchanged
    assert plain == {"dropped_heldout": 0, "train": 3, "dev": 3, "test": 3, "test_unseen": 3}
    assert more == {"dropped_heldout": 0, "train": 5, "dev": 5, "test": 5, "test_unseen": 3}


def test_cli_lists_the_task_and_refuses_bad_schema_json(capsys, random_ie_dir):
    from ernie_zoo.cli import main

    assert main(["taskflow", "--list"]) == 0
    out = capsys.readouterr().out
    assert "information_extraction (aliases: ie)\n    default model: ernie-zoo-e5-ie" in out
    assert main(["taskflow", "ie", "--task-path", str(random_ie_dir), "--schema", '["人物"', "李明"]) == 2
    assert "--schema is not valid JSON" in capsys.readouterr().err
    # the shipped default answers from the command line
    assert main(["taskflow", "ie", "--schema", '["人物", "地点"]', "李明在北京工作。", "--no-progress"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert [(x["text"], x["start"]) for x in row["人物"]] == [("李明", 0)]
    assert [(x["text"], x["start"]) for x in row["地点"]] == [("北京", 3)]


def test_long_training_texts_are_cut_into_windows_like_taskflow():
    from ernie_zoo.finetune import build_args
    from ernie_zoo.finetune.objectives import make_objective

    text = "李明毕业于北京大学。" + FILLER * 6 + "王芳毕业于南京大学。" + FILLER * 6 + "张伟"
    spans = [(0, 2), (text.index("王芳"), text.index("王芳") + 2), (len(text) - 2, len(text))]
    examples = [PromptExample("人物", text, tuple(spans)), PromptExample("城市", text)]
    tokenizer = ErnieZooTokenizerFast.train_vocab(
        [text, "人物城市"], vocab_size=200, min_frequency=1, show_progress=False
    )
    objective = make_objective(build_args({"task": "information_extraction", "data": {"max_length": 32}}))
    features = objective.encode(examples, tokenizer)
    assert len(features) > 2 * (len(text) // 32) and all(len(f["input_ids"]) <= 32 for f in features)
    found = []
    for f in features:
        a, b = f["_window"]
        starts = [t for t, label in enumerate(f["labels"]) if label > 0 and label & 1]
        ends = [t for t, label in enumerate(f["labels"]) if label > 0 and label & 2]
        assert len(starts) == len(ends) == len(f["_gold"])
        for (s, e), ts, te in zip(f["_gold"], starts, ends):
            assert (f["_offsets"][ts][0], f["_offsets"][te][1]) == (
                s,
                e,
            )  # the labelled tokens are the span's
            found.append((f["_index"], a + s, a + e))
    assert found == [(0, s, e) for s, e in spans]  # every span trained, in the text's offsets; none for 城市
    assert sum(f["_missed"] for f in features) == 0

    # a span cut by a window boundary is lost, and counted as a miss once
    boundary = features[0]["_window"][1]
    cut = PromptExample("天气", text, ((boundary - 2, boundary + 2),))  # a prompt as long: the same windows
    features = objective.encode([cut], tokenizer)
    assert not any(f["_gold"] for f in features) and sum(f["_missed"] for f in features) == 1
