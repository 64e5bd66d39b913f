"""The hand-labelled relation set (data/eval/relations, #48): its files parse with the project's doccano reader and
match the manifest, every offset is inside its text, the split is clean, the corpus builders drop its texts; the
evaluator's arithmetic on a hand-made case, and the evaluator end to end on a tiny model."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from ernie_zoo import ErnieZooTokenizerFast
from ernie_zoo.data import corpora
from ernie_zoo.data.annotations import AnnotatedText, Mention, Relation
from ernie_zoo.data.corpora import HeldOut
from ernie_zoo.data.labelled import load_jsonl
from ernie_zoo.data.text import normalize_text
from ernie_zoo.evaluation.relations import (
    ENTITY_TYPES,
    RELATION_TYPES,
    RELATIONS_DIR,
    SCHEMA,
    check_row,
    evaluate_relations,
    load_relation_split,
    score_predictions,
)
from ernie_zoo.models import ErnieZooForSpanExtraction


# ------------------------------------------------------------------------------------------- the files
def test_files_parse_and_match_the_manifest():
    manifest = json.loads((RELATIONS_DIR / "manifest.json").read_text(encoding="utf-8"))
    for name, entry in manifest["files"].items():
        digest = hashlib.sha256((RELATIONS_DIR / name).read_bytes()).hexdigest()
        assert digest == entry["sha256"], f"{name} changed since the manifest was written (build it again)"
    dev, test, labelled = (load_relation_split(s) for s in ("dev", "test", "labelled"))
    assert len(labelled) >= 300
    assert len(dev) == manifest["counts"]["dev"]["texts"] and len(test) == manifest["counts"]["test"]["texts"]
    dev_texts, test_texts = {r.text for r in dev}, {r.text for r in test}
    assert not dev_texts & test_texts and dev_texts | test_texts == {r.text for r in labelled}
    n_relations = sum(len(r.relations) for r in labelled)
    assert n_relations == sum(manifest["counts"]["labelled"]["relations"].values())
    records = load_jsonl(RELATIONS_DIR / "labelled.jsonl")
    evaluation = [r for r in records if r["id"].startswith("rel-")]
    for rows in (evaluation, load_jsonl(RELATIONS_DIR / "test.jsonl")):  # ~15 % sentences with no relation
        assert 0.1 <= sum(1 for r in rows if not r["relations"]) / len(rows) <= 0.2


def test_every_offset_is_the_span_it_names():
    records = load_jsonl(RELATIONS_DIR / "labelled.jsonl")
    for rec in records:
        text = rec["text"]
        assert text == normalize_text(text)
        for e in rec["entities"]:
            span = text[e["start_offset"] : e["end_offset"]]
            assert span and span == span.strip() and e["label"] in ENTITY_TYPES, (rec["id"], e)
            assert "，" not in span and "," not in span and "。" not in span, (rec["id"], span)
        ids = {e["id"] for e in rec["entities"]}
        assert all(r["from_id"] in ids and r["to_id"] in ids for r in rec["relations"])
        assert rec["source"].startswith("msra_train line ")


def _build_script():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "build_relations.py"
    spec = importlib.util.spec_from_file_location("build_relations", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_test_split_is_frozen_and_the_train_pool_is_dev_only(tmp_path):
    build = _build_script()
    test_bytes = (RELATIONS_DIR / "test.jsonl").read_bytes()
    assert hashlib.sha256(test_bytes).hexdigest() == build.FROZEN_TEST_SHA256
    records = load_jsonl(RELATIONS_DIR / "labelled.jsonl")
    dev_ids = [r["id"] for r in load_jsonl(RELATIONS_DIR / "dev.jsonl")]
    test_ids = [r["id"] for r in load_jsonl(RELATIONS_DIR / "test.jsonl")]
    pool = [r["id"] for r in records if r["id"].startswith("pool-")]
    assert len(test_ids) == 187 and len(dev_ids) >= 200 and len(pool) >= 76
    assert set(pool) <= set(dev_ids) and not any(i.startswith("pool-") for i in test_ids)
    assert dev_ids[:124] == [i for i in dev_ids if i.startswith("rel-")]  # the first dev split, then the pool
    assert all(r["id"].startswith(("rel-", "pool-")) for r in records)

    # a rebuild writes the same files; a new train-pool sentence joins dev and leaves test as it is
    for name in ("labelled.jsonl", "GUIDE.md", "annotation.json"):
        (tmp_path / name).write_bytes((RELATIONS_DIR / name).read_bytes())
    build.build(tmp_path)
    for name in ("dev.jsonl", "test.jsonl", "exclude.txt"):
        assert (tmp_path / name).read_bytes() == (RELATIONS_DIR / name).read_bytes(), name
    extra = {
        "id": "pool-9999",
        "text": "李明毕业于北京大学。",
        "entities": [],
        "relations": [],
        "source": "x",
    }
    with (tmp_path / "labelled.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(extra, ensure_ascii=False) + "\n")
    build.build(tmp_path)
    assert (tmp_path / "test.jsonl").read_bytes() == test_bytes
    assert load_jsonl(tmp_path / "dev.jsonl")[-1]["id"] == "pool-9999"

    # dropping a sentence of the evaluation set would move the test split: refused before anything is written
    kept = [r for r in load_jsonl(tmp_path / "labelled.jsonl") if r["id"] != test_ids[0]]
    (tmp_path / "labelled.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8"
    )
    dev_before = (tmp_path / "dev.jsonl").read_bytes()
    with pytest.raises(ValueError, match="the test split would change"):
        build.build(tmp_path)
    assert (tmp_path / "dev.jsonl").read_bytes() == dev_before
    assert (tmp_path / "test.jsonl").read_bytes() == test_bytes
    extra["id"] = "new-1"
    (tmp_path / "labelled.jsonl").write_text(json.dumps(extra, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="starts with neither"):
        build.build(tmp_path)


def test_exclude_list_holds_every_text():
    lines = (RELATIONS_DIR / "exclude.txt").read_text(encoding="utf-8").splitlines()
    assert lines == [r["text"] for r in load_jsonl(RELATIONS_DIR / "labelled.jsonl")]


def test_check_row_refuses_what_the_guide_forbids():
    text = "李明毕业于北京大学。"
    person, school = Mention(1, 0, 2, "人物"), Mention(2, 5, 9, "机构")
    check_row(AnnotatedText(text, [person, school], [Relation(1, 2, "毕业院校")]), "ok")
    with pytest.raises(ValueError, match="x:1: 毕业院校 joins 人物 -> 机构, got 机构 -> 人物"):
        check_row(AnnotatedText(text, [person, school], [Relation(2, 1, "毕业院校")]), "x:1")
    with pytest.raises(ValueError, match="relation type '校友'"):
        check_row(AnnotatedText(text, [person, school], [Relation(1, 2, "校友")]), "x:1")
    with pytest.raises(ValueError, match="entity label '学校'"):
        check_row(AnnotatedText(text, [person, Mention(2, 5, 9, "学校")]), "x:1")
    with pytest.raises(ValueError, match="overlap"):
        check_row(AnnotatedText(text, [Mention(1, 5, 9, "机构"), Mention(2, 5, 7, "地点")]), "x:1")


def test_schema_asks_every_relation_of_its_subject_types():
    assert set(SCHEMA) == set(ENTITY_TYPES)
    for name, (subjects, _) in RELATION_TYPES.items():
        assert all(name in SCHEMA[s] for s in subjects)
    assert SCHEMA["职务"] is None and SCHEMA["时间"] is None


# ------------------------------------------------------------------------------------ kept out of corpora
def test_corpus_builders_drop_the_set(tmp_path):
    """The pretraining corpus's held-out filter (HeldOut.from_datasets, default exclude lists) and the
    information-extraction training mix both drop every text of the set; the MSRA test files stay whole."""
    from ernie_zoo.data.extraction_mix import build_extraction_mix

    assert "data/eval/relations/exclude.txt" in corpora.EXCLUDE_FILES
    texts = [r["text"] for r in load_jsonl(RELATIONS_DIR / "labelled.jsonl")]
    held = HeldOut.from_exclude_files()
    assert all(held.contains(normalize_text(t)) for t in texts)
    assert not held.contains("今天天气很好,我们去公园散步。")

    datasets = tmp_path / "datasets"
    (datasets / "ner").mkdir(parents=True)
    victim = texts[0]
    kept = "今天天气很好,我们去公园散步。"
    rows = [{"text": t, "entities": [{"start": 0, "end": 2, "type": "PER"}]} for t in (victim, kept)]
    for split in ("train", "dev", "test"):
        (datasets / "ner" / f"{split}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    counts = build_extraction_mix(tmp_path / "mix", datasets)
    assert counts["dropped_heldout"] == 2  # train and dev
    for name in ("train", "dev"):
        contents = [json.loads(line)["content"] for line in (tmp_path / "mix" / f"{name}.jsonl").open()]
        assert victim not in contents and kept in contents
    test_contents = {json.loads(line)["content"] for line in (tmp_path / "mix" / "test.jsonl").open()}
    assert victim in test_contents  # the public MSRA test is not cut
    assert build_extraction_mix(tmp_path / "mix2", datasets, exclude_files=[])["dropped_heldout"] == 0


# ------------------------------------------------------------------------------------------- the scores
def _row(text: str, entities: list[tuple[int, int, str]], relations: list[tuple[int, int, str]]):
    return AnnotatedText(
        text,
        [Mention(i, s, e, label) for i, (s, e, label) in enumerate(entities)],
        [Relation(a, b, kind) for a, b, kind in relations],
    )


def test_score_arithmetic_on_a_hand_made_case():
    #      0123456789012345
    a = "王芳毕业于南京大学，现任上海公司经理。"
    b = "李明是北京人。"
    rows = [
        _row(
            a,
            [(0, 2, "人物"), (5, 9, "机构"), (12, 16, "机构"), (16, 18, "职务")],
            [(0, 1, "毕业院校"), (0, 2, "任职机构"), (0, 3, "职务")],
        ),
        _row(b, [(0, 2, "人物"), (3, 5, "地点")], [(0, 1, "籍贯")]),
    ]
    item = lambda t, s, e, **rel: {"text": t, "start": s, "end": e, "probability": 0.9, **rel}  # noqa: E731
    results = [
        {  # entities: 王芳 right, 南京大学 right, 上海 wrong (gold 上海公司), 经理 right -> 3 of 4 predicted are right
            "人物": [
                item(
                    "王芳",
                    0,
                    2,
                    relations={
                        "毕业院校": [item("南京大学", 5, 9)],  # right
                        "任职机构": [item("上海", 12, 14)],  # wrong object
                        "职务": [item("经理", 16, 18), item("现任", 10, 12)],  # one right, one wrong
                    },
                )
            ],
            "机构": [item("南京大学", 5, 9), item("上海", 12, 14)],
            "职务": [item("经理", 16, 18)],
        },
        {  # 李明 right; 北京 found as 机构 (wrong type); the 籍贯 triple right (its object text matches)
            "人物": [item("李明", 0, 2, relations={"籍贯": [item("北京", 3, 5)]})],
            "机构": [item("北京", 3, 5)],
        },
    ]
    scores = score_predictions(rows, results)
    ent, tri = scores["entities"], scores["triples"]
    assert (ent["tp"], ent["pred"], ent["gold"]) == (4, 6, 6)
    assert ent["precision"] == ent["recall"] == ent["f1"] == pytest.approx(2 / 3)
    assert ent["per_type"]["机构"] == {
        "precision": 1 / 3,
        "recall": 1 / 2,
        "f1": pytest.approx(0.4),
        "tp": 1,
        "pred": 3,
        "gold": 2,
    }
    assert ent["per_type"]["地点"]["recall"] == 0.0 and ent["per_type"]["地点"]["pred"] == 0
    assert (tri["tp"], tri["pred"], tri["gold"]) == (3, 5, 4)
    assert tri["f1"] == pytest.approx(2 * 0.6 * 0.75 / 1.35)
    assert tri["per_type"]["任职机构"]["tp"] == 0 and tri["per_type"]["籍贯"]["f1"] == 1.0
    # two mentions of one name ask the same prompt: a triple counts once per sentence
    twice = [{"人物": [item("王芳", 0, 2, relations={"毕业院校": [item("南京大学", 5, 9)]})] * 2}, {}]
    assert score_predictions(rows, twice)["triples"]["pred"] == 1
    with pytest.raises(ValueError, match="1 results for 2 annotated texts"):
        score_predictions(rows, results[:1])


def test_evaluate_on_a_tiny_model(tmp_path):
    """End to end through Taskflow on a tiny random model: the scores are those of the Taskflow results, and
    the gold counts those of the files."""
    from ernie_zoo.taskflow import Taskflow

    rows = [
        {
            "id": 1,
            "text": "王芳毕业于南京大学。",
            "entities": [
                {"id": 1, "start_offset": 0, "end_offset": 2, "label": "人物"},
                {"id": 2, "start_offset": 5, "end_offset": 9, "label": "机构"},
            ],
            "relations": [{"id": 1, "from_id": 1, "to_id": 2, "type": "毕业院校"}],
            "source": "x",
        },
        {"id": 2, "text": "今天天气很好。", "entities": [], "relations": [], "source": "x"},
    ]
    (tmp_path / "test.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    texts = [r["text"] for r in rows] + list(SCHEMA) + [n for v in SCHEMA.values() for n in v or ()]
    tokenizer = ErnieZooTokenizerFast.train_vocab(texts, vocab_size=120, min_frequency=1, show_progress=False)
    torch.manual_seed(0)
    model_dir = tmp_path / "model"
    ErnieZooForSpanExtraction(tiny_config(tokenizer, max_position_embeddings=128)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = evaluate_relations(model_dir, ("test",), directory=tmp_path, position_prob=0.3)
    assert out["test"]["entities"]["gold"] == 2 and out["test"]["triples"]["gold"] == 1
    flow = Taskflow("information_extraction", task_path=str(model_dir), schema=SCHEMA, position_prob=0.3)
    expected = score_predictions(load_relation_split("test", tmp_path), flow([r["text"] for r in rows]))
    assert out["test"] == expected
    with pytest.raises(ValueError, match="split must be dev, test or labelled"):
        evaluate_relations(model_dir, ("train",), directory=tmp_path)


def test_loader_refuses_a_row_the_guide_forbids(tmp_path):
    row = {
        "id": 1,
        "text": "李明毕业于北京大学。",
        "entities": [
            {"id": 1, "start_offset": 0, "end_offset": 2, "label": "人物"},
            {"id": 2, "start_offset": 5, "end_offset": 9, "label": "机构"},
        ],
        "relations": [{"id": 1, "from_id": 2, "to_id": 1, "type": "毕业院校"}],
    }
    Path(tmp_path / "dev.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"dev.jsonl:1: 毕业院校 joins"):
        load_relation_split("dev", tmp_path)
