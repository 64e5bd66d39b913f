#!/usr/bin/env python
"""Taskflow memory: resident set size stays flat over 10,000 calls after warm-up.

One Taskflow per task (sentiment_analysis and ner) on a small random-init ErnieZoo model (preset ``tiny``: 2
layers, hidden 64) with a 21,128-token vocabulary trained on jieba's dictionary words. Inputs alternate between a
single text and lists of 1-8 texts of 5-300 characters cut from ``tests/data/zh_sentences.txt``
(``random.Random(0)``), so splitting, sorting, padding and result objects run with ever-changing shapes.

Two workloads, both asserted:

* ``pool``: a pool of ``--pool`` distinct inputs, cycled (sentiment_analysis and ner);
* ``fresh``: every call is a new input (sentiment_analysis).

Warm-up is ``--pool`` calls; then ``--calls`` calls are measured. Bound: RSS after the last call <= RSS after
warm-up + ``--bound-mib`` MiB, and growth over the second half <= half of that (a leak grows linearly; allocator
noise does not). The size of the tokenizer's pinyin run cache (``ernie_zoo.tokenization.pinyin``, one entry per
distinct Han run, cleared at 200,000 entries) is recorded next to RSS.

Finding behind Taskflow's padding rule: with every batch padded to exactly its longest row, fresh inputs kept
creating new (batch, length) shapes and RSS grew ~47 MiB per 3,000 calls (oneDNN's CPU primitive cache is keyed
by shape; with ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 the growth vanished). Padding lengths to a multiple of 8 bounds
the shapes, and the growth went to < 1 MiB.

RSS is read from ``/proc/self/statm`` every ``--every`` calls.

Usage::

    .venv/bin/python bench/bench_taskflow_memory.py [--calls 10000] [--pool 1000] [--every 500]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shlex
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from ernie_zoo import ErnieZooForSequenceClassification, ErnieZooForTokenClassification, ErnieZooTokenizerFast  # noqa: E402
from ernie_zoo.models.presets import preset_config  # noqa: E402
from ernie_zoo.taskflow import Taskflow  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def build(directory: Path) -> dict[str, Path]:
    import jieba

    words = [
        line.split(" ", 1)[0]
        for line in (Path(jieba.__file__).parent / "dict.txt").read_text(encoding="utf-8").splitlines()
    ]
    tok = ErnieZooTokenizerFast.train_vocab(words, vocab_size=21128, min_frequency=1, show_progress=False)
    dirs = {}
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    for name, cls, labels in (
        ("sentiment_analysis", ErnieZooForSequenceClassification, ["negative", "positive"]),
        ("ner", ErnieZooForTokenClassification, tags),
    ):
        config = preset_config(
            "tiny",
            vocab_size=len(tok),
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={t: i for i, t in enumerate(labels)},
        )
        torch.manual_seed(0)
        model = cls(config)
        model.load_char_tables(tok)
        dirs[name] = directory / name
        model.save_pretrained(dirs[name])
        tok.save_pretrained(dirs[name])
    return dirs


def inputs(n: int, seed: int = 0) -> list:
    sentences = [
        s
        for s in (REPO / "tests" / "data" / "zh_sentences.txt").read_text(encoding="utf-8").splitlines()
        if s
    ]
    rng = random.Random(seed)

    def text() -> str:
        target = rng.randint(5, 300)
        out = ""
        while len(out) < target:
            out += rng.choice(sentences)
        start = rng.randrange(len(out) - target + 1)
        return out[start : start + target]

    return [text() if i % 2 == 0 else [text() for _ in range(rng.randint(1, 8))] for i in range(n)]


def measure(flow, warm: list, calls: list, every: int) -> dict:
    from ernie_zoo.tokenization import pinyin

    for item in warm:
        flow(item)
    gc.collect()
    samples = [(0, round(rss_mib(), 2), len(pinyin._RUN_IDS))]
    start = time.perf_counter()
    for i, item in enumerate(calls, 1):
        flow(item)
        if i % every == 0:
            samples.append((i, round(rss_mib(), 2), len(pinyin._RUN_IDS)))
    elapsed = time.perf_counter() - start
    first, middle, last = samples[0][1], samples[len(samples) // 2][1], samples[-1][1]
    return {
        "rss_after_warmup_mib": first,
        "rss_after_calls_mib": last,
        "growth_mib": round(last - first, 2),
        "growth_second_half_mib": round(last - middle, 2),
        "max_rss_mib": max(s[1] for s in samples),
        "calls_per_s": round(len(calls) / elapsed, 1),
        "samples_call_rss_mib_pinyin_runs": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--pool", type=int, default=1000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bound-mib", type=float, default=16.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "taskflow_memory.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    pool = inputs(args.pool)
    cycled = [pool[i % len(pool)] for i in range(args.calls)]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = build(Path(tmp))
        flows = {
            task: Taskflow(task, task_path=path, device="cpu", batch_size=8) for task, path in dirs.items()
        }
        for task, flow in flows.items():
            results[f"pool/{task}"] = measure(flow, pool, cycled, args.every)
        fresh = inputs(args.pool + args.calls, seed=1)
        results["fresh/sentiment_analysis"] = measure(
            flows["sentiment_analysis"], fresh[: args.pool], fresh[args.pool :], args.every
        )
    ok = all(
        r["growth_mib"] <= args.bound_mib and r["growth_second_half_mib"] <= args.bound_mib / 2
        for r in results.values()
    )
    result = {
        "calls_after_warmup": args.calls,
        "pool_size": args.pool,
        "bound": (
            f"every workload: RSS growth after warm-up <= {args.bound_mib} MiB and second-half growth <= "
            f"{args.bound_mib / 2} MiB"
        ),
        "within_bound": ok,
        "model": "random-init ErnieZoo preset tiny (2 layers, hidden 64), vocab 21128",
        "inputs": "alternating str and lists of 1-8 texts, 5-300 chars, cut from tests/data/zh_sentences.txt",
        "tasks": results,
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "tasks"}, indent=2))
    for task, r in results.items():
        print(task, {k: v for k, v in r.items() if not k.startswith("samples")})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp_out, args.out)
    assert ok, "RSS grew beyond the bound"
    return 0


if __name__ == "__main__":
    sys.exit(main())
