"""Traditional -> Simplified normalisation: the character table, the tokenizer option, pinyin on Traditional text."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from pypinyin.constants import RE_HANS

from ernie_zoo import ErnieZooTokenizerFast
from ernie_zoo.text.traditional import (
    is_traditional_char,
    t2s_mapping,
    to_simplified,
    traditional_chars,
)
from ernie_zoo.tokenization.pinyin import char_pinyin_ids, decode_pinyin_id

REPO = Path(__file__).resolve().parents[1]
DATA_FILE = REPO / "ernie_zoo" / "text" / "data" / "t2s_chars.tsv.gz"
TRAD = "這家飯店的服務很好"
SIMP = "这家饭店的服务很好"
TRAD2 = "我們在臺北的銀行辦理了業務"
SIMP2 = "我们在台北的银行办理了业务"


def _build_script():
    spec = importlib.util.spec_from_file_location("build_t2s_table", REPO / "scripts" / "build_t2s_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- to_simplified


@pytest.mark.parametrize(
    ("trad", "simp"), [("這", "这"), ("飯", "饭"), ("臺", "台"), ("銀", "银"), ("業", "业"), ("後", "后")]
)
def test_single_characters(trad, simp):
    assert to_simplified(trad) == simp
    assert is_traditional_char(trad)
    assert not is_traditional_char(simp)


def test_sentences_and_length():
    assert to_simplified(TRAD) == SIMP
    assert to_simplified(TRAD2) == SIMP2
    text = "Hi！這是𠀀😀一個「測試」，價格$12.5。\n"
    out = to_simplified(text)
    assert out == "Hi！这是𠀀😀一个「测试」，价格$12.5。\n"
    assert len(out) == len(text)
    for a, b in zip(text, out):  # every position either unchanged or a table pair
        assert a == b or t2s_mapping()[a] == b


def test_simplified_and_non_han_untouched(zh_sentences):
    simplified = [s for s in zh_sentences if traditional_chars().isdisjoint(s)]
    assert len(simplified) >= 20
    for s in simplified:
        assert to_simplified(s) == s
    other = "abc ＡＢＣ１２３ 123 ，。！？😀👍🏻 \t\u3000 العربية café 好\ud800人"
    assert to_simplified(other) == other
    assert to_simplified("") == ""


def test_chars_simplified_text_also_uses_are_kept():
    # OpenCC lists these with the character itself as a candidate (乾隆, 覆盖, 慰藉 ...), or they are
    # standard mainland forms (著名, 哪吒): converting them would change Simplified input.
    for ch in "乾覆藉於徵瞭彷著吒":
        assert not is_traditional_char(ch), ch
        assert to_simplified(ch) == ch
    assert to_simplified("乾隆年间，他覆盖了著名的哪吒像") == "乾隆年间，他覆盖了著名的哪吒像"


def test_idempotent_and_table_invariants():
    table = t2s_mapping()
    assert 2500 < len(table) < 4113  # OpenCC 1.1.9 has 4,113 entries before the 1:1 filtering
    assert set(table).isdisjoint(table.values())  # chains resolved: converting twice changes nothing
    for trad, simp in table.items():
        assert len(trad) == len(simp) == 1 and trad != simp
        assert ord(simp) <= 0xFFFF
        assert RE_HANS.match(trad) and RE_HANS.match(simp), (trad, simp)
    text = "".join(table)
    assert to_simplified(to_simplified(text)) == to_simplified(text)
    with pytest.raises(TypeError):
        table["這"] = "x"  # read-only view


def test_bad_input():
    with pytest.raises(TypeError, match="bytes"):
        to_simplified(b"abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list"):
        to_simplified(["這"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="single character"):
        is_traditional_char("這這")
    with pytest.raises(ValueError, match="single character"):
        is_traditional_char("")
    with pytest.raises(TypeError):
        is_traditional_char(1)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the data file


def test_data_file_header_and_deterministic_gzip():
    raw = DATA_FILE.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert raw[4:8] == b"\0\0\0\0"  # mtime 0
    assert not raw[3] & 0x08  # no file name in the header
    text = gzip.decompress(raw).decode("utf-8")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("OpenCC 1.1.9" in line and "TSCharacters.txt" in line for line in header)
    assert any("Apache-2.0" in line for line in header)
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    assert dict(rows) == dict(t2s_mapping())
    assert [ord(t) for t, _ in rows] == sorted(ord(t) for t, _ in rows)
    licences = (DATA_FILE.parent / "LICENSES.md").read_text(encoding="utf-8")
    assert "t2s_chars.tsv.gz" in licences and "Apache License" in licences


def test_builder_rules_and_rendering():
    build = _build_script()
    sample = "\n".join(
        [
            "# comment",
            "這\t这",
            "乾\t干 乾",  # ambiguous: dropped
            "吒\t咤",  # kept as is
            "㑮\t𫝈",  # target outside the BMP: dropped
            "薴\t苧",  # chain 薴 -> 苧 -> 苎
            "苧\t苎",
            "髮\t发 髪",  # first candidate
        ]
    )
    table, counts = build.build_table(sample)
    assert table == {"苧": "苎", "這": "这", "薴": "苎", "髮": "发"}
    assert counts["ambiguous"] == counts["keep_as_is"] == counts["outside_bmp"] == 1
    assert counts["chains_resolved"] == 1
    assert build.render(table, counts) == build.render(table, counts)
    with pytest.raises(ValueError, match="candidates"):
        build.build_table("這这")
    with pytest.raises(ValueError, match="twice"):
        build.build_table("這\t这\n這\t这")


@pytest.mark.slow
def test_data_file_is_reproducible_from_opencc():
    """Rebuild the committed table from OpenCC's source archive (fetched from the package registry if absent)."""
    build = _build_script()
    sdist = build.fetch(build.DEFAULT_CACHE)
    table, counts = build.build_table(build.read_ts_characters(sdist))
    assert build.render(table, counts) == DATA_FILE.read_bytes()


# ----------------------------------------------------------------------------- tokenizer


def test_tokenizer_same_ids_for_traditional_and_simplified(tiny_tokenizer):
    assert tiny_tokenizer.traditional_to_simplified is True
    for trad, simp in [(TRAD, SIMP), (TRAD2, SIMP2)]:
        t, s = tiny_tokenizer(trad), tiny_tokenizer(simp)
        assert tiny_tokenizer.unk_token_id not in s["input_ids"]
        assert t["input_ids"] == s["input_ids"]
        assert t["pinyin_ids"] == s["pinyin_ids"]
    assert tiny_tokenizer.tokenize(TRAD) == list(SIMP)


def test_tokenizer_offsets_index_the_original_string(tiny_tokenizer):
    text = "Hi，" + TRAD2 + "ＡＢＣ"
    enc = tiny_tokenizer(text, return_offsets_mapping=True)
    spans = [text[a:b] for a, b in enc["offset_mapping"][1:-1]]
    assert "".join(spans) == text
    tokens = tiny_tokenizer.convert_ids_to_tokens(enc["input_ids"])[1:-1]
    for span, token in zip(spans, tokens):
        if len(span) == 1 and is_traditional_char(span):  # the user's Traditional char, encoded as Simplified
            assert token == to_simplified(span)


def test_tokenizer_pairs_batches_and_split_words(tiny_tokenizer):
    pair_t = tiny_tokenizer(TRAD, TRAD2)
    pair_s = tiny_tokenizer(SIMP, SIMP2)
    assert pair_t["input_ids"] == pair_s["input_ids"]
    assert pair_t["token_type_ids"] == pair_s["token_type_ids"]
    batch_t = tiny_tokenizer([TRAD, TRAD2], [TRAD2, TRAD], padding=True)
    batch_s = tiny_tokenizer([SIMP, SIMP2], [SIMP2, SIMP], padding=True)
    assert batch_t["input_ids"] == batch_s["input_ids"]
    as_tuple = tiny_tokenizer((TRAD, TRAD2))["input_ids"]
    assert as_tuple == [tiny_tokenizer(SIMP)["input_ids"], tiny_tokenizer(SIMP2)["input_ids"]]
    words_t = tiny_tokenizer(["這家", "飯店"], is_split_into_words=True, return_offsets_mapping=True)
    words_s = tiny_tokenizer(["这家", "饭店"], is_split_into_words=True)
    assert words_t["input_ids"] == words_s["input_ids"]
    assert words_t["offset_mapping"][1:-1] == [(0, 1), (1, 2), (0, 1), (1, 2)]  # offsets within each word
    nested_t = tiny_tokenizer([["銀行", "行長"]], is_split_into_words=True)
    nested_s = tiny_tokenizer([["银行", "行长"]], is_split_into_words=True)
    assert nested_t["input_ids"] == nested_s["input_ids"]
    readings = [decode_pinyin_id(i) for i in nested_t["pinyin_ids"][0]][1:-1]
    assert readings == ["yin2", "hang2", "hang2", "zhang3"]


def test_tokenizer_pinyin_on_traditional(tiny_tokenizer):
    enc = tiny_tokenizer("銀行行長")
    assert [decode_pinyin_id(i) for i in enc["pinyin_ids"]][1:-1] == ["yin2", "hang2", "hang2", "zhang3"]
    assert enc["pinyin_ids"] == tiny_tokenizer("银行行长")["pinyin_ids"]


def test_option_off_and_vocabulary_aware(tiny_tokenizer):
    vocab = tiny_tokenizer.get_vocab()
    assert "這" not in vocab and "这" in vocab  # train_vocab converted its texts
    off = ErnieZooTokenizerFast(vocab=dict(vocab), traditional_to_simplified=False)
    assert off(TRAD)["input_ids"].count(off.unk_token_id) == 3  # 這 飯 務
    # A vocabulary that has the Traditional char (as BERT-zh vocabularies do) keeps it; others still convert.
    with_trad = dict(vocab)
    with_trad["這"] = len(with_trad)
    tok = ErnieZooTokenizerFast(vocab=with_trad)
    assert tok.tokenize(TRAD) == ["這", *SIMP[1:]]
    # tokens added later are respected too
    fresh = ErnieZooTokenizerFast(vocab=dict(vocab))
    assert fresh.tokenize("臺")[0] == "台"
    fresh.add_tokens(["臺"])
    assert fresh("臺北")["input_ids"][1] == fresh.convert_tokens_to_ids("臺") == len(vocab)
    with pytest.raises(TypeError, match="traditional_to_simplified"):
        ErnieZooTokenizerFast(vocab=dict(vocab), traditional_to_simplified="yes")


def test_option_saved_and_restored(tiny_tokenizer, tmp_path):
    vocab = dict(tiny_tokenizer.get_vocab())
    for value in (False, True):
        tok = ErnieZooTokenizerFast(vocab=vocab, traditional_to_simplified=value)
        tok.save_pretrained(tmp_path / str(value))
        config = json.loads((tmp_path / str(value) / "tokenizer_config.json").read_text(encoding="utf-8"))
        assert config["traditional_to_simplified"] is value
        loaded = ErnieZooTokenizerFast.from_pretrained(tmp_path / str(value))
        assert loaded.traditional_to_simplified is value
        assert loaded(TRAD) == tok(TRAD)
        assert (tiny_tokenizer.unk_token_id in loaded(TRAD)["input_ids"]) is not value
    # a tokenizer saved before the option existed loads with the default (on)
    path = tmp_path / "False" / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    del config["traditional_to_simplified"]
    path.write_text(json.dumps(config), encoding="utf-8")
    assert ErnieZooTokenizerFast.from_pretrained(tmp_path / "False").traditional_to_simplified is True


def test_train_vocab_converts_texts(zh_sentences):
    texts = [*zh_sentences[:5], TRAD, TRAD2]
    on = ErnieZooTokenizerFast.train_vocab(texts, vocab_size=400, min_frequency=1, show_progress=False)
    off = ErnieZooTokenizerFast.train_vocab(
        texts, vocab_size=400, min_frequency=1, show_progress=False, traditional_to_simplified=False
    )
    assert on.traditional_to_simplified is True and off.traditional_to_simplified is False
    assert traditional_chars().isdisjoint(on.get_vocab())
    assert {"這", "飯", "臺", "銀"} <= set(off.get_vocab())
    assert on.unk_token_id not in on(TRAD + SIMP2)["input_ids"]
    batches = ErnieZooTokenizerFast.train_vocab(
        iter([[TRAD, TRAD2]]), vocab_size=400, min_frequency=1, show_progress=False
    )
    assert "這" not in batches.get_vocab() and "这" in batches.get_vocab()
    with pytest.raises(TypeError, match="int"):
        ErnieZooTokenizerFast.train_vocab([TRAD, 5], vocab_size=400, show_progress=False)


# ----------------------------------------------------------------------------- pinyin


def test_pinyin_of_traditional_text():
    assert [decode_pinyin_id(i) for i in char_pinyin_ids("銀行行長")] == ["yin2", "hang2", "hang2", "zhang3"]
    assert char_pinyin_ids(TRAD2) == char_pinyin_ids(SIMP2)


def test_to_traditional_keeps_length_and_reads_phrases():
    from ernie_zoo.text.traditional import reads_traditional, to_traditional

    assert to_traditional("头发和发展") == "頭髮和發展"  # one simplified 发, two traditional forms by phrase
    for text in ("少先队员应该为老人让座", "iPhone 15 😀，好", ""):
        out = to_traditional(text)
        assert len(out) == len(text) and to_simplified(out) == to_simplified(text)
    assert reads_traditional("少先隊員因該為老人讓坐") and not reads_traditional("少先队员因该为老人让坐")
    assert not reads_traditional("今天在下雨") and not reads_traditional("")
