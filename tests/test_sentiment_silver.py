"""recipes/zoo/sentiment_silver.py, the silver general-domain sentences of ernie-zoo-mini-sentiment (issue #19): the
sentence pools it cuts from Xinhua/fortune lines, and the framed sentences it builds from the lexicon."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from ernie_zoo.data.sentiment_lexicon import SentimentLexicon

PATH = Path(__file__).resolve().parents[1] / "recipes/zoo/sentiment_silver.py"


@pytest.fixture(scope="module")
def silver():
    spec = importlib.util.spec_from_file_location("sentiment_silver", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_xinhua_lines_give_their_example_or_explanation(silver):
    lines = [
        "宋·黄庭坚《书寄祝有道》人家兄弟无不义者,盖因娶妇入门,异姓相聚,争长竞短。”",  # idiom example
        "震古烁今:震动古代,显耀当世。形容事业或功绩非常伟大。",  # idiom explanation
        "[magnificent, sumptuous] 盛大,鲜明,亮堂。多形容建筑物雄伟壮观。",  # gloss: skipped
        "短句。",  # too short
    ]
    assert silver.sentences("xinhua", lines) == [
        "人家兄弟无不义者,盖因娶妇入门,异姓相聚,争长竞短。",
        "震动古代,显耀当世。形容事业或功绩非常伟大。",
    ]
    # fortunes: attributions are not sentences; duplicates are kept once
    fortunes = ["-- Debian 《行为准则》第四条", "作者:卢伦", "守口如瓶,防意如城,不可不慎。"] * 2
    assert silver.sentences("fortunes", fortunes) == ["守口如瓶,防意如城,不可不慎。"]


def test_framed_sentences_carry_the_word_polarity(silver):
    sources = ("a", "b", "c", "d")
    lexicon = SentimentLexicon(
        words={
            "开心": (1, 0.85),
            "满意": (1, 0.87),
            "失望": (-1, 0.5),
            "难过": (-1, 0.83),
            "奢华": (-1, 0.07),
        },
        sources={w: sources for w in ("开心", "满意", "失望", "难过", "奢华")},
    )
    out = silver.framed_sentences(lexicon, 400, random.Random(0))
    assert out and len({r["text"] for r in out}) == len(out)
    assert all(r["source"] == "silver:frames" for r in out)
    negated = tuple(f.split("{w}")[0] for f in silver.NEGATED_FRAMES)
    for r in out:
        word = next(w for w in lexicon.words if w in r["text"])
        assert word != "奢华"  # strength 0.07: too weak to frame
        polarity = lexicon.words[word][0]
        if r["text"].startswith(negated):
            assert polarity == 1 and r["label"] == "negative"  # only positive words are negated
        else:
            assert r["label"] == ("positive" if polarity == 1 else "negative")
    labels = [r["label"] for r in out]
    assert labels.count("positive") > 0 and labels.count("negative") > 0
    assert any("开心" in r["text"] for r in out)
