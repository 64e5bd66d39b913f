"""`ernie-zoo eval` of an information-extraction model (kind "extraction"): the per-name, per-type, micro, held-out
and silver arithmetic on hand-written Taskflow results; the same numbers through `evaluate_zoo` on a span extractor
whose outputs the test controls (test_information_extraction's RuleModel); the NER default's score read from an
earlier results file only when it was measured on the same MSRA files; and the card rendered from those results."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from conftest import tiny_config
from test_information_extraction import RuleModel

from ernie_zoo import ErnieZooTokenizerFast
from ernie_zoo.data.extraction_mix import HELD_OUT_NAMES, RULE_TYPES, TYPE_NAMES
from ernie_zoo.data.labelled import SPLITS, write_datasets
from ernie_zoo.evaluation import zoo
from ernie_zoo.evaluation.cards import render_card
from ernie_zoo.evaluation.extraction import NER_SCHEMA, score_extraction
from ernie_zoo.evaluation.relations import SCHEMA
from ernie_zoo.models import ErnieZooForSpanExtraction


def _record(text: str, *entities: tuple[str, str]) -> dict:
    spans = [{"start": text.index(s), "end": text.index(s) + len(s), "type": k} for s, k in entities]
    return {"text": text, "entities": spans}


RECORDS = [
    _record("李明在北京工作。", ("李明", "PER"), ("北京", "LOC")),
    _record("王芳加入了联合国。", ("王芳", "PER"), ("联合国", "ORG")),
    _record("一九九八年三月五日，张伟花了五十万元。", ("张伟", "PER")),
]
# what each prompt finds (every occurrence in every text); a name not here finds nothing
RULES = {
    "人物": ["李明", "王芳", "张伟"],  # PER: all three
    "人名": ["李明"],  # 1 of 3
    "姓名": ["李明", "北京"],  # 1 of 3, one wrong
    "地点": ["北京"],
    "位置": ["北京", "工作"],
    "组织": ["联合国", "李明"],  # 机构 and 机构名 find nothing
    "人": ["李", "王芳"],  # held out: a cut name and a right one
    "地方": ["北京"],
    "时间": ["一九九八年三月五日"],  # the rule's span
    "金额": ["五十万"],  # the rule's is 五十万元
    "王芳的毕业院校": ["南京大学"],
}
# one sentence of the relation set's shape (a doccano relation export row): 王芳 (人物) 毕业院校 南京大学 (机构)
RELATION_ROW = {"id": 1, "text": "王芳毕业于南京大学。", "source": "x"}
RELATION_ROW["entities"] = [
    {"id": i, "start_offset": s, "end_offset": e, "label": k}
    for i, s, e, k in ((1, 0, 2, "人物"), (2, 5, 9, "机构"))
]
RELATION_ROW["relations"] = [{"id": 1, "from_id": 1, "to_id": 2, "type": "毕业院校"}]


def _found(text: str) -> dict:
    """The Taskflow result RuleModel gives for `text` (every name asked), written out without a model."""
    out = {}
    for name, targets in RULES.items():
        spans = sorted((i, i + len(t)) for t in targets if (i := text.find(t)) >= 0)
        if spans:
            out[name] = [{"text": text[s:e], "start": s, "end": e} for s, e in spans]
    return out


def test_score_arithmetic_on_hand_written_results():
    s = score_extraction(RECORDS, [_found(r["text"]) for r in RECORDS])
    names = s["names"]
    assert list(names) == [n for t in (TYPE_NAMES, HELD_OUT_NAMES) for ns in t.values() for n in ns]
    assert (names["人物"]["f1"], names["人名"]["recall"], names["人名"]["precision"]) == (1.0, 1 / 3, 1.0)
    assert (names["姓名"]["tp"], names["姓名"]["fp"], names["姓名"]["fn"]) == (1, 1, 2)
    assert names["姓名"]["f1"] == pytest.approx(0.4)
    assert names["位置"]["f1"] == pytest.approx(2 / 3) and names["地名"]["f1"] == 0.0
    nothing = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "tp": 0, "fp": 0, "fn": 1}
    assert names["机构"] == {"type": "ORG", "held_out": False, **nothing}
    assert names["人"]["held_out"] and (names["人"]["tp"], names["人"]["fp"]) == (1, 1)
    means = {"PER": (1 + 0.5 + 0.4) / 3, "LOC": (1 + 0 + 2 / 3) / 3, "ORG": (0 + 2 / 3 + 0) / 3}
    assert s["trained_mean_f1"] == pytest.approx(means)
    # the first names (人物, 地点, 机构): 4 of 5 gold spans, nothing wrong
    assert s["prompts"] == {"PER": "人物", "LOC": "地点", "ORG": "机构"}
    assert (s["micro"]["tp"], s["micro"]["fp"], s["micro"]["fn"]) == (4, 0, 1)
    assert s["micro"]["f1"] == pytest.approx(8 / 9) and s["per_type"]["ORG"]["recall"] == 0.0
    # held out (人, 地方, 单位): 2 right of 3 found, 5 gold
    h = s["held_out"]
    assert h["prompts"] == {"PER": "人", "LOC": "地方", "ORG": "单位"}
    assert (h["micro"]["precision"], h["micro"]["recall"]) == (pytest.approx(2 / 3), 0.4)
    assert h["micro"]["f1"] == pytest.approx(0.5)
    # silver: the rules are the gold (one date, one sum); 五十万 is not the rule's 五十万元
    assert set(s["silver"]) == set(RULE_TYPES)
    assert (s["silver"]["时间"]["f1"], s["silver"]["时间"]["tp"] + s["silver"]["时间"]["fn"]) == (1.0, 1)
    assert (s["silver"]["金额"]["tp"], s["silver"]["金额"]["fp"], s["silver"]["金额"]["fn"]) == (0, 1, 1)
    with pytest.raises(ValueError, match="2 results for 3 records"):
        score_extraction(RECORDS, [{}, {}])


@pytest.fixture(scope="module")
def ie_dir(tmp_path_factory):
    """A random tiny span extractor whose tokenizer holds every character of the texts and prompts."""
    prompts = [*RULES, *SCHEMA, *(n for v in SCHEMA.values() for n in v or ())]
    prompts += [n for t in (TYPE_NAMES, HELD_OUT_NAMES) for ns in t.values() for n in ns]
    texts = [r["text"] for r in RECORDS] + [RELATION_ROW["text"], "的", *prompts]
    tokenizer = ErnieZooTokenizerFast.train_vocab(texts, vocab_size=200, min_frequency=1, show_progress=False)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ie") / "model"
    ErnieZooForSpanExtraction(tiny_config(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def rule_taskflow(monkeypatch):
    """Every Taskflow the evaluation builds answers with RuleModel(RULES)."""
    from ernie_zoo import taskflow

    real = taskflow.Taskflow

    def make(*args, **kwargs):
        flow = real(*args, **kwargs)
        flow._task.model = RuleModel(flow._task.tokenizer, RULES)
        return flow

    monkeypatch.setattr(taskflow, "Taskflow", make)


@pytest.fixture
def datasets(tmp_path):
    root = tmp_path / "datasets"
    poem = {"title": "诗", "author": "", "dynasty": "tang", "text": "春眠不觉晓。"}
    manifest = {
        "ner": write_datasets(root, "ner", {"train": RECORDS, "dev": RECORDS[:2], "test": RECORDS}, {}),
        "sentiment": write_datasets(
            root, "sentiment", {s: [{"text": "好", "label": "positive"}] for s in SPLITS}, {}
        ),
        "poetry": write_datasets(root, "poetry", {s: [poem] for s in SPLITS}, {}),
    }
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    hashes = {t: {s: f["sha256"] for s, f in m["files"].items()} for t, m in manifest.items()}
    (root / "baselines.json").write_text(json.dumps({"datasets_sha256": hashes}), encoding="utf-8")
    (root / "relations").mkdir()
    row = json.dumps(RELATION_ROW, ensure_ascii=False)
    (root / "relations" / "test.jsonl").write_text(row + "\n", encoding="utf-8")
    return root


def _earlier_results(path, ner_hashes, f1=0.8):
    entry = {
        "test": {"micro": {"f1": f1}, "texts_per_s": 50.0},
        "cpu_threads": 2,
        "weights_sha256": "ab" * 32,
    }
    path.write_text(
        json.dumps({"datasets_sha256": {"ner": ner_hashes}, "models": {"ernie-zoo-mini-ner": entry}}),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def evaluated(ie_dir, datasets, rule_taskflow, monkeypatch, tmp_path):
    from ernie_zoo.evaluation import relations

    monkeypatch.setitem(zoo.ZOO_MODELS, "ie-under-test", "extraction")
    monkeypatch.setattr(
        relations, "RELATIONS_DIR", datasets / "relations"
    )  # the default the evaluation reads
    manifest = json.loads((datasets / "manifest.json").read_text(encoding="utf-8"))
    ner_hashes = {s: f["sha256"] for s, f in manifest["ner"]["files"].items()}
    results = zoo.evaluate_zoo(
        {"ie-under-test": ie_dir},
        datasets=datasets,
        baselines_file=datasets / "baselines.json",
        results_file=_earlier_results(tmp_path / "earlier.json", ner_hashes),
    )
    return results, ner_hashes


def test_evaluate_zoo_scores_an_extraction_model_through_taskflow(evaluated, tmp_path):
    results, ner_hashes = evaluated
    r = results["models"]["ie-under-test"]
    assert r["kind"] == "extraction"
    # RuleModel answers through Taskflow exactly what _found writes out: the scores are score_extraction's
    expected = score_extraction(RECORDS, [_found(rec["text"]) for rec in RECORDS])
    assert {k: v for k, v in r["test"].items() if k not in ("texts_per_s", "names_sentences")} == expected
    assert r["test"]["texts_per_s"] > 0 and r["position_prob"] == 0.5
    assert r["test"]["names_sentences"] == len(RECORDS)
    # the relation set: 人物 王芳 and her 毕业院校 found, the 机构 missed
    rel = r["relations"]
    assert (rel["entities"]["tp"], rel["entities"]["pred"], rel["entities"]["gold"]) == (1, 1, 2)
    assert (rel["triples"]["tp"], rel["triples"]["gold"]) == (1, 1)
    s = r["sample"]
    assert s["schema"] == NER_SCHEMA == ["人物", "地点", "机构"] and s["texts"] == [
        x["text"] for x in RECORDS
    ]
    assert s["pred"][0] == [{"start": 0, "end": 2, "type": "PER"}, {"start": 3, "end": 5, "type": "LOC"}]
    assert s["micro_f1"] == pytest.approx(8 / 9)
    assert r["ner_default"] == {
        "model": "ernie-zoo-mini-ner",
        "weights_sha256": "ab" * 32,
        "test_micro_f1": 0.8,
        "texts_per_s": 50.0,
        "cpu_threads": 2,
    }
    from ernie_zoo.commands.eval import summary_table

    rows = [line.split() for line in summary_table(results).splitlines()[1:]]
    assert rows == [
        ["ie-under-test", "MSRA", "test", "micro-F1", "0.8889", "0.8000", "(ernie-zoo-mini-ner)"],
        ["ie-under-test", "relation", "set", "test", "triple", "F1", "1.0000", "-"],
    ]


def test_the_ner_score_comes_from_the_same_msra_files(tmp_path):
    here = {"datasets_sha256": {"ner": {"test": "1"}}, "models": {}}
    other = _earlier_results(tmp_path / "other.json", {"test": "2"})
    assert zoo._ner_reference(here, other) is None  # measured on other files: no comparison
    assert zoo._ner_reference(here, None) is None and zoo._ner_reference(here, tmp_path / "none.json") is None
    same = _earlier_results(tmp_path / "same.json", {"test": "1"}, f1=0.7)
    assert zoo._ner_reference(here, same)["test_micro_f1"] == 0.7
    # this run's own evaluation of the NER default wins over the file's
    here["models"]["ernie-zoo-mini-ner"] = {"test": {"micro": {"f1": 0.9}}}
    assert zoo._ner_reference(here, same)["test_micro_f1"] == 0.9


def test_the_card_renders_from_the_results(evaluated):
    r = evaluated[0]["models"]["ie-under-test"]
    card = render_card("ie-under-test", r)
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "transformers" and front["pipeline_tag"] == "token-classification"
    values = [m["value"] for res in front["model-index"][0]["results"] for m in res["metrics"]]
    assert round(8 / 9, 4) in values and 0.5 in values  # first names' micro F1, held-out micro F1
    ratio = "IE with the trained names: micro F1 0.8889 = 111.1% of the NER default's F1 0.8000"
    assert ratio + ' (`ernie-zoo-mini-ner`, `Taskflow("ner")`, the same test split)' in card
    assert "| 姓名 | PER | no | 0.5000 | 0.3333 | 0.4000 |" in card
    assert "| 人 | PER | yes | 0.5000 | 0.3333 | 0.4000 |" in card
    assert "| PER | 0.6333 | 1.0000 | 0.4000 |" in card  # mean of the trained names, 人物, 人
    assert f"texts/s with the three names ({r['cpu_threads']} CPU thread" in card
    assert "against 50.0 texts/s for the NER default (2 CPU threads)" in card
    assert "agreement with the rule labels (silver)" in card
    assert "| 金额 | `MONEY_PATTERN` | 0.0000 | 0.0000 | 0.0000 | 1 |" in card
    assert "Entity micro F1 **0.6667**, triple micro F1 **1.0000**" in card
    assert "| 毕业院校 | 1.0000 | 1.0000 | 1.0000 | 1 |" in card
    assert "PER 人物 / 人名 / 姓名; LOC 地点 / 地名 / 位置; ORG 机构 / 组织 / 机构名" in card
    assert "held-out names 人 / 地方 / 单位 are never trained on" in card
    assert "{{" not in card and "None" not in card
    # an adapter on the e5 base, with no NER score to compare: peft's card, no ratio
    adapter = {"base_model": "ernie-zoo-e5-small-zh", "peft_type": "LORA", "r": 8, "lora_alpha": 16}
    adapter |= {"target_modules": ["key", "query", "value"], "modules_to_save": ["span_head"]}
    r2 = {k: v for k, v in r.items() if k != "ner_default"} | {"adapter": adapter}
    card = render_card("ie-under-test", r2)
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "peft" and front["base_model"] == "ernie-zoo-e5-small-zh"
    assert "IE with the trained names" not in card and "NER default" not in card
    assert "LoRA adapter (r 8, alpha 16 on key, query, value; span_head trained fully)" in card


def test_a_second_release_names_the_first_and_its_scores(evaluated):
    """A release that replaces (and continues) an earlier one: the card's changes table compares the scores that
    `release_scores` reads from both entries, and the training text names the release it started from."""
    from ernie_zoo.evaluation.cards import release_scores

    r = evaluated[0]["models"]["ie-under-test"]
    now = release_scores(r)
    assert now == {
        "MSRA test micro-F1, trained names (人物 / 地点 / 机构)": r["test"]["micro"]["f1"],
        "MSRA test micro-F1, held-out names (人 / 地方 / 单位)": r["test"]["held_out"]["micro"]["f1"],
        "relation set test entity F1, zero-shot": r["relations"]["entities"]["f1"],
        "relation set test triple F1, zero-shot": r["relations"]["triples"]["f1"],
    }
    before = {name: value - 0.1 for name, value in now.items()}
    training = {
        "recipe": "recipes/zoo/ie-stage2.yaml",
        "steps": 2000,
        "previous_release": {
            "weights": "ie-under-test 387f6e20",
            "recipe": "recipes/zoo/ie.yaml",
            "why": "more steps",
            "scores": before,
        },
        "continued_from": {
            "weights": "ie-under-test 387f6e20",
            "recipe": "recipes/zoo/ie.yaml",
            "steps": 1500,
            "train_seconds": 2091.8,
            "extracted": {"rank": 96},
        },
    }
    card = render_card("ie-under-test", r | {"training": training})
    assert "### Changes from the previous release" in card
    assert "This release replaces `ie-under-test 387f6e20` (`recipes/zoo/ie.yaml`). Why: more steps." in card
    name = "MSRA test micro-F1, trained names (人物 / 地点 / 机构)"
    assert f"| {name} | {now[name] - 0.1:.4f} | {now[name]:.4f} | +0.1000 |" in card
    assert (
        "Fine-tuned with `recipes/zoo/ie-stage2.yaml` (2000 steps), continuing the release `ie-under-test "
        "387f6e20` (`recipes/zoo/ie.yaml`, 1500 steps, 34.9 min, shipped as its rank-96 difference from the base),"
        in card
    )
    assert "{{" not in card and "None" not in card


def test_the_few_shot_curve_of_the_model_goes_into_its_card(evaluated, tmp_path):
    import hashlib

    from ernie_zoo.evaluation.relations import RELATIONS_DIR

    test_sha = hashlib.sha256((RELATIONS_DIR / "test.jsonl").read_bytes()).hexdigest()
    point = {"n": 25, "method": "lora", "batch_size": 16, "learning_rate": None, "steps": 150}
    point |= {"train_minutes": 7.3, "triple_precision": 0.38, "triple_recall": 0.5, "triple_f1": 0.4318}
    point |= {"entity_f1": 0.79}
    mine, earlier = "a" * 64, "b" * 64  # the weights of this release of the model, and of an earlier one
    rows = [
        {**point, "base": "ie-under-test", "base_sha256": mine, "n": 50, "triple_f1": 0.5},
        {**point, "base": "ie-under-test", "base_sha256": mine},
        {**point, "base": "ie-under-test", "base_sha256": earlier, "n": 100, "triple_f1": 0.9},
        {**point, "base": "ernie-zoo-mini-zh", "base_sha256": mine, "triple_f1": 0.0},  # another base
    ]
    path = tmp_path / "ie_fewshot.json"
    path.write_text(json.dumps({"test_sha256": test_sha, "machine": "m", "points": rows}), encoding="utf-8")
    curve = zoo.few_shot_curve("ie-under-test", path, mine)
    assert [p["n"] for p in curve["points"]] == [25, 50] and curve["points"][1]["triple_f1"] == 0.5
    assert [p["n"] for p in zoo.few_shot_curve("ie-under-test", path, earlier)["points"]] == [100]
    assert zoo.few_shot_curve("ie-under-test", path, "c" * 64) is None  # a release nobody measured
    assert zoo.few_shot_curve("ie-under-test", path, None) is None
    assert zoo.few_shot_curve("another-model", path, mine) is None
    path.write_text(json.dumps({"test_sha256": "0" * 64, "points": rows}), encoding="utf-8")
    assert zoo.few_shot_curve("ie-under-test", path, mine) is None  # scored on another test split
    r = evaluated[0]["models"]["ie-under-test"] | {"few_shot": curve}
    card = render_card("ie-under-test", r)
    assert "### Few-shot: fine-tuned on a few labelled sentences" in card
    assert "| 25 | lora, 16 | 150 | 7.3 | 0.3800 / 0.5000 / **0.4318** | 0.7900 |" in card
    assert "### Few-shot" not in render_card("ie-under-test", evaluated[0]["models"]["ie-under-test"])
