#!/usr/bin/env python
"""Taskflow memory: resident set size stays flat over 10,000 mixed-length calls on the shipped models.

One Taskflow per task on the shipped models (``sentiment_analysis``: ernie-zoo-mini-sentiment; ``ner``:
ernie-zoo-mini-ner, the two-tagger ensemble), default settings (batch 32, max_seq_len 512, fp32). Every call is a
new input drawn with ``random.Random(seed)`` the way traffic to a service looks:

* texts per call: 1-64, P(n) proportional to 1/n^2 (most calls carry one text, some a batch of 64; mean ~2.6),
  a single text passed as a ``str`` and several as a ``list``;
* characters per text: log-normal, median 40, sigma 1.4, at least 1 and at most 2,000 (mean ~105: mostly
  sentences and reviews, 4% over 500 characters, which Taskflow splits into chunks of up to 512 tokens), cut
  from the real sentences of ``tests/data/zh_sentences.txt`` and the review samples of ``tests/data/``.

So almost every batch has a (rows, length) shape not seen before, the case that grew RSS by hundreds of MiB:
oneDNN, PyTorch's CPU kernel library, compiles and caches one kernel per input shape (up to 1,024). Taskflow
runs its forward passes with oneDNN off (``ernie_zoo.taskflow.task.without_onednn``: matrix products go to MKL's
BLAS at the same CPU time); ``--onednn`` leaves it on, the old behaviour, for comparison.

Warm-up is ``--warmup`` calls, then ``--calls`` calls are measured; RSS (``/proc/self/statm``) is sampled every
``--every`` calls, twice: raw, and *retained* (after ``gc.collect()`` and glibc's ``malloc_trim(0)``). Raw RSS
swings with the size of the call just made (a 64-text call's activations are freed but kept by the allocator for
the next one; with oneDNN off the NER run's raw RSS went up and down between 654 and 717 MiB, back to 654.6 six
times); retained RSS is what a leak or a cache would grow. Bound (the issue's), on retained RSS: after the last
call <= after warm-up * 1.05 and <= + 50 MiB; the raw first/last and maximum are recorded too.
``--onednn --out FILE`` measures the old behaviour.

Usage::

    .venv/bin/python bench/bench_taskflow_memory.py [--calls 10000] [--warmup 1000] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import math
import os
import platform
import random
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from ernie_zoo.taskflow import Taskflow  # noqa: E402
from ernie_zoo.taskflow import task as task_module  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
MAX_TEXTS, MAX_CHARS = 64, 2000


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def retained_mib() -> float:
    """RSS after `gc.collect()` and glibc's `malloc_trim(0)`: memory the process still holds, without the freed
    working set of the last (possibly large) call that the allocator has not yet given back to the system."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mib()


def text_pool() -> str:
    data = REPO / "tests" / "data"
    lines = []
    for name in ("zh_sentences.txt", "reviews_pos_sample.txt", "reviews_neg_sample.txt"):
        lines += [s.strip() for s in (data / name).read_text(encoding="utf-8").splitlines() if s.strip()]
    rng, text = random.Random(0), ""
    while len(text) < 4 * MAX_CHARS:  # shuffled copies, so any cut of up to MAX_CHARS fits
        rng.shuffle(lines)
        text += "".join(lines)
    return text


def calls(n: int, seed: int):
    """n calls: a str or a list of 1-64 str, lengths log-normal (median 40) within 1-2,000 characters."""
    pool = text_pool()
    rng = random.Random(seed)
    sizes = list(range(1, MAX_TEXTS + 1))
    weights = [1 / k**2 for k in sizes]

    def text() -> str:
        length = max(1, min(MAX_CHARS, round(rng.lognormvariate(math.log(40), 1.4))))
        start = rng.randrange(len(pool) - length)
        return pool[start : start + length]

    for _ in range(n):
        k = rng.choices(sizes, weights)[0]
        yield text() if k == 1 else [text() for _ in range(k)]


def measure(flow: Taskflow, warmup: int, n: int, every: int, seed: int) -> dict:
    for item in tqdm(calls(warmup, seed), total=warmup, desc=f"{flow.task} warm-up", leave=False):
        flow(item)
    samples = [(0, round(rss_mib(), 1), round(retained_mib(), 1))]
    texts = chars = 0
    start = time.perf_counter()
    for i, item in enumerate(tqdm(calls(n, seed + 1), total=n, desc=flow.task, leave=False), 1):
        flow(item)
        batch = [item] if isinstance(item, str) else item
        texts += len(batch)
        chars += sum(map(len, batch))
        if i % every == 0:
            samples.append((i, round(rss_mib(), 1), round(retained_mib(), 1)))
    elapsed = time.perf_counter() - start
    first, last = samples[0][2], samples[-1][2]
    return {
        "retained_after_warmup_mib": first,
        "retained_after_calls_mib": last,
        "growth_mib": round(last - first, 1),
        "growth_pct": round(100 * (last - first) / first, 2),
        "raw_rss_first_last_mib": [samples[0][1], samples[-1][1]],
        "max_raw_rss_mib": max(s[1] for s in samples),
        "texts": texts,
        "chars": chars,
        "calls_per_s": round(n / elapsed, 2),
        "chars_per_s": round(chars / elapsed),
        "samples_call_raw_retained_mib": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tasks", default="sentiment_analysis,ner")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bound-pct", type=float, default=5.0)
    parser.add_argument("--bound-mib", type=float, default=50.0)
    parser.add_argument("--onednn", action="store_true", help="keep oneDNN on (the behaviour before)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "taskflow_memory.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    if args.onednn:
        task_module.without_onednn = lambda active=True: contextlib.nullcontext()
    results: dict[str, dict] = {}
    for task in args.tasks.split(","):
        flow = Taskflow(task, device="cpu")
        results[task] = measure(flow, args.warmup, args.calls, args.every, args.seed)
        print(task, {k: v for k, v in results[task].items() if not k.startswith("samples")}, flush=True)
    ok = all(
        r["growth_pct"] <= args.bound_pct and r["growth_mib"] <= args.bound_mib for r in results.values()
    )
    result = {
        "calls_after_warmup": args.calls,
        "warmup_calls": args.warmup,
        "bound": f"RSS growth after warm-up <= {args.bound_pct}% and <= {args.bound_mib} MiB",
        "within_bound": ok,
        "models": "shipped: ernie-zoo-mini-sentiment, ernie-zoo-mini-ner (fp32, batch 32)",
        "inputs": (
            "fresh every call: 1-64 texts (P(n) ~ 1/n^2), 1-2,000 chars (log-normal, median 40), "
            "cut from tests/data sentences and reviews"
        ),
        "onednn_during_forward": "on (--onednn: the behaviour before)"
        if args.onednn
        else "off (Taskflow's default)",
        "threads": args.threads,
        "tasks": results,
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "tasks"}, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp_out, args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
