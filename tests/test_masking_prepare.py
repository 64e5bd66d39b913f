"""Knowledge masking preprocessing: boundaries, bad data, splitting, caching and `ernie-zoo prepare-data`."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ernie_zoo.masking import (
    COLUMNS,
    EntityLexicon,
    KnowledgeMaskingCollator,
    Segmenter,
    load_prepared,
    prepare_dataset,
    prepare_dataset_with_stats,
    split_long_text,
)
from ernie_zoo.masking import prepare as prepare_module


def test_split_long_text():
    sentence = "今天天气很好，我们去公园散步。"  # 15 characters
    text = sentence * 10
    pieces, hard = split_long_text(text, 40)
    assert hard == 0 and all(len(p) <= 40 for p in pieces)
    assert all(p.endswith("。") for p in pieces) and "".join(pieces) == text
    assert len(pieces) == 5  # two sentences (30 characters) per piece

    run = "好" * 95 + "。" + "”后记"
    pieces, hard = split_long_text(run, 40)
    assert hard == 1 and all(len(p) <= 40 for p in pieces)
    assert "".join(pieces) == run
    assert split_long_text("短句。", 40) == (["短句。"], 0)
    # closing quotes stay with their sentence
    pieces, _ = split_long_text("他说：“走吧。”" * 8, 20)
    assert all(p.endswith("。”") for p in pieces)


def test_prepared_columns_and_boundaries(tiny_tokenizer, zh_sentences):
    lexicon = EntityLexicon(["新华社", "国务院", "北京大学", "中国人民银行"])
    ds, stats = prepare_dataset_with_stats(
        zh_sentences,
        tiny_tokenizer,
        max_seq_len=64,
        lexicon=lexicon,
        use_pos_entities=True,
        show_progress=False,
    )
    assert list(ds.column_names) == list(COLUMNS) and len(ds) == len(zh_sentences)
    assert stats.documents == len(zh_sentences) and stats.examples == len(ds)
    assert stats.entity_units > stats.pos_entity_units > 0
    seg = Segmenter()
    for text, row in zip(zh_sentences, ds):
        n = len(row["input_ids"])
        assert all(len(row[c]) == n for c in COLUMNS)
        enc = tiny_tokenizer(text, truncation=True, max_length=64)
        assert row["input_ids"] == enc["input_ids"] and row["pinyin_ids"] == enc["pinyin_ids"]
        phrase, entity = np.array(row["phrase_ids"]), np.array(row["entity_ids"])
        assert phrase[0] == phrase[-1] == -1 and (phrase[1:-1] >= 0).all()
        assert phrase[1] == 0 and set(np.diff(phrase[1:-1])) <= {0, 1}
        inside = entity[entity >= 0]
        if inside.size:
            assert inside[0] == 0 and set(np.diff(inside)) <= {0, 1}
        assert entity[0] == entity[-1] == -1
        if re.fullmatch(r"[\u4e00-\u9fff，。]+", text):  # one token per character: units == segmenter words
            words = ["".join(text[s:e]) for s, e in seg.spans(text)]
            units = [
                "".join(text[i] for i in np.flatnonzero(phrase[1:-1] == u)) for u in range(phrase.max() + 1)
            ]
            assert units == words
    row = ds[4]  # 新华社北京电，国务院总理...
    tokens = tiny_tokenizer.convert_ids_to_tokens(row["input_ids"])
    entity = np.array(row["entity_ids"])
    spans = ["".join(tokens[i] for i in np.flatnonzero(entity == u)) for u in range(entity.max() + 1)]
    assert spans[:3] == ["新华社", "北京", "国务院"]  # lexicon, POS (ns), lexicon


def test_prepare_input_errors(tiny_tokenizer, tmp_path):
    with pytest.raises(ValueError, match="not an existing file"):
        prepare_dataset("no/such/file.txt", tiny_tokenizer)
    with pytest.raises(TypeError):
        prepare_dataset([1, 2], tiny_tokenizer)
    with pytest.raises(ValueError, match="no text"):
        prepare_dataset(["", "  "], tiny_tokenizer, show_progress=False)
    with pytest.raises(ValueError, match="max_seq_len"):
        prepare_dataset(["好"], tiny_tokenizer, max_seq_len=2)
    with pytest.raises(ValueError, match="eval_fraction"):
        prepare_dataset(["好"], tiny_tokenizer, eval_fraction=0.5, show_progress=False)
    path = tmp_path / "a.txt"
    path.write_text("好\n", encoding="utf-8")
    with pytest.raises(ValueError, match="mix"):
        prepare_dataset([path, "text"], tiny_tokenizer)


def test_prepare_cache_reuses_saved_dataset(tiny_tokenizer, zh_sentences, tmp_path, monkeypatch):
    first = prepare_dataset(
        zh_sentences, tiny_tokenizer, max_seq_len=48, cache_dir=tmp_path, show_progress=False
    )
    assert len(list(tmp_path.glob("prepared-*"))) == 1

    def boom(self, batch):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(prepare_module._Encoder, "__call__", boom)
    second = prepare_dataset(
        zh_sentences, tiny_tokenizer, max_seq_len=48, cache_dir=tmp_path, show_progress=False
    )
    assert second[:] == first[:]
    with pytest.raises(AssertionError, match="recomputed"):  # another setting is another cache entry
        prepare_dataset(zh_sentences, tiny_tokenizer, max_seq_len=40, cache_dir=tmp_path, show_progress=False)


@pytest.mark.distributed
def test_prepare_multiprocess_equals_single(tiny_tokenizer, zh_sentences):
    texts = zh_sentences * 4
    kwargs = dict(
        max_seq_len=48,
        lexicon=["北京大学", "国务院"],
        use_pos_entities=True,
        batch_size=16,
        show_progress=False,
    )
    single = prepare_dataset(texts, tiny_tokenizer, num_proc=1, **kwargs)
    multi = prepare_dataset(texts, tiny_tokenizer, num_proc=2, **kwargs)
    assert multi[:] == single[:]


def _write_bad_corpus(tmp_path):
    good = "张三和李四在北京大学读书，他们都喜欢打篮球。"
    long_line = ("国务院总理今天会见了来访的外国代表团。" * 20) + "好" * 150  # 380 + 150 characters
    txt = tmp_path / "corpus.txt"
    with open(txt, "wb") as f:
        f.write("\ufeff".encode() + good.encode() + b"\n")
        f.write(b"\n   \n\r\n")  # 3 empty lines
        f.write("坏".encode() + b"\xff\xfe" + "字节也不能让程序崩溃。".encode() + b"\n")
        f.write(long_line.encode() + b"\n")
        f.write("酒店的位置很好，离地铁站很近。".encode() + b"\r\n")
    jsonl = tmp_path / "corpus.jsonl"
    records = [
        json.dumps({"text": "中国人民银行决定下调存款准备金率。"}, ensure_ascii=False),
        "{not json",
        json.dumps({"title": "no text"}),
        json.dumps({"text": 42}),
        "",
        json.dumps({"text": "联合国秘书长呼吁各方保持克制。", "id": 7}, ensure_ascii=False),
    ]
    jsonl.write_text("\n".join(records) + "\n", encoding="utf-8")
    lexicon = tmp_path / "entities.txt"
    lexicon.write_text("北京大学\tORG\n中国人民银行\tORG\n联合国\tORG\n", encoding="utf-8")
    user_dict = tmp_path / "userdict.txt"
    user_dict.write_text("存款准备金率 10 n\n", encoding="utf-8")
    return txt, jsonl, lexicon, user_dict


def test_prepare_data_cli_end_to_end(tmp_path, capsys):
    from ernie_zoo.cli import main

    txt, jsonl, lexicon, user_dict = _write_bad_corpus(tmp_path)
    out = tmp_path / "prepared"
    tok_dir = tmp_path / "tok"
    options = (
        f"--tokenizer {tok_dir} --train-vocab-size 300 --min-frequency 1 --output {out} --max-seq-len 32 "
        f"--lexicon {lexicon} --user-dict {user_dict} --pos-entities --eval-fraction 0.25 --seed 1 --no-progress"
    )
    argv = ["prepare-data", str(txt), str(jsonl), *options.split()]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "decode_errors" in printed and str(out) in printed
    assert (tok_dir / "tokenizer_config.json").is_file()

    dataset, stats = load_prepared(out)
    assert set(dataset) == {"train", "eval"}
    assert (stats.files, stats.lines) == (2, 13)
    assert (stats.empty_lines, stats.decode_errors, stats.bad_json, stats.missing_field) == (4, 1, 1, 2)
    assert stats.documents == 13 - 4 - 1 - 2 == 6 and stats.eval_documents == 2  # round(0.25 * 6)
    assert (stats.long_lines, stats.hard_splits) == (1, 1) and stats.long_line_pieces >= 530 // 30
    assert stats.examples == len(dataset["train"]) and stats.eval_examples == len(dataset["eval"])
    assert stats.examples + stats.eval_examples == 6 - 1 + stats.long_line_pieces
    assert stats.truncated == 0 and stats.dropped_no_tokens == 0

    from ernie_zoo import ErnieZooTokenizerFast

    tokenizer = ErnieZooTokenizerFast.from_pretrained(str(tok_dir))
    rows = [r for split in ("train", "eval") for r in dataset[split]]
    assert all(len(r["input_ids"]) <= 32 for r in rows)
    decoded = ["".join(tokenizer.convert_ids_to_tokens(r["input_ids"][1:-1])) for r in rows]
    assert "坏字节也不能让程序崩溃。" in decoded  # U+FFFD dropped by the normaliser

    def units(row, key):
        ids = row[key]
        return [
            "".join(tokenizer.convert_ids_to_tokens([t for t, i in zip(row["input_ids"], ids) if i == u]))
            for u in sorted(set(ids) - {-1})
        ]

    assert "存款准备金率" not in Segmenter().cut("中国人民银行决定下调存款准备金率。")
    assert "存款准备金率" in {w for r in rows for w in units(r, "phrase_ids")}  # the user dictionary word
    entities = {w for r in rows for w in units(r, "entity_ids")}
    assert {"北京大学", "中国人民银行", "联合国"} <= entities

    # the saved rows collate directly
    batch = KnowledgeMaskingCollator(tokenizer, "entity")(list(dataset["train"]))
    assert batch["input_ids"].shape[0] == stats.examples and (batch["labels"] != -100).sum() > 0


def test_prepare_data_cli_errors(tmp_path, capsys):
    from ernie_zoo.cli import main

    txt = tmp_path / "a.txt"
    txt.write_text("你好。\n", encoding="utf-8")
    out = str(tmp_path / "o")
    assert main(["prepare-data", str(txt), "--tokenizer", str(tmp_path / "none"), "--output", out]) == 2
    assert "tokenizer not found" in capsys.readouterr().err
    missing = f"prepare-data {tmp_path / 'missing.txt'} --tokenizer {tmp_path / 't'} --train-vocab-size 100"
    assert main([*missing.split(), "--output", out]) == 2
    assert "not found" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_read_documents_gzip_bom_and_counts(tmp_path):
    import gzip

    from ernie_zoo.masking import PrepareStats, read_documents

    path = tmp_path / "c.txt.gz"
    with gzip.open(path, "wb") as f:
        f.write("\ufeff第一行\n\n第二行\r\n".encode() + b"\x80\n")
    stats = PrepareStats()
    docs = list(read_documents(path, stats=stats, show_progress=False))
    assert docs == ["第一行", "第二行", "\ufffd"]
    assert (stats.files, stats.lines, stats.empty_lines, stats.decode_errors) == (1, 4, 1, 1)


def test_pack_pieces_fills_examples_in_order():
    from ernie_zoo.masking.prepare import pack_pieces

    pieces = ["一二三", "四五", "六七八九", "十", "甲乙丙丁戊己庚"]
    packed = pack_pieces(pieces, 6)
    assert packed == ["一二三四五", "六七八九十", "甲乙丙丁戊己庚"[:7]]
    assert "".join(packed) == "".join(pieces)  # nothing lost or reordered
    assert pack_pieces([], 5) == []


def test_packing_makes_fewer_fuller_examples(tiny_tokenizer, zh_sentences):
    plain, _ = prepare_dataset_with_stats(zh_sentences, tiny_tokenizer, max_seq_len=64, show_progress=False)
    packed, stats = prepare_dataset_with_stats(
        zh_sentences, tiny_tokenizer, max_seq_len=64, show_progress=False, pack=True
    )
    assert stats.packed_from == len(plain) and len(packed) < len(plain)
    assert all(len(r["input_ids"]) <= 64 for r in packed)
    # The same tokens, minus the [CLS]/[SEP] pairs saved by joining documents.
    inner = lambda ds: sum(len(r["input_ids"]) - 2 for r in ds)  # noqa: E731
    assert inner(packed) == inner(plain)
    assert np.mean([len(r["input_ids"]) for r in packed]) > 1.5 * np.mean(
        [len(r["input_ids"]) for r in plain]
    )
