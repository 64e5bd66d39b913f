import gzip
from importlib import resources

import pytest

from ernie_zoo.tokenization import char_tables as ct


def test_known_characters():
    # 河: 氵 is dian-dian-ti (4 4 1) in the Mainland standard, then 可 = 1 2 5 1 2.
    assert ct.radical("河") == 85
    assert ct.total_strokes("河") == 8
    assert ct.stroke_sequence("河") == "44112512"
    assert ct.radical("行") == 144
    assert ct.total_strokes("行") == 6
    assert ct.stroke_sequence("行") == "332112"
    assert (ct.radical("人"), ct.total_strokes("人"), ct.stroke_sequence("人")) == (9, 2, "34")
    # simplified radical forms map to the Kangxi radical: 纟 is 120' -> 120
    assert ct.radical("纟") == 120
    assert ct.radical("红") == 120


@pytest.mark.parametrize("ch", ["a", "Z", "1", "，", " ", "", "河水", "\U00020000"])
def test_unknown_is_zero(ch):
    assert ct.radical(ch) == 0
    assert ct.total_strokes(ch) == 0
    assert ct.stroke_sequence(ch) == ""


def test_radical_char():
    assert ct.radical_char(85) == "水"
    assert ct.radical_char(1) == "一"
    assert ct.radical_char(214) == "龠"
    assert ct.radical_char(120, simplified=True) == "纟"
    assert ct.radical_char(85, simplified=True) == "水"  # no simplified form
    assert ct.radical_char(0) == ""
    with pytest.raises(ValueError):
        ct.radical_char(215)
    assert all(len(ct.radical_char(n)) == 1 for n in range(1, ct.NUM_RADICALS + 1))


def test_coverage_main_block():
    chars = [chr(cp) for cp in range(0x4E00, 0xA000)]
    with_rs = sum(1 for c in chars if ct.radical(c) and ct.total_strokes(c))
    with_seq = sum(1 for c in chars if ct.stroke_sequence(c))
    assert with_rs >= 20900
    assert with_seq >= 20900
    ext_a = [chr(cp) for cp in range(0x3400, 0x4DC0)]
    assert sum(1 for c in ext_a if ct.radical(c)) >= 6500
    assert ct.radical("\uf900") > 0  # compatibility ideograph


def test_value_ranges():
    table = ct.load_char_table().chars
    assert all(1 <= f.radical <= ct.NUM_RADICALS for f in table.values() if f.radical)
    assert max(f.strokes for f in table.values()) <= ct.MAX_STROKES
    assert all(set(f.stroke_seq) <= set("12345") for f in table.values())


def test_loader_parses_every_row():
    raw = (
        resources.files("ernie_zoo.tokenization")
        .joinpath("data")
        .joinpath("char_features.tsv.gz")
        .read_bytes()
    )
    text = gzip.decompress(raw).decode("utf-8")
    assert text.startswith("#")
    assert raw[4:8] == b"\0\0\0\0"  # gzip mtime 0 -> deterministic bytes
    head, chars_section = text.split("\n[chars]\n")
    rows = [line for line in chars_section.splitlines() if line and not line.startswith("#")]
    radical_rows = [line for line in head.split("[radicals]\n")[1].splitlines() if line]
    table = ct.load_char_table()
    assert len(rows) == len(table.chars) > 28000
    assert len(radical_rows) == len(table.radicals) >= ct.NUM_RADICALS
    for line in rows[:: max(1, len(rows) // 500)]:
        ch, rad, tot, seq = line.split("\t")
        assert table.chars[ch] == (int(rad), int(tot), seq)
    cps = [ord(line.split("\t", 1)[0]) for line in rows]
    assert cps == sorted(cps)


def test_build_vocab_tables():
    torch = pytest.importorskip("torch")
    vocab = {"[PAD]": 0, "[UNK]": 1, "河": 2, "##行": 3, "人": 4, "a": 5, "##a": 6, "河水": 7, "##": 8}
    t = ct.build_vocab_tables(vocab, vocab_size=12)
    assert set(t) == {"radical_ids", "stroke_counts", "stroke_seqs"}
    assert t["radical_ids"].shape == (12,) and t["radical_ids"].dtype == torch.int64
    assert t["stroke_counts"].shape == (12,) and t["stroke_counts"].dtype == torch.int64
    assert t["stroke_seqs"].shape == (12, ct.MAX_STROKE_SEQ) and t["stroke_seqs"].dtype == torch.int64
    assert t["radical_ids"].tolist() == [0, 0, 85, 144, 9, 0, 0, 0, 0, 0, 0, 0]
    assert t["stroke_counts"].tolist() == [0, 0, 8, 6, 2, 0, 0, 0, 0, 0, 0, 0]
    assert t["stroke_seqs"][2, :9].tolist() == [4, 4, 1, 1, 2, 5, 1, 2, 0]
    assert t["stroke_seqs"][3, :7].tolist() == [3, 3, 2, 1, 1, 2, 0]
    assert t["stroke_seqs"][4, :3].tolist() == [3, 4, 0]
    assert t["stroke_seqs"][[0, 1, 5, 6, 7, 8, 9]].abs().sum().item() == 0
    assert int(t["stroke_seqs"].max()) <= ct.STROKE_TYPES

    # default size, and truncation of long sequences
    long_ch = max(ct.load_char_table().chars.items(), key=lambda kv: len(kv[1].stroke_seq))[0]
    t2 = ct.build_vocab_tables({"a": 0, long_ch: 1})
    assert t2["stroke_seqs"].shape == (2, ct.MAX_STROKE_SEQ)
    assert len(ct.stroke_sequence(long_ch)) > ct.MAX_STROKE_SEQ
    assert t2["stroke_seqs"][1].tolist() == [int(c) for c in ct.stroke_sequence(long_ch)[: ct.MAX_STROKE_SEQ]]

    with pytest.raises(ValueError):
        ct.build_vocab_tables({"河": 5}, vocab_size=3)
