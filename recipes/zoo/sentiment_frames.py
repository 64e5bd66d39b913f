"""The training file of the e5 sentiment default (recipes/zoo/sentiment-e5-frames.yaml): the review TRAIN split plus
the framed sentences of recipes/zoo/sentiment_silver.py (`source: silver:frames`: a lexicon word in 太{w}了！ / 非常{w}。
frames, or a negated positive one), shuffled with seed 7; none of its lexicon-labelled news / dictionary / fortune
sentences.

    python recipes/zoo/sentiment_silver.py --out ~/.cache/ernie_zoo/datasets/sentiment_silver3 --frames 3000
    python recipes/zoo/sentiment_frames.py        # -> ~/.cache/ernie_zoo/datasets/sentiment_frames/train.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from ernie_zoo.utils import atomic_write_text

DATASETS = Path.home() / ".cache/ernie_zoo/datasets"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reviews", type=Path, default=DATASETS / "sentiment/train.jsonl")
    ap.add_argument("--silver", type=Path, default=DATASETS / "sentiment_silver3/train.jsonl")
    ap.add_argument("--out", type=Path, default=DATASETS / "sentiment_frames/train.jsonl")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    reviews = [json.loads(x) for x in args.reviews.read_text(encoding="utf-8").splitlines() if x]
    frames = [json.loads(x) for x in args.silver.read_text(encoding="utf-8").splitlines() if x]
    frames = [r for r in frames if r.get("source") == "silver:frames"]
    if not frames:
        raise SystemExit(
            f"{args.silver}: no 'silver:frames' rows (build it with sentiment_silver.py --frames 3000)"
        )
    rows = reviews + frames
    random.Random(args.seed).shuffle(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        args.out,
        "".join(
            json.dumps({"text": r["text"], "label": r["label"]}, ensure_ascii=False) + "\n" for r in rows
        ),
    )
    print(f"{args.out}: {len(reviews):,} reviews + {len(frames):,} framed sentences")


if __name__ == "__main__":
    main()
