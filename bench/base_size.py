#!/usr/bin/env python
"""Taskflow at real size (#39 item 4): ERNIE 3.0 medium and base shapes, sentiment and NER, 1 and 2 threads.

Models: random-weight ErnieZoo heads at the ERNIE 3.0 shapes (``presets``: medium 6 x 768, base 12 x 768, 12 heads,
FFN 3072) with ERNIE 3.0's 40,000-row embedding table, the zoo's character tokenizer and its pinyin/radical/stroke
features (speed and memory do not depend on the weights; the features cost what they cost). Sentiment: a sequence
classifier with 2 labels; NER: a token classifier (softmax, BIO over PER/LOC/ORG).

Systems, on the same weights and the same texts (``bench_taskflow.make_texts``: real sentences mixed to
log-uniform lengths of 8-480 characters, the usual shape of a collection), in one process per size:

* ``taskflow_fp32`` / ``taskflow_int8``: ``Taskflow(task, task_path=DIR, precision=...)``, torch;
* ``ort_fp32`` / ``ort_int8``: the exported directory (``export_onnx``) on ``backend="onnxruntime"``;
* ``pipeline``: ``transformers.pipeline("text-classification" / "token-classification")``, fp32, same batch size.

Speed: texts/s over ``--n`` texts, the best of ``--rounds`` interleaved rounds (a shared machine), per thread count;
ratios against the pipeline. Load: seconds from nothing to the first result (model directory read, weights
loaded, one text run), per system. Memory (``--rss-calls``, default 5000): each system in a fresh subprocess
answers that many calls of 1-4 mixed texts; peak RSS and steady RSS (the median of the last quarter's samples),
sampled about 40 times over the calls (every 100 calls at 4,000 or more). Published context (PaddleNLP, not comparable hardware): ERNIE 3.0-Medium MSRA NER 91 QPS
fp32 / 141 QPS int8 with 12 CPU threads.

    python bench/base_size.py                  # the full run: many hours on 2 cores at base size (5,000 calls)
    python bench/base_size.py --n 64 --rss-calls 200      # what bench/results/base_size.json holds: ~70 min
    python bench/base_size.py --sizes medium --threads 1 --n 64 --rss-calls 300 --out /tmp/base.json   # quick
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
OUT = REPO / "bench/results/base_size.json"
TASKS = {"sentiment_analysis": "text-classification", "ner": "token-classification"}
SYSTEMS = ("taskflow_fp32", "taskflow_int8", "ort_fp32", "ort_int8", "pipeline")
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]


def build(size: str, task: str, root: Path) -> Path:
    """A random-weight model directory of `size` for `task` (the zoo tokenizer and char tables saved with it)."""
    import torch
    from transformers import AutoTokenizer

    from ernie_zoo import ErnieZooForSequenceClassification, ErnieZooForTokenClassification
    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.taskflow.models import ZOO_DIR

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(ZOO_DIR / "ernie-zoo-mini-zh")
    config = preset_config(size, vocab_size=40000)
    if task == "ner":
        config.id2label = dict(enumerate(TAGS))
        model = ErnieZooForTokenClassification(config)
    else:
        config.id2label = {0: "negative", 1: "positive"}
        model = ErnieZooForSequenceClassification(config)
    config.label2id = {v: k for k, v in config.id2label.items()}
    out = root / f"{size}-{task}"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_flow(system: str, task: str, model_dir: Path, onnx_dir: Path | None, batch_size: int):
    """A callable texts -> results for `system`."""
    if system == "pipeline":
        import transformers

        import ernie_zoo.auto  # noqa: F401  (registers the ErnieZoo classes with the Auto mappings)

        pipe = transformers.pipeline(TASKS[task], model=str(model_dir), device="cpu", batch_size=batch_size)
        return lambda texts: pipe(texts)
    from ernie_zoo.taskflow import Taskflow

    precision = system.rsplit("_", 1)[1]
    if system.startswith("ort"):
        return Taskflow(
            task, task_path=onnx_dir, backend="onnxruntime", precision=precision, batch_size=batch_size
        )
    return Taskflow(task, task_path=model_dir, precision=precision, batch_size=batch_size)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_child(args: argparse.Namespace) -> int:
    """One system answering `--rss-calls` calls in this (fresh) process; prints a JSON line."""
    import torch
    from bench_taskflow import make_texts

    torch.set_num_threads(1)
    start = rss_mib()
    flow = make_flow(args.system, args.task, Path(args.model_dir), Path(args.onnx_dir), 32)
    pool = make_texts(400, seed=1, lengths="skewed")
    rng = random.Random(0)
    samples = []
    every = max(5, min(100, args.rss_calls // 40))  # about 40 samples whatever the number of calls
    for i in range(args.rss_calls):
        flow([pool[rng.randrange(len(pool))] for _ in range(rng.randint(1, 4))])
        if i % every == 0 or i == args.rss_calls - 1:
            samples.append(rss_mib())
    tail = samples[-max(1, len(samples) // 4) :]
    print(json.dumps({"start_mib": round(start, 1), "peak_mib": round(max(samples), 1),
                      "steady_mib": round(statistics.median(tail), 1), "calls": args.rss_calls}))  # fmt: skip
    return 0


NAMES = {"taskflow_fp32": "Taskflow fp32", "taskflow_int8": "Taskflow int8", "ort_fp32": "ORT fp32",
         "ort_int8": "ORT int8", "pipeline": "transformers pipeline"}  # fmt: skip


def render_table(report: dict) -> str:
    """The tables of a results file that docs/serving.md shows: texts/s (x the pipeline's) per size, task and thread count; load time;
    RSS of the memory run."""
    rows = report["rows"]
    head = " | ".join(NAMES[s] for s in SYSTEMS)
    out = [f"Texts/s ({rows[0]['texts']} mixed texts of 8-480 characters, batch size {report['batch_size']}, best of "
           "the rounds; × the pipeline's), random-weight ERNIE 3.0 shapes:", "",
           f"| size | task | threads | {head} |", "|---|---|---:|" + "---:|" * len(SYSTEMS)]  # fmt: skip
    for row in rows:
        for threads, speed in row["texts_per_s"].items():
            ratio = row["vs_pipeline"][threads]
            cells = [f"{speed[s]:g}" + (f" ({ratio[s]:.2f}×)" if s in ratio else "") for s in SYSTEMS]
            out.append(f"| {row['size']} | {row['task']} | {threads.split('_')[0]} | {' | '.join(cells)} |")
    out += ["", "Seconds from nothing to the first result (model directory read, weights loaded, one text run):", "",
            f"| size | task | {head} |", "|---|---|" + "---:|" * len(SYSTEMS)]  # fmt: skip
    for row in rows:
        out.append(f"| {row['size']} | {row['task']} | " + " | ".join(f"{row['load_s'][s]:g}" for s in SYSTEMS) + " |")
    rss = [row for row in rows if row.get("rss")]
    if rss:
        calls = rss[0]["rss"][SYSTEMS[0]]["calls"]
        out += ["", f"RSS in MiB over {calls:,} calls of 1-4 mixed texts, 1 thread, each system in a fresh process "
                "(start / peak / steady = median of the last quarter):", "",
                f"| size | task | {head} |", "|---|---|" + "---:|" * len(SYSTEMS)]  # fmt: skip
        for row in rss:
            cells = [f"{r['start_mib']:.0f} / {r['peak_mib']:.0f} / {r['steady_mib']:.0f}"
                     for r in (row["rss"][s] for s in SYSTEMS)]  # fmt: skip
            out.append(f"| {row['size']} | {row['task']} | {' | '.join(cells)} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="medium,base")
    parser.add_argument("--tasks", default="sentiment_analysis,ner")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--n", type=int, default=128, help="texts per speed round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--rss-calls", type=int, default=5000, help="calls per system in the memory run; 0: skip"
    )
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--table", action="store_true", help="print the markdown tables of --out and exit")
    parser.add_argument("--system", help=argparse.SUPPRESS)  # the memory run's child process
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--onnx-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    if args.system:
        return rss_child(args)
    if args.table:
        print(render_table(json.loads(Path(args.out).read_text(encoding="utf-8"))))
        return 0

    import onnxruntime
    import torch
    import transformers
    from bench_taskflow import make_texts

    from ernie_zoo.taskflow.onnx import clear_onnx_cache, export_onnx

    texts = make_texts(args.n, seed=0, lengths="skewed")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            for task in args.tasks.split(","):
                model_dir = build(size, task, Path(tmp))
                onnx_dir = export_onnx(model_dir, Path(tmp) / f"{size}-{task}-onnx", task=task)
                row: dict = {"size": size, "task": task, "texts": len(texts),
                             "chars": sum(map(len, texts)), "load_s": {}, "texts_per_s": {}}  # fmt: skip
                torch.set_num_threads(1)
                flows = {}
                for system in SYSTEMS:
                    start = time.perf_counter()
                    flows[system] = make_flow(system, task, model_dir, onnx_dir, args.batch_size)
                    flows[system](texts[:1])
                    row["load_s"][system] = round(time.perf_counter() - start, 2)
                for threads in map(int, args.threads.split(",")):
                    torch.set_num_threads(threads)
                    best = {s: float("inf") for s in SYSTEMS}
                    clear_onnx_cache()  # ONNX Runtime reads its thread count when the session is made
                    for system in SYSTEMS:
                        if system.startswith("ort"):
                            flows[system] = make_flow(system, task, model_dir, onnx_dir, args.batch_size)
                            flows[system](texts[:1])
                    for _ in range(args.rounds):
                        for system, flow in flows.items():
                            start = time.perf_counter()
                            flow(texts)
                            best[system] = min(best[system], time.perf_counter() - start)
                    speed = {s: round(len(texts) / t, 1) for s, t in best.items()}
                    row["texts_per_s"][f"{threads}_threads"] = speed
                    row.setdefault("vs_pipeline", {})[f"{threads}_threads"] = {
                        s: round(speed[s] / speed["pipeline"], 2) for s in SYSTEMS if s != "pipeline"
                    }
                    print(json.dumps({"size": size, "task": task, "threads": threads, **speed}), flush=True)
                if args.rss_calls and task == "sentiment_analysis":
                    row["rss"] = {}
                    for system in SYSTEMS:
                        cmd = [sys.executable, __file__, "--system", system, "--task", task, "--model-dir",
                               str(model_dir), "--onnx-dir", str(onnx_dir), "--rss-calls", str(args.rss_calls)]  # fmt: skip
                        env = dict(os.environ, OMP_NUM_THREADS="1")
                        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
                        row["rss"][system] = json.loads(done.stdout.strip().splitlines()[-1])
                        print(size, task, system, row["rss"][system], flush=True)
                rows.append(row)
                flows.clear()
    result = {
        "what": "Taskflow (torch fp32/int8, ONNX Runtime fp32/int8) vs transformers.pipeline at ERNIE 3.0 shapes, "
        "random weights; texts/s best of rounds; load = seconds to the first result; RSS over mixed calls",
        "command": "python bench/base_size.py " + " ".join(sys.argv[1:]),
        "texts": "bench_taskflow.make_texts(n, seed=0, lengths='skewed'): 8-480 characters, log-uniform",
        "batch_size": args.batch_size,
        "published_context": "PaddleNLP: ERNIE 3.0-Medium MSRA NER 91 QPS fp32 / 141 QPS int8, 12 CPU threads "
        "(not comparable hardware)",
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": onnxruntime.__version__,
        },  # fmt: skip
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)",
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
