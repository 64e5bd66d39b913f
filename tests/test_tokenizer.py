"""ErnieZooTokenizerFast: CJK splitting, normalisation, offsets, context-aware pinyin_ids, save/load, bad input."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer, DataCollatorWithPadding

import ernie_zoo  # noqa: F401
from ernie_zoo import ErnieZooTokenizerFast
from ernie_zoo.tokenization import read_vocab_file
from ernie_zoo.tokenization.pinyin import decode_pinyin_id


def readings(tokenizer, text):
    enc = tokenizer(text)
    return [decode_pinyin_id(i) for i in enc["pinyin_ids"]][1:-1]


def test_one_token_per_cjk_char(tiny_tokenizer):
    tokens = tiny_tokenizer.tokenize("银行行长在长城")
    assert tokens == list("银行行长在长城")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("银行行长", ["yin2", "hang2", "hang2", "zhang3"]),  # 行 is háng, 长 is zhǎng in context
        ("长城", ["chang2", "cheng2"]),
        ("重要", ["zhong4", "yao4"]),
        ("重新", ["chong2", "xin1"]),
        ("了解", ["liao3", "jie3"]),
        ("好了", ["hao3", "le5"]),
    ],
)
def test_context_aware_pinyin(tiny_tokenizer, text, expected):
    assert readings(tiny_tokenizer, text) == expected


def test_pinyin_aligned_with_tokens_and_zero_for_non_han(tiny_tokenizer):
    text = "Apple发布了新款iPhone，价格是6999元。"
    enc = tiny_tokenizer(text, return_offsets_mapping=True)
    assert len(enc["pinyin_ids"]) == len(enc["input_ids"])
    for (start, end), pid in zip(enc["offset_mapping"], enc["pinyin_ids"]):
        piece = text[start:end]
        is_han = len(piece) == 1 and "\u4e00" <= piece <= "\u9fff"
        assert (pid > 0) == is_han, (piece, pid)


def test_full_width_is_normalised_and_offsets_point_into_the_original(tiny_tokenizer):
    text = "ＡＢＣ公司在１２月"
    enc = tiny_tokenizer(text, return_offsets_mapping=True)
    tokens = tiny_tokenizer.convert_ids_to_tokens(enc["input_ids"])
    half = tiny_tokenizer("ABC公司在12月")
    assert enc["input_ids"] == half["input_ids"]  # full-width letters/digits map to the half-width tokens
    assert "[UNK]" not in tokens
    spans = [text[s:e] for s, e in enc["offset_mapping"][1:-1]]
    assert "".join(spans) == text  # offsets index the user's string, not the normalised one


def test_pairs_and_pretokenized_input(tiny_tokenizer):
    pair = tiny_tokenizer("银行", "行长很忙")
    assert pair["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert [decode_pinyin_id(i) for i in pair["pinyin_ids"]][1:3] == ["yin2", "hang2"]
    assert [decode_pinyin_id(i) for i in pair["pinyin_ids"]][4:6] == ["hang2", "zhang3"]
    words = tiny_tokenizer([["银行", "行长"]], is_split_into_words=True)
    assert [decode_pinyin_id(i) for i in words["pinyin_ids"][0]][1:-1] == ["yin2", "hang2", "hang2", "zhang3"]


def test_batch_padding_and_tensors(tiny_tokenizer, zh_sentences):
    batch = tiny_tokenizer(zh_sentences[:5], padding=True, return_tensors="pt")
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "pinyin_ids"}
    assert batch["pinyin_ids"].shape == batch["input_ids"].shape
    assert (batch["pinyin_ids"][batch["attention_mask"] == 0] == 0).all()
    for i, text in enumerate(zh_sentences[:5]):
        single = tiny_tokenizer(text)["pinyin_ids"]
        assert batch["pinyin_ids"][i, : len(single)].tolist() == single


def test_collator_pads_pinyin_ids(tiny_tokenizer, zh_sentences):
    features = [tiny_tokenizer(t) for t in zh_sentences[:3]]
    for side in ("right", "left"):
        tiny_tokenizer.padding_side = side
        try:
            batch = DataCollatorWithPadding(tiny_tokenizer)(features)
        finally:
            tiny_tokenizer.padding_side = "right"
        assert batch["pinyin_ids"].shape == batch["input_ids"].shape
        for row, feature in enumerate(features):
            real = batch["attention_mask"][row] == 1
            assert batch["pinyin_ids"][row][real].tolist() == feature["pinyin_ids"]  # aligned on either side
            assert (batch["pinyin_ids"][row][~real] == 0).all()


def test_truncation_and_overflow(tiny_tokenizer):
    text = "银行行长" * 100
    enc = tiny_tokenizer(text, truncation=True, max_length=16)
    assert len(enc["input_ids"]) == len(enc["pinyin_ids"]) == 16
    windows = tiny_tokenizer(text, truncation=True, max_length=16, return_overflowing_tokens=True, stride=4)
    assert len(windows["input_ids"]) > 1
    assert all(len(a) == len(b) for a, b in zip(windows["input_ids"], windows["pinyin_ids"]))
    assert tiny_tokenizer.model_max_length == 512


def test_save_load_and_auto_tokenizer(tiny_tokenizer, zh_sentences, tmp_path):
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(loaded, ErnieZooTokenizerFast)
    for text in zh_sentences:
        assert loaded(text) == tiny_tokenizer(text)


def test_a_directory_without_a_vocabulary_is_an_error_not_an_all_unk_tokenizer(tiny_tokenizer, tmp_path):
    tiny_tokenizer.save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").unlink()  # tokenizer_config.json alone: no vocabulary anywhere
    with pytest.raises(ValueError, match="no vocabulary found"):
        AutoTokenizer.from_pretrained(tmp_path)
    # built directly without a vocabulary it is still allowed (the special tokens only)
    assert len(ErnieZooTokenizerFast()) == 5


def test_loads_an_ernie_vocab_txt(tiny_tokenizer, tmp_path):
    vocab = sorted(tiny_tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    path = tmp_path / "vocab.txt"
    path.write_text("".join(f"{t}\n" for t, _ in vocab), encoding="utf-8")
    assert read_vocab_file(path) == dict(vocab)
    from_file = ErnieZooTokenizerFast(vocab_file=str(path))
    assert from_file("银行行长说")["input_ids"] == tiny_tokenizer("银行行长说")["input_ids"]
    assert from_file.unk_token_id not in from_file("银行行长说")["input_ids"]
    (tmp_path / "dup.txt").write_text("[PAD]\n[UNK]\n[PAD]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="appears twice"):
        read_vocab_file(tmp_path / "dup.txt")


def test_train_vocab_covers_the_corpus(zh_sentences):
    tok = ErnieZooTokenizerFast.train_vocab(
        zh_sentences, vocab_size=800, min_frequency=1, show_progress=False
    )
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    for text in zh_sentences:
        assert tok.unk_token_id not in tok(text)["input_ids"], text
    with pytest.raises(ValueError, match="vocab_size"):
        ErnieZooTokenizerFast.train_vocab(zh_sentences, vocab_size=3)


def test_char_feature_tables(tiny_tokenizer):
    tables = tiny_tokenizer.char_feature_tables()
    he = tiny_tokenizer.convert_tokens_to_ids("河")
    assert int(tables["radical_ids"][he]) == 85 and int(tables["stroke_counts"][he]) == 8
    assert tables["stroke_seqs"].shape == (len(tiny_tokenizer), 32)
    assert int(tables["radical_ids"][tiny_tokenizer.cls_token_id]) == 0
    with pytest.raises(ValueError, match="smaller"):
        tiny_tokenizer.char_feature_tables(vocab_size=10)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (None, ValueError, "text"),
        (123, TypeError, "int"),
        (b"bytes", TypeError, "bytes"),
        (["ok", None], TypeError, r"text\[1\]"),
        (["ok", 5], TypeError, r"text\[1\]"),
    ],
)
def test_bad_input_names_the_problem(tiny_tokenizer, bad, error, match):
    with pytest.raises(error, match=match):
        tiny_tokenizer(bad)


def test_empty_and_whitespace_give_only_special_tokens(tiny_tokenizer):
    for text in ("", "   ", "\n\t"):
        enc = tiny_tokenizer(text)
        assert enc["input_ids"] == [tiny_tokenizer.cls_token_id, tiny_tokenizer.sep_token_id]
        assert enc["pinyin_ids"] == [0, 0]


def test_too_long_input_is_a_clear_model_error(tiny_tokenizer, make_config):
    from ernie_zoo import ErnieZooModel

    model = ErnieZooModel(make_config(max_position_embeddings=32)).eval()
    batch = tiny_tokenizer("银行" * 40, return_tensors="pt")
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(**batch)
    ok = tiny_tokenizer("银行" * 40, truncation=True, max_length=32, return_tensors="pt")
    assert model(**ok).last_hidden_state.shape[1] == 32


@pytest.mark.slow  # 4 processes x 26 vocabularies
def test_train_vocab_is_the_same_in_every_process(zh_sentences, tmp_path):
    """Recipes retrain vocabularies, so tokens and ids must not depend on the process (hash seeds, the trainer's
    hash-map order). Budgets that end inside a frequency tie (a mixed Chinese/English corpus, every 4th budget
    from 344 to 444 tokens: the characters take 342, the whole vocabulary is 449) used to give another vocabulary
    in nearly every process."""
    import os
    import subprocess
    import sys

    english = ["The quick brown fox jumps over the lazy dog near the bank", "An ant can carry many times its weight",
               "Intent, content and extent: tokens in context", "running runner runs ran", "pleasant restaurant"]  # fmt: skip
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(f"{z} {english[i % len(english)]}" for i, z in enumerate(zh_sentences)), encoding="utf-8"
    )
    code = (
        "import sys, json, hashlib; from ernie_zoo import ErnieZooTokenizerFast as T;"
        "lines = open(sys.argv[1], encoding='utf-8').read().splitlines();"
        "vocabs = [T.train_vocab(lines, vocab_size=n, min_frequency=1, show_progress=False).get_vocab()"
        " for n in range(344, 448, 4)];"
        "print(json.dumps([len(v) for v in vocabs]), hashlib.sha256(json.dumps(vocabs, sort_keys=True).encode())"
        ".hexdigest())"
    )
    runs = []
    for seed in ("0", "1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, str(corpus)], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(out.stdout.strip().splitlines()[-1])
    sizes = json.loads(runs[0].rsplit(" ", 1)[0])
    assert sizes == list(
        range(344, 448, 4)
    )  # each budget is filled: each cut falls among the learned word pieces
    assert len(set(runs)) == 1, runs
