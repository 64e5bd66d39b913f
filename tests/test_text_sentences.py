"""The one sentence splitter (`ernie_zoo.text.sentences`): boundaries, packing, clause and length cuts, protected
spans, character widths, and the invariants every caller relies on."""

from __future__ import annotations

import random
import unicodedata

import pytest

from ernie_zoo.text.sentences import (
    CLAUSE_END,
    CLOSERS,
    SENTENCE_END,
    chunk_spans,
    chunk_text,
    overlapping_chunk_spans,
    sentence_spans,
)

POEM = "床前明月光，疑是地上霜。举头望明月，低头思故乡。"


def _check(text, spans, max_len, width=len):
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a < b for a, b in spans) or text == ""
    assert all(b == c for (_, b), (c, _) in zip(spans, spans[1:]))  # contiguous
    assert all(width(text[a:b]) <= max_len or b - a == 1 for a, b in spans)


def test_sentences_first_then_clauses_then_length():
    assert chunk_text(POEM, 12) == ["床前明月光，疑是地上霜。", "举头望明月，低头思故乡。"]
    assert chunk_text(POEM, 30) == [POEM]
    assert chunk_text(POEM, 8) == ["床前明月光，", "疑是地上霜。", "举头望明月，", "低头思故乡。"]
    assert chunk_text(POEM, 4) == [
        "床前明月",
        "光，",
        "疑是地上",
        "霜。",
        "举头望明",
        "月，",
        "低头思故",
        "乡。",
    ]
    # packing is greedy over whole sentences
    assert chunk_text("一二。三四。五六七八九十。", 7) == ["一二。三四。", "五六七八九十。"]


def test_punctuation_closers_and_whitespace():
    assert set("。！？!?；;…\n") == set(SENTENCE_END) and set("，,、：:\t ") == set(CLAUSE_END)
    assert "”" in CLOSERS and "」" in CLOSERS
    # closing quotes and repeated marks stay with their sentence
    assert sentence_spans("他说：“走吧。”好的！！真的？") == [(0, 8), (8, 12), (12, 15)]
    assert chunk_spans("他说：“走吧。”好的。", 9) == [(0, 8), (8, 11)]
    assert all(p.endswith("。”") for p in chunk_text("他说：“走吧。”" * 8, 20))
    # chunk_text strips the pieces and drops empty ones; chunk_spans keeps every character
    assert chunk_text("第一句。   \n\n第二句。", 5) == ["第一句。", "第二句。"]
    assert sentence_spans("") == [] and chunk_spans("", 5) == [(0, 0)] and chunk_text("", 5) == []
    assert chunk_text("。。。", 1) == ["。", "。", "。"]


def test_protected_spans_are_never_cut():
    text = "北京是中国的首[MASK]，上海是[MASK][MASK]城市。"
    protected = [(i, i + 6) for i in range(len(text)) if text.startswith("[MASK]", i)]
    for max_len in range(6, 20):
        spans = chunk_spans(text, max_len, protected)
        _check(text, spans, max_len)
        assert not any(a < b < c for a, c in protected for _, b in spans)
    with pytest.raises(ValueError, match="longer than the chunk size"):
        chunk_spans(text, 5, protected)


def test_width_counts_nfkc_characters():
    def nfkc(s):
        return len(unicodedata.normalize("NFKC", s))

    text = "好…" * 20  # … is three characters after NFKC
    spans = chunk_spans(text, 10, width=nfkc)
    _check(text, spans, 10, nfkc)
    assert {b - a for a, b in spans} == {4}  # each sentence 好… is 4 wide: two fit in 10
    assert chunk_spans("㍻㍻", 1, width=nfkc) == [
        (0, 1),
        (1, 2),
    ]  # a character wider than max_len stands alone
    with pytest.raises(ValueError, match="max_len"):
        chunk_spans("x", 0)


@pytest.mark.parametrize("seed", range(3))
def test_random_texts_keep_the_invariants(seed):
    rng = random.Random(seed)
    alphabet = "中文字词甲乙。！？!?；;…\n，,、：:\t ”’」』）)abc"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
        max_len = rng.randint(1, 30)
        spans = chunk_spans(text, max_len)
        _check(text, spans, max_len)
        pieces = chunk_text(text, max_len)
        assert "".join(pieces) == "".join(text[a:b].strip() for a, b in spans)
        assert all(0 < len(p) <= max_len for p in pieces)


def test_prefers_sentences_then_clauses_then_length():
    text = "第一句话。第二句话很长很长，有逗号，还有更多内容！短句。" + "字" * 25
    spans = chunk_spans(text, 12)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(spans[k][1] == spans[k + 1][0] for k in range(len(spans) - 1))
    assert [text[a:b] for a, b in spans] == [
        "第一句话。",  # sentences first
        "第二句话很长很长，",  # an over-long sentence is cut after its clauses ...
        "有逗号，还有更多内容！",  # ... which are packed back up to the limit
        "短句。",
        "字" * 12,  # then plain length
        "字" * 12,
        "字",
    ]
    assert chunk_spans("短", 10) == [(0, 1)] and chunk_spans("", 10) == [(0, 0)]
    assert chunk_spans("一。二。三。四。", 4) == [(0, 4), (4, 8)]


def test_never_cuts_protected_spans_and_keeps_closing_quotes():
    text = "他说：“好。”然后" + "很长" * 10 + "[MASK]" + "很长" * 10
    mask = text.index("[MASK]")
    spans = chunk_spans(text, 10, protected=[(mask, mask + 6)])
    assert all(not (mask < a < mask + 6) and not (mask < b < mask + 6) for a, b in spans)
    assert all(b - a <= 10 for a, b in spans) and "".join(text[a:b] for a, b in spans) == text
    assert any(text[a:b].endswith("”") for a, b in spans)  # closing quote stays with its sentence
    with pytest.raises(ValueError, match="longer than the chunk size"):
        chunk_spans("x" * 30, 5, protected=[(0, 6)])


def test_overlapping_chunks_overlap_only_inside_sentences():
    # sentence borders only: exactly chunk_spans, nothing repeated
    assert overlapping_chunk_spans(POEM * 4, 12, 3) == chunk_spans(POEM * 4, 12)
    assert overlapping_chunk_spans("短句。", 10, 5) == [(0, 3)]
    text = "第一句话。" + "字" * 40 + "。最后一句。"
    spans = overlapping_chunk_spans(text, 12, 3)
    assert spans[0][0] == 0 and spans[-1][1] == len(text) and all(0 < b - a <= 12 for a, b in spans)
    starts = {s for s, _ in sentence_spans(text)}
    for (a0, b0), (a1, b1) in zip(spans, spans[1:]):
        assert a0 < a1 and b0 < b1 and a1 <= b0  # ordered, contiguous or overlapping: the text is covered
        assert (a1 == b0) == (a1 in starts)  # overlap exactly where the border is inside a sentence
        if a1 < b0:
            assert b0 - a1 == 3
    # any 2-character name in the long sentence lies whole in some chunk
    for p in range(5, 5 + 40 - 1):
        assert any(a <= p and p + 2 <= b for a, b in spans)
    capped = overlapping_chunk_spans("字" * 30, 8, 2)  # the overlap is capped at 8 // 4
    assert overlapping_chunk_spans("字" * 30, 8, 100) == capped
    with pytest.raises(ValueError, match="overlap must be >= 0"):
        overlapping_chunk_spans("字" * 30, 8, -1)
