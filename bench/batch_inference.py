"""Corpus-scale inference: `ernie-zoo taskflow TASK -i FILE -o OUT` in one process (the local engine) against the
Ray engine (`--engine ray --workers W`, one Taskflow per actor), whole commands timed end to end (start-up, model
loads and Ray's local cluster included), same input, same run, rounds interleaved.

    python bench/batch_inference.py                       # sentiment_analysis on 4,000 review training texts
    python bench/batch_inference.py --texts 1000 --rounds 1 --out /tmp/batch_inference.json

The texts are the first --texts lines of the review train split ($ERNIE_ZOO_CACHE/datasets/sentiment/train.jsonl).
The local engine runs with torch's default threads (one per core); each Ray actor with one thread and one CPU.
Both outputs are checked to be the same file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench/results/batch_inference.json"


def main() -> None:
    from ernie_zoo.data.labelled import DEFAULT_DATASETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="sentiment_analysis")
    parser.add_argument("--texts", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = (DEFAULT_DATASETS / "sentiment" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"].replace("\n", " ") for line in rows[: args.texts]]
    tmp = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    src = tmp / "texts.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": str(tmp / "ray")}
    base = [sys.executable, "-m", "ernie_zoo.cli", "taskflow", args.task, "-i", str(src), "--no-progress"]
    engines = {
        "local": [*base, "-o", str(tmp / "local.jsonl")],
        f"ray_{args.workers}_workers": [*base, "-o", str(tmp / "ray.jsonl"), "--engine", "ray",
                                        "--workers", str(args.workers)],  # fmt: skip
    }
    times: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(args.rounds):
        for name, cmd in engines.items():
            start = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            times[name].append(time.perf_counter() - start)
    same = (tmp / "local.jsonl").read_bytes() == (tmp / "ray.jsonl").read_bytes()
    base_s = statistics.median(times["local"])
    result = {
        "what": __doc__.splitlines()[0],
        "command": "python bench/batch_inference.py " + " ".join(sys.argv[1:]),
        "task": args.task,
        "texts": len(texts),
        "rounds": args.rounds,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "engines": {
            name: {
                "seconds": round(statistics.median(t), 2),
                "texts_per_s": round(len(texts) / statistics.median(t), 1),
                "speedup_vs_local": round(base_s / statistics.median(t), 2),
            }
            for name, t in times.items()
        },
        "same_output": same,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
