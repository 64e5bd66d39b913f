"""The n-gram LM's file format (issue #22): bytes and load time of the correction model's `ngram_lm.safetensors`
written in format version 1 ((N, k) uint16 ids + counts) and version 2 (varint streams; `ernie_zoo.models.ngram`),
and the time `Taskflow("text_correction")` takes to start with each.

The LM is the one in `--model` (whichever version it is stored in), written in both versions to a temporary copy
of the model directory. Load times are the median of `--repeats` runs: `CharNgramLM.load` in this process (warm:
the file in the page cache, numpy imported) and `Taskflow("text_correction", task_path=copy)` in a fresh process
(each a new interpreter, as a user starts it; torch threads 1). Both versions must give the same log-probabilities.
Wall-clock and CPU time (`time.process_time`, less sensitive to other work on shared cores) are both recorded, with
the machine's load average. Each LM measured is one entry of the results' `lms` (a rerun on another LM keeps the
others: the shipped LM before and after a re-ship).

    python bench/ngram_lm_format.py                  # the shipped ernie-zoo-mini-csc: ~1 minute on idle cores
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEXT = "我们明天在见面吧，他非常高兴地说：这是一个很好的机会。"
INIT = """
import json, sys, time
import torch
torch.set_num_threads(1)
from ernie_zoo.taskflow import Taskflow
t, cpu = time.perf_counter(), time.process_time()
flow = Taskflow("text_correction", task_path=sys.argv[1])
init_s, init_cpu_s = time.perf_counter() - t, time.process_time() - cpu
print(json.dumps({"init_s": init_s, "init_cpu_s": init_cpu_s, "target": flow(sys.argv[2])["target"]}))
"""


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from ernie_zoo.models.correction import NGRAM_FILE
    from ernie_zoo.models.ngram import CharNgramLM

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=REPO / "ernie_zoo/zoo/ernie-zoo-mini-csc")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=REPO / "bench/results/ngram_lm_format.json")
    args = p.parse_args(argv)
    lm = CharNgramLM.load(args.model / NGRAM_FILE)
    result = {
        "command": " ".join(
            ["python bench/ngram_lm_format.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "model": str(args.model.relative_to(REPO) if args.model.is_relative_to(REPO) else args.model),
        "ngram_lm": {
            "order": lm.order,
            "ngrams": lm.num_ngrams,
            "per_order": [len(t["keys"]) for t in lm._tables[1:]],
            "symbols": lm.base,
        },
        "load_average_1min": round(os.getloadavg()[0], 2),
        "versions": {},
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / args.model.name
        shutil.copytree(args.model, copy)
        (copy / "manifest.json").unlink(missing_ok=True)  # a local directory: no checksums to verify
        for version in (1, 2):
            lm.save(copy / NGRAM_FILE, version=version)
            loads, load_cpu = [], []
            for _ in range(args.repeats):
                t, cpu = time.perf_counter(), time.process_time()
                again = CharNgramLM.load(copy / NGRAM_FILE)
                loads.append(time.perf_counter() - t)
                load_cpu.append(time.process_time() - cpu)
            if not np.array_equal(again.log_probs(TEXT), lm.log_probs(TEXT)):
                raise SystemExit(f"format version {version}: the log-probabilities differ")
            inits = []
            for _ in range(args.repeats):
                out = subprocess.run(
                    [sys.executable, "-c", INIT, str(copy), TEXT], env=env, capture_output=True, text=True
                )
                if out.returncode:
                    raise SystemExit(out.stderr)
                inits.append(json.loads(out.stdout.strip().splitlines()[-1]))
            size = (copy / NGRAM_FILE).stat().st_size
            result["versions"][str(version)] = {
                "bytes": size,
                "bytes_per_ngram": round(size / lm.num_ngrams, 3),
                "load_s_median": round(statistics.median(loads), 4),
                "load_cpu_s_median": round(statistics.median(load_cpu), 4),
                "taskflow_init_s_median": round(statistics.median(r["init_s"] for r in inits), 3),
                "taskflow_init_cpu_s_median": round(statistics.median(r["init_cpu_s"] for r in inits), 3),
                "taskflow_init_s": [round(r["init_s"], 3) for r in inits],
                "target": inits[0]["target"],
            }
            print(f"version {version}: {json.dumps(result['versions'][str(version)], ensure_ascii=False)}")
    if result["versions"]["1"]["target"] != result["versions"]["2"]["target"]:
        raise SystemExit("the two versions correct the text differently")
    # one entry per LM measured: a rerun replaces the entry of the same LM and keeps the others (the shipped LM
    # before and after a re-ship)
    kept = json.loads(args.out.read_text(encoding="utf-8"))["lms"] if args.out.is_file() else []
    lms = [r for r in kept if r["ngram_lm"] != result["ngram_lm"]] + [result]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"lms": lms}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
