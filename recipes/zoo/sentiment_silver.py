"""Silver sentiment labels on general-domain sentences for issue #19 (recipes/experiments/sentiment-silver*.yaml).

The only gold sentiment labels here are product/hotel/book reviews, and a model fine-tuned on them alone scores
0.70 macro-F1 on the multi-domain test (news, dictionary, everyday sentences) against 0.79 for a lexicon count.
This script labels news sentences (MSRA train text), dictionary idiom examples and explanations (Xinhua) and
fortunes with `ernie_zoo.data.sentiment_lexicon.weak_sentiment_label`: a sentence gets a label only when every
sentiment word it holds points the same way and none is negated (0.909 precision on the multi-domain dev's
texts, 110 of 302 labelled).  Fine-tuning on reviews + silver teaches the encoder a sentence's polarity outside
reviews from many contexts, not a word list: a word the lexicon lacks is learnt from the sentences around it.

The sentence pools are runs/zoo/data/corpora_skep/ (the header of recipes/experiments/pretrain-skep-s7.yaml builds them),
already stripped of every multi-domain dev/test text, of exclude.txt and of the labelled review dev/test.  This
script checks that again (no silver sentence contains a multi-domain dev/test text or is a review dev/test text)
and refuses to write otherwise.  Each source contributes equal positive and negative counts (the smaller side
decides), at most ``--per-source`` sentences.

Writes DIR/train.jsonl (review TRAIN split + silver, shuffled, ``source`` field on every line), DIR/dev.jsonl (the
multi-domain dev: checkpoint selection) and DIR/manifest.json (counts, seed, lexicon sha256)::

    python recipes/zoo/sentiment_silver.py --out ~/.cache/ernie_zoo/datasets/sentiment_silver
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from pathlib import Path

from tqdm.auto import tqdm

from ernie_zoo.data.corpora import HeldOut
from ernie_zoo.data.labelled import load_split
from ernie_zoo.data.sentiment_lexicon import DEFAULT_OUT, load_sentiment_lexicon, weak_sentiment_label
from ernie_zoo.evaluation.baselines import MULTIDOMAIN_DIR, load_sentiment_multidomain
from ernie_zoo.utils import atomic_write_text

POOLS = Path("runs/zoo/data/corpora_skep")
CJK = re.compile(r"[\u4e00-\u9fff]")
# Xinhua idiom example: "作者《书名》sentence”" (the quote mark closes the example);
EXAMPLE = re.compile(r"^[^《》\[\]]{0,20}《[^》]{1,30}》(?P<text>.+?)[”\"]?$")
# idiom explanation: "震古烁今:震动古代,显耀当世。形容事业或功绩非常伟大。"
EXPLANATION = re.compile(r"^[\u4e00-\u9fff，,]{3,12}:(?P<text>.+)$")


def sentences(source: str, lines: list[str]) -> list[str]:
    """The candidate sentences of one pool: whole lines for news and fortunes, the example or explanation part of
    Xinhua's idiom lines (definitions with English glosses are skipped)."""
    out = []
    for line in lines:
        line = line.strip()
        if source == "xinhua":
            m = EXAMPLE.match(line) or EXPLANATION.match(line)
            if m is None:
                continue
            line = m.group("text").strip()
        elif source == "fortunes" and (line.startswith(("--", "——", "作者")) or "《" in line[:3]):
            continue
        if 8 <= len(line) <= 160 and len(CJK.findall(line)) >= 0.6 * len(line):
            out.append(line)
    return list(dict.fromkeys(out))


# Degree and exclamation frames around one sentiment word (its polarity is the sentence's), and negation frames
# around a positive one (the sentence is negative). A review-trained model reads 太好了！ and 太开心了！ as negative:
# in reviews, "太 ... 了" mostly frames complaints (太慢了, 太差了). These frames show the word decides.
FRAMES = (
    "太{w}了！",
    "真{w}！",
    "非常{w}。",
    "特别{w}。",
    "今天真的很{w}。",
    "感觉挺{w}的。",
    "我觉得很{w}。",
    "实在太{w}了。",
)
NEGATED_FRAMES = ("一点也不{w}。", "真的不{w}。", "觉得不太{w}。", "并不{w}。")


# Negation of a negative word reads as mildly positive (一点也不累, 不算严重, 没有想象中那么辛苦), and in a turn the
# clause after 但是 / 结果 / 没想到 decides the sentence (本来担心..., 结果...). A model that learnt "a negator means
# negative" from NEGATED_FRAMES alone reads everyday good news told through a worry it dispelled as negative; these
# frames teach the other half. {n} is a negative word, {p} a positive one; the label is the turn's polarity.
NEGATED_NEGATIVE_FRAMES = (
    "一点也不{n}。",
    "没有想象中那么{n}。",
    "其实并不{n}。",
    "不算太{n}。",
    "一点都不觉得{n}。",
)
TURN_FRAMES = {
    "positive": (
        "本来担心会很{n}，结果挺{p}的。",
        "虽然有点{n}，但是很{p}。",
        "一开始觉得{n}，后来发现很{p}。",
        "原以为会{n}，没想到这么{p}。",
    ),
    "negative": (
        "本来以为会很{p}，结果挺{n}的。",
        "虽然很{p}，但是太{n}了。",
        "一开始觉得{p}，后来发现很{n}。",
        "原以为会{p}，没想到这么{n}。",
    ),
}


def _frame_words(lexicon, tags_kept: tuple[str, ...] = ("a", "v")) -> dict[int, list[str]]:
    """Two-character sentiment words, tagged adjective or verb (`tags_kept`) in jieba's dictionary, listed by at least
    half of the lexicon's sources (4 of the full build's 8, 2 of the default build's 3) with strength >= 0.4 (so 呈现
    and 奢华 are out, 开心 and 失望 in), the 1,500 most frequent of each polarity (+1, -1)."""
    import jieba
    import jieba.posseg

    jieba.initialize()
    tags, freq = jieba.posseg.dt.word_tag_tab, jieba.dt.FREQ
    n_sources = len({s for sources in lexicon.sources.values() for s in sources})
    min_sources = max(2, -(-n_sources // 2))
    words: dict[int, list[str]] = {1: [], -1: []}
    for w, (polarity, strength) in lexicon.words.items():
        if len(lexicon.sources.get(w, ())) < min_sources or strength < 0.4:
            continue
        if len(w) == 2 and tags.get(w, "")[:1] in tags_kept and freq.get(w, 0) >= 50:
            words[polarity].append(w)
    for polarity in words:
        words[polarity] = sorted(words[polarity], key=lambda w: -freq[w])[:1500]
    return words


def turn_sentences(lexicon, n: int, rng: random.Random) -> list[dict]:
    """``n`` short sentences (half positive, half negative): a quarter put a negative word in a
    `NEGATED_NEGATIVE_FRAMES` frame (positive), a quarter a negative and a positive word in a positive
    `TURN_FRAMES` frame, half a positive and a negative word in a negative one. Words as in `framed_sentences`, but
    adjectives only (一点也不镇压 is not a sentence)."""
    words = _frame_words(lexicon, ("a",))
    out: list[dict] = []
    for i in range(n):
        if i % 4 == 0:
            text, label = rng.choice(NEGATED_NEGATIVE_FRAMES).format(n=rng.choice(words[-1])), "positive"
        else:
            label = "positive" if i % 4 == 1 else "negative"
            frame = rng.choice(TURN_FRAMES[label])
            text = frame.format(n=rng.choice(words[-1]), p=rng.choice(words[1]))
        out.append({"text": text, "label": label, "source": "silver:turns"})
    return list({r["text"]: r for r in out}.values())


def framed_sentences(lexicon, n: int, rng: random.Random) -> list[dict]:
    """``n`` short sentences (half positive, half negative) that put one common sentiment word of ``lexicon`` in a
    frame of `FRAMES` (the word's polarity) or, for a positive word, of `NEGATED_FRAMES` (negative); the words:
    `_frame_words`."""
    words = _frame_words(lexicon)
    out: list[dict] = []
    for i in range(n):
        if i % 2 == 0:  # positive: a positive word in a plain frame
            text = rng.choice(FRAMES).format(w=rng.choice(words[1]))
            out.append({"text": text, "label": "positive", "source": "silver:frames"})
        elif i % 4 == 1:  # negative: a negative word in a plain frame
            text = rng.choice(FRAMES).format(w=rng.choice(words[-1]))
            out.append({"text": text, "label": "negative", "source": "silver:frames"})
        else:  # negative: a positive word negated
            text = rng.choice(NEGATED_FRAMES).format(w=rng.choice(words[1]))
            out.append({"text": text, "label": "negative", "source": "silver:frames"})
    return list({r["text"]: r for r in out}.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-source", type=int, default=6000, help="most silver sentences from one source")
    ap.add_argument(
        "--min-sources", type=int, default=1, help="lexicon words at least this many sources agree on"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=int, default=0, help="add this many framed sentences (framed_sentences)")
    ap.add_argument("--turns", type=int, default=0, help="add this many turn sentences (turn_sentences)")
    ap.add_argument("--lexicon", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()

    lexicon = load_sentiment_lexicon(args.lexicon, min_sources=args.min_sources)
    # The multi-domain dev/test, also where a longer sentence quotes one; the review dev/test.
    held = HeldOut()
    for split in ("dev", "test"):
        for r in load_sentiment_multidomain(MULTIDOMAIN_DIR / f"{split}.jsonl"):
            held.add(r["text"], quotable=True)
    review_held = {r["text"] for s in ("dev", "test") for r in load_split("sentiment", s)}
    rng = random.Random(args.seed)
    silver: list[dict] = []
    counts: dict[str, dict[str, int]] = {}
    for source in ("msra", "xinhua", "fortunes"):
        cands = sentences(source, (POOLS / f"{source}.txt").read_text(encoding="utf-8").splitlines())
        by_label: dict[str, list[str]] = {"positive": [], "negative": []}
        for text in tqdm(cands, desc=f"labelling {source}", unit="sent"):
            label = weak_sentiment_label(text, lexicon)
            if label is not None:
                by_label[label].append(text)
        n = min(len(by_label["positive"]), len(by_label["negative"]), args.per_source // 2)
        counts[source] = {
            "candidates": len(cands),
            **{k: len(v) for k, v in by_label.items()},
            "kept_per_label": n,
        }
        for label, texts in by_label.items():
            for text in rng.sample(texts, n):
                silver.append({"text": text, "label": label, "source": f"silver:{source}"})
    leaks = [r["text"] for r in silver if r["text"] in review_held or held.quotes(r["text"])]
    if leaks:
        raise SystemExit(
            f"{len(leaks)} silver sentences hold an evaluation text, e.g. {leaks[0]!r}: rebuild the pools"
        )
    if args.frames:
        frame_lexicon = load_sentiment_lexicon(args.lexicon, min_sources=2)
        framed = framed_sentences(frame_lexicon, args.frames, random.Random(args.seed + 1))
        counts["frames"] = {
            label: sum(r["label"] == label for r in framed) for label in ("positive", "negative")
        }
        silver += framed
    if args.turns:
        turned = turn_sentences(
            load_sentiment_lexicon(args.lexicon, min_sources=2), args.turns, random.Random(args.seed + 2)
        )
        counts["turns"] = {
            label: sum(r["label"] == label for r in turned) for label in ("positive", "negative")
        }
        silver += turned
    gold = [{**r, "source": "reviews"} for r in load_split("sentiment", "train")]
    train = gold + silver
    rng.shuffle(train)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        args.out / "train.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in train)
    )
    dev = load_sentiment_multidomain(MULTIDOMAIN_DIR / "dev.jsonl")
    atomic_write_text(
        args.out / "dev.jsonl",
        "".join(json.dumps({"text": r["text"], "label": r["label"]}, ensure_ascii=False) + "\n" for r in dev),
    )
    manifest = {
        "command": "python recipes/zoo/sentiment_silver.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "lexicon")
        ),
        "lexicon_sha256": hashlib.sha256(args.lexicon.expanduser().read_bytes()).hexdigest(),
        "rule": "weak_sentiment_label: every sentiment word the same polarity, none negated",
        "sources": counts,
        "train": {"reviews": len(gold), "silver": len(silver), "total": len(train)},
        "dev": {"file": "data/eval/sentiment_multidomain/dev.jsonl", "size": len(dev)},
    }
    atomic_write_text(args.out / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")
    print(json.dumps(manifest, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
