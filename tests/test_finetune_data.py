"""Fine-tuning data: csv/tsv/jsonl via datasets, char-per-line NER files, span files, and clear errors for bad
files (empty, wrong columns, unknown labels, bad tags, bad spans)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ernie_zoo.finetune import build_args
from ernie_zoo.finetune.data import detect_format, read_tagged_file
from ernie_zoo.finetune.objectives import make_objective
from ernie_zoo.text.tags import Span

DATA = Path(__file__).parent / "data" / "finetune"


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def _jsonl(path: Path, rows) -> str:
    return _write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _task(task="sequence_classification", **data):
    task_obj = make_objective(build_args({"task": task, "data": data}))
    task_obj.read()
    return task_obj


def test_csv_tsv_jsonl_read_the_same(tmp_path):
    rows = [("这家店很好，推荐！", "pos"), ('他说"太差了"', "neg"), ("NA", "neg")]
    csv = _write(
        tmp_path / "a.csv",
        "text,label\n" + "".join(f'"{t.replace(chr(34), chr(34) * 2)}",{lab}\n' for t, lab in rows),
    )
    tsv = _write(tmp_path / "a.tsv", "text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in rows))
    jsonl = _jsonl(tmp_path / "a.jsonl", [{"text": t, "label": lab} for t, lab in rows])
    for path in (csv, tsv, jsonl):
        task = _task(train_file=path)
        assert [(e.text, e.labels) for e in task.splits["train"]] == [(t, [lab]) for t, lab in rows]
        assert task.labels == ["neg", "pos"]


def test_json_array_files_and_rows_missing_a_column(tmp_path):
    rows = [{"text": "很好", "label": "pos"}, {"text": "太差", "label": "neg"}]
    array = _write(tmp_path / "a.json", json.dumps(rows, ensure_ascii=False))
    assert [(e.text, e.labels) for e in _task(train_file=array).splits["train"]] == [
        ("很好", ["pos"]),
        ("太差", ["neg"]),
    ]
    # every row gets every column (None where it lacks one), so the message names the row, not a KeyError
    path = _jsonl(tmp_path / "m.jsonl", [rows[0], {"text": "一般"}])
    with pytest.raises(ValueError, match=r"m.jsonl row 2: label must be a single value, got None"):
        _task(train_file=path)
    with pytest.raises(ValueError, match=r"b.json: item 2 of the JSON array is not an object"):
        _task(train_file=_write(tmp_path / "b.json", '[{"text": "好", "label": "a"}, 3]'))


def test_text_pairs_and_numeric_labels(tmp_path):
    path = _write(tmp_path / "p.tsv", "q\tp\ty\n今天天气好吗\t今天天气很好\t1\n你是谁\t明天下雨\t0\n")
    task = _task(train_file=path, text_column="q", text_pair_column="p", label_column="y")
    assert task.splits["train"][0].text_pair == "今天天气很好"
    assert task.labels == ["0", "1"]


def test_multi_label(tmp_path):
    path = _write(tmp_path / "m.csv", 'text,label\n屏幕好电池差,"screen,battery"\n物流快,shipping\n')
    task = _task(train_file=path, multi_label=True)
    assert task.labels == ["battery", "screen", "shipping"]
    assert task.splits["train"][0].labels == ["screen", "battery"]
    assert task.default_metric == "micro_f1"


def test_empty_file(tmp_path):
    path = _write(tmp_path / "e.csv", "")
    with pytest.raises(ValueError, match="is empty"):
        _task(train_file=path)
    path = _write(tmp_path / "h.csv", "text,label\n")
    with pytest.raises(ValueError, match="no rows"):
        _task(train_file=path)
    with pytest.raises(ValueError, match="does not exist"):
        _task(train_file=str(tmp_path / "missing.csv"))


def test_wrong_columns_name_what_exists(tmp_path):
    path = _write(tmp_path / "w.csv", "sentence,sentiment\n好,1\n差,0\n")
    with pytest.raises(
        ValueError, match=r"missing column\(s\) \['text', 'label'\].*\['sentence', 'sentiment'\]"
    ):
        _task(train_file=path)
    ok = _task(train_file=path, text_column="sentence", label_column="sentiment")
    assert len(ok.splits["train"]) == 2


def test_unknown_labels(tmp_path):
    train = _jsonl(tmp_path / "t.jsonl", [{"text": "好", "label": "pos"}, {"text": "差", "label": "neg"}])
    dev = _jsonl(tmp_path / "d.jsonl", [{"text": "一般", "label": "neutral"}])
    with pytest.raises(ValueError, match="unknown label 'neutral'"):
        _task(train_file=train, dev_file=dev)
    with pytest.raises(ValueError, match="unknown label 'neg'"):
        _task(train_file=train, labels=["pos", "other"])
    single = _jsonl(tmp_path / "s.jsonl", [{"text": "好", "label": "pos"}])
    with pytest.raises(ValueError, match="at least 2 distinct labels"):
        _task(train_file=single)


def test_empty_text_and_list_label(tmp_path):
    path = _jsonl(tmp_path / "x.jsonl", [{"text": "好", "label": "a"}, {"text": " ", "label": "b"}])
    with pytest.raises(ValueError, match="row 2: empty 'text'"):
        _task(train_file=path)
    path = _jsonl(tmp_path / "y.jsonl", [{"text": "好", "label": ["a", "b"]}])
    with pytest.raises(ValueError, match="multi_label"):
        _task(train_file=path)


def test_hub_dataset_offline_error():
    with pytest.raises(ValueError, match="could not load split 'train' of dataset 'no-such-org/no-such-set'"):
        _task(dataset_name="no-such-org/no-such-set")


def test_format_detection():
    assert detect_format("x.TSV") == "tsv"
    assert detect_format("x.bmes") == "conll"
    assert detect_format("x.data", "jsonl") == "jsonl"
    with pytest.raises(ValueError, match="extension"):
        detect_format("x.data")
    with pytest.raises(ValueError, match="file_format"):
        detect_format("x.csv", "parquet")


# ------------------------------------------------------------------------------------------------ NER


def test_bmes_file_with_a_space_character():
    examples = read_tagged_file(DATA / "ner_bmes.txt")
    assert len(examples) == 8
    first = examples[0]
    assert first.text == "张伟在北京大学读书。"
    assert [first.text[s.start : s.end] for s in first.entities] == ["张伟", "北京大学"]
    spaced = examples[4]
    assert spaced.text == "新华社 报道，杭州今天下雪。"  # the "  O" line is a space character
    assert [(spaced.text[s.start : s.end], s.type) for s in spaced.entities] == [
        ("新华社", "ORG"),
        ("杭州", "LOC"),
    ]


def test_bio_tab_file_and_errors(tmp_path):
    path = _write(tmp_path / "a.bio", "王\tB-PER\n五\tI-PER\n来\tO\n\n上\tB-LOC\n海\tI-LOC\n")
    examples = read_tagged_file(path)
    assert [(e.text, e.entities) for e in examples] == [
        ("王五来", [Span(0, 2, "PER")]),
        ("上海", [Span(0, 2, "LOC")]),
    ]
    bad = _write(tmp_path / "b.bio", "王 B-PER\n五 Q-PER\n")
    with pytest.raises(ValueError, match="Q-PER"):
        read_tagged_file(bad)
    no_tag = _write(tmp_path / "c.bio", "王\n")
    with pytest.raises(ValueError, match=r"c.bio:1"):
        read_tagged_file(no_tag)
    mixed = _write(tmp_path / "d.bio", "王 B-PER\n五 I-PER\n\n上 B-LOC\n海 M-LOC\n")
    with pytest.raises(ValueError, match="mix"):
        read_tagged_file(mixed)
    empty = _write(tmp_path / "e.bio", "\n\n")
    with pytest.raises(ValueError, match="empty"):
        read_tagged_file(empty)


def test_span_jsonl_and_errors(tmp_path):
    good = _jsonl(
        tmp_path / "g.jsonl",
        [
            {
                "text": "李娜去了上海",
                "entities": [
                    {"start": 0, "end": 2, "type": "PER", "text": "李娜"},
                    {"start": 4, "end": 6, "type": "LOC"},
                ],
            }
        ],
    )
    task = _task("token_classification", train_file=good)
    assert task.entity_types == ["LOC", "PER"]
    assert task.labels == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    cases = [
        ({"start": 4, "end": 9, "type": "LOC"}, "outside the text"),
        ({"start": 0, "end": 2, "type": "PER", "text": "李"}, "entity text"),
        ({"start": 0, "type": "PER"}, "start, end and type"),
    ]
    for i, (entity, message) in enumerate(cases):
        path = _jsonl(tmp_path / f"bad{i}.jsonl", [{"text": "李娜去了上海", "entities": [entity]}])
        with pytest.raises(ValueError, match=message):
            _task("token_classification", train_file=path)
    nested = _jsonl(
        tmp_path / "n.jsonl",
        [
            {
                "text": "北京大学",
                "entities": [{"start": 0, "end": 4, "type": "ORG"}, {"start": 0, "end": 2, "type": "LOC"}],
            }
        ],
    )
    with pytest.raises(ValueError, match="overlap"):
        _task("token_classification", train_file=nested)
    wrong_type = _jsonl(
        tmp_path / "w.jsonl", [{"text": "李娜", "entities": [{"start": 0, "end": 2, "type": "PER"}]}]
    )
    with pytest.raises(ValueError, match="unknown entity type 'PER'"):
        _task("token_classification", train_file=wrong_type, entity_types=["LOC"])
    with pytest.raises(ValueError, match="token_classification"):
        _task("sequence_classification", train_file=str(DATA / "ner_bmes.txt"))


@pytest.mark.parametrize("scheme", ["bio", "bioes"])
def test_ner_encoding_aligns_labels_with_spans(scheme, tiny_tokenizer):
    task = _task("token_classification", train_file=str(DATA / "ner_bmes.txt"), tag_scheme=scheme)
    features = task.encode(task.splits["train"], tiny_tokenizer)
    for f, ex in zip(features, task.splits["train"]):
        assert f["labels"][0] == -100 and f["labels"][-1] == -100  # [CLS], [SEP]
        decoded = task.decode(f["labels"], f["_offsets"])
        assert decoded == ex.entities
    # the space character has no token of its own, so the sentence has one token fewer than characters
    spaced = features[4]
    assert sum(o is not None for o in spaced["_offsets"]) == len(task.splits["train"][4].text) - 1
