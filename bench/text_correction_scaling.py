"""How `Taskflow("text_correction")` scales with the length of one text (issue #36: a 100k-character text had not
finished after 120 s, and 4k -> 16k characters took 5x the time).

One text of N characters (real review sentences of the offline corpus, joined, with one in ~12 confusable characters
replaced by a confusion-set candidate, so the corrector has errors to find) for N = 1k, 4k, 16k, 64k, 100k, each
corrected by the shipped ernie-zoo-mini-csc in one call (one warm-up call first; 1 thread unless --threads). The
result gives seconds and seconds per 1,000 characters relative to the 1k text: 1.0 everywhere is linear.

    python bench/text_correction_scaling.py                        # ~3-6 min on an idle core
    python bench/text_correction_scaling.py --sizes 1000 4000 --out /tmp/scaling.json   # a smoke run

Writes bench/results/text_correction_scaling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def noisy_text(length: int, seed: int = 0) -> str:
    from ernie_zoo.data.sources import DEFAULT_CACHE
    from ernie_zoo.taskflow import Taskflow

    path = Path(os.environ.get("ERNIE_ZOO_CACHE", DEFAULT_CACHE)) / "corpora" / "reviews.txt"
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if len(line.strip()) > 8]
    rng = random.Random(seed)
    sets = Taskflow("text_correction")._task.model.confusion_sets
    parts, total = [], 0
    while total < length:
        chars = list(rng.choice(lines))
        for i, c in enumerate(chars):
            if c in sets and rng.random() < 1 / 12 and (cands := sorted(sets.candidates(c))):
                chars[i] = rng.choice(cands)
        parts.append("".join(chars))
        total += len(parts[-1])
    return "".join(parts)[:length]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 4_000, 16_000, 64_000, 100_000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "text_correction_scaling.json"
    )
    args = parser.parse_args()

    import torch

    from ernie_zoo.taskflow import Taskflow

    torch.set_num_threads(args.threads)
    flow = Taskflow("text_correction")
    flow("这本书很有意思，我以经看完了。")  # warm-up: jieba's word model, the LM, first kernels
    rows = []
    for n in args.sizes:
        text = noisy_text(n)
        start = time.perf_counter()
        result = flow(text)
        seconds = time.perf_counter() - start
        assert len(result["target"]) == n
        rows.append({"chars": n, "seconds": round(seconds, 3), "errors_found": len(result["errors"])})
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]["seconds"] / rows[0]["chars"]
    for row in rows:
        row["per_1k_chars_vs_first"] = round(row["seconds"] / row["chars"] / base, 3)
    result = {
        "what": "seconds for one text of N characters, Taskflow('text_correction'), ernie-zoo-mini-csc; "
        "per_1k_chars_vs_first = (seconds per character) / (the same for the first size): 1.0 is linear",
        "command": "python bench/text_correction_scaling.py",
        "threads": args.threads,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
