"""LoRA vs full fine-tuning vs a bottleneck adapter, on the shipped encoder (ernie-zoo-mini-zh), for review
sentiment and MSRA NER (CRF), with several seeds.

Each task starts from its recipe in recipes/finetune/ (sentiment_lora.yaml, msra_ner_crf.yaml: base
`ernie-zoo-mini-zh` by name) and changes only the method, its learning rate and rank, the seed and the budget,
so every run of a task sees the same data, steps and batch size:

  full     - every weight trains;                       learning rate from --lr-full
  lora     - LoRA r in --ranks on query/key/value/dense; learning rate from --lr-lora
  adapter  - Houlsby bottleneck adapters (hidden/--reduction-factor); learning rate from --lr-adapter
  (the classifier, the CRF and the pooler, which the masked-LM checkpoint lacks, train fully under LoRA and
  adapters)

Selection on dev, with the first seed: each method's learning rate (and LoRA's rank) is the one with the best dev
metric (accuracy; entity F1) at its best checkpoint. The chosen configurations are then run with every other seed.
Reported per run: dev and test metric, trainable parameters, training seconds, peak memory (the run's process:
peak RSS on CPU, peak allocated CUDA memory on a GPU; each run is its own subprocess). Summary per task and
method: mean and standard deviation of the test metric over seeds, and LoRA minus full against the targets
(within 1.0 accuracy point on sentiment, 1.5 F1 on NER, training at most 10% of the parameters).

Data: the seeded splits `python scripts/prepare_corpora.py` writes to ~/.cache/ernie_zoo/datasets; the first
--train / --dev / --test examples of a seeded shuffle of each split (the same sample for every run).

    python bench/bench_lora_vs_full.py                       # the full comparison: hours on 2 CPU cores
    python bench/bench_lora_vs_full.py --tasks sentiment --seeds 1 --ranks 8 --steps 10 --train 200 \
        --dev 50 --test 50 --lr-full 1e-4 --lr-lora 2e-3 --lr-adapter 2e-3 --out /tmp/lora_vs_full_tiny.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = "ernie-zoo-mini-zh"
TASKS = {
    "sentiment": {
        "recipe": "recipes/finetune/sentiment_lora.yaml",
        "data": "sentiment",
        "metric": "accuracy",
        "target": 0.010,  # LoRA within 1.0 accuracy point of full fine-tuning
    },
    "ner": {
        "recipe": "recipes/finetune/msra_ner_crf.yaml",
        "data": "ner",
        "metric": "f1",
        "target": 0.015,  # within 1.5 entity F1
    },
}
MAX_TRAINABLE_FRACTION = 0.10


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def _sample(src: Path, dst: Path, n: int | None, seed: int) -> int:
    lines = [line for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(seed).shuffle(lines)
    lines = lines[:n] if n else lines
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


# ----------------------------------------------------------------------------------------------- one run
def run_one(spec: dict) -> dict:
    """One fine-tuning run (in this process: the parent starts one subprocess per run); returns its record."""
    import torch

    from ernie_zoo.finetune import build_args, run_finetune

    torch.set_num_threads(spec["threads"])
    method = {"method": spec["method"]}
    if spec["method"] == "lora":
        method.update(lora_r=spec["rank"], lora_alpha=2 * spec["rank"])
    if spec["method"] in ("houlsby", "pfeiffer"):
        method.update(reduction_factor=spec["reduction_factor"])
    overrides = {
        **{f"data.{k}_file": v for k, v in spec["files"].items()},
        "data.max_length": spec["max_length"],
        **{f"method.{k}": v for k, v in method.items()},
        "train.output_dir": spec["output_dir"],
        "train.max_steps": spec["steps"],
        "train.batch_size": spec["batch_size"],
        "train.eval_every": spec["eval_every"],
        "train.patience": 0,
        "train.learning_rate": spec["lr"],
        "train.seed": spec["seed"],
        "train.device": spec["device"],
        "train.num_threads": spec["threads"],
        "train.tensorboard": False,
        "train.progress": False,
        "train.overwrite": True,
        "train.resume": "never",
    }
    args = build_args(REPO / spec["recipe"], overrides)
    if args.model.model_name_or_path != BASE:
        raise ValueError(f"{spec['recipe']} starts from {args.model.model_name_or_path}, not {BASE}")
    cuda = torch.cuda.is_available() and spec["device"] != "cpu"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    result = run_finetune(args)
    metric = spec["metric"]
    record = {
        "task": spec["task"],
        "method": spec["method"],
        "rank": spec.get("rank"),
        "reduction_factor": spec.get("reduction_factor"),
        "learning_rate": spec["lr"],
        "seed": spec["seed"],
        f"dev_{metric}": round(result["dev"][metric], 4),
        f"test_{metric}": round(result["test"][metric], 4),
        "best_step": result["best_step"],
        "trainable_params": result["trainable_params"],
        "total_params": result["total_params"],
        "trainable_fraction": round(result["trainable_fraction"], 5),
        "train_seconds": round(result["train_seconds"], 1),
        "run_seconds": round(time.perf_counter() - t0, 1),
        # ru_maxrss is KiB on Linux: the high-water mark of this process (one run, its data and evaluation)
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "base_model": result["base_model"]["location"],
    }
    if cuda:
        record["peak_cuda_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return record


def _spec(
    args, work: Path, task_name: str, files: dict, method: str, lr: float, seed: int, rank=None
) -> dict:
    task = TASKS[task_name]
    name = f"{task_name}-{method}{rank or ''}-lr{lr:g}-s{seed}"
    return {
        "name": name,
        "task": task_name,
        "recipe": task["recipe"],
        "metric": task["metric"],
        "files": files,
        "method": method,
        "rank": rank,
        "reduction_factor": args.reduction_factor if method in ("houlsby", "pfeiffer") else None,
        "lr": lr,
        "seed": seed,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "eval_every": args.eval_every,
        "threads": args.threads,
        "device": args.device,
        "output_dir": str(work / "runs" / name),
    }


def _spawn(spec: dict, log) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    log.write(proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"run {spec['name']} failed (exit {proc.returncode}):\n{tail}")
    record = json.loads(lines[-1][len("RESULT ") :])
    print(json.dumps(record), flush=True)
    return record


# ----------------------------------------------------------------------------------------------- the bench
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one configuration (JSON) and print it
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--seeds", type=int, default=2, help="seeds per chosen configuration (>= 2 for a spread)")
    p.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16], help="LoRA ranks (chosen on dev)")
    p.add_argument("--lr-full", type=_floats, default=[1e-4, 3e-4], help="comma-separated grid")
    p.add_argument("--lr-lora", type=_floats, default=[1e-3, 2e-3])
    p.add_argument("--lr-adapter", type=_floats, default=[1e-3, 2e-3])
    p.add_argument("--adapter", default="houlsby", choices=["houlsby", "pfeiffer"])
    p.add_argument("--reduction-factor", type=int, default=4, help="adapter bottleneck = hidden / this")
    p.add_argument("--train", type=int, default=8000, help="training examples per task (0: all)")
    p.add_argument("--dev", type=int, default=1000)
    p.add_argument("--test", type=int, default=0, help="test examples (0: the whole test split)")
    p.add_argument("--steps", type=int, default=750, help="optimizer steps per run")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--eval-every", type=int, default=150)
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (subprocesses; e.g. 2 on 2 cores)")
    p.add_argument("--device", default="auto")
    p.add_argument("--data-dir", default="~/.cache/ernie_zoo/datasets")
    p.add_argument("--out", default="bench/results/lora_vs_full_zoo.json")
    args = p.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(run_one(json.loads(args.one))), flush=True)
        return 0
    if args.seeds < 1:
        p.error("--seeds must be >= 1")

    seeds = [42 + i for i in range(args.seeds)]
    work = Path(tempfile.mkdtemp(prefix="bench_lora_vs_full_"))
    log = (work / "runs.log").open("w", encoding="utf-8")
    data_dir = Path(args.data_dir).expanduser()
    start = time.perf_counter()
    report_tasks = {}
    for task_name in args.tasks:
        task = TASKS[task_name]
        files, sizes = {}, {}
        for split, n in (("train", args.train), ("dev", args.dev), ("test", args.test)):
            src = data_dir / task["data"] / f"{split}.jsonl"
            if not src.is_file():
                raise SystemExit(f"{src} is missing: run python scripts/prepare_corpora.py first")
            files[split] = str(work / task_name / f"{split}.jsonl")
            sizes[split] = _sample(src, Path(files[split]), n or None, seed=0)

        def spec(method, lr, seed, rank=None, _files=files, _name=task_name):
            return _spec(args, work, _name, _files, method, lr, seed, rank)

        grid = {
            "full": [spec("full", lr, seeds[0]) for lr in args.lr_full],
            "lora": [spec("lora", lr, seeds[0], r) for r in args.ranks for lr in args.lr_lora],
            "adapter": [spec(args.adapter, lr, seeds[0]) for lr in args.lr_adapter],
        }
        dev_key, test_key = f"dev_{task['metric']}", f"test_{task['metric']}"
        # Phase 1: the grid with the first seed; phase 2: each method's choice with the other seeds.
        with ThreadPoolExecutor(args.jobs) as pool:
            tried = dict(
                zip(grid, [list(pool.map(lambda s: _spawn(s, log), specs)) for specs in grid.values()])
            )
        chosen = {family: max(found, key=lambda r: r[dev_key]) for family, found in tried.items()}
        again = [
            spec(best["method"], best["learning_rate"], seed, best["rank"])
            for best in chosen.values()
            for seed in seeds[1:]
        ]
        with ThreadPoolExecutor(args.jobs) as pool:
            runs = [r for found in tried.values() for r in found] + list(
                pool.map(lambda s: _spawn(s, log), again)
            )
        shutil.rmtree(work / "runs", ignore_errors=True)

        summary = {}
        for family, best in chosen.items():
            same = [
                r
                for r in runs
                if r["method"] == best["method"]
                and r["rank"] == best["rank"]
                and r["learning_rate"] == best["learning_rate"]
            ]
            tests = [r[test_key] for r in same]
            summary[family] = {
                "method": best["method"],
                "rank": best["rank"],
                "reduction_factor": best["reduction_factor"],
                "learning_rate": best["learning_rate"],
                "seeds": [r["seed"] for r in same],
                f"{test_key}_mean": round(statistics.mean(tests), 4),
                f"{test_key}_sd": round(statistics.stdev(tests), 4) if len(tests) > 1 else None,
                f"{dev_key}_mean": round(statistics.mean(r[dev_key] for r in same), 4),
                "trainable_params": best["trainable_params"],
                "trainable_fraction": best["trainable_fraction"],
                "train_seconds_mean": round(statistics.mean(r["train_seconds"] for r in same), 1),
                "peak_rss_mib_max": max(r["peak_rss_mib"] for r in same),
            }
        gap = summary["lora"][f"{test_key}_mean"] - summary["full"][f"{test_key}_mean"]
        report_tasks[task_name] = {
            "recipe": task["recipe"],
            "metric": task["metric"],
            "data": {
                "dir": str(data_dir / task["data"]),
                "sizes": sizes,
                "sample": "seeded shuffle (seed 0), first N",
            },
            "summary": summary,
            "lora_minus_full_test": round(gap, 4),
            "target": {
                "lora_within": task["target"],
                "max_trainable_fraction": MAX_TRAINABLE_FRACTION,
                "met": gap >= -task["target"]
                and summary["lora"]["trainable_fraction"] <= MAX_TRAINABLE_FRACTION,
            },
            "runs": runs,
        }
        print(
            json.dumps(
                {task_name: {k: v for k, v in report_tasks[task_name].items() if k != "runs"}}, indent=2
            )
        )
    log.close()

    import torch

    report = {
        "command": "python "
        + " ".join(shlex.quote(a) for a in ["bench/bench_lora_vs_full.py", *(argv or sys.argv[1:])]),
        "base_model": BASE,
        "setup": {
            "steps": args.steps,
            "batch_size": args.batch_size,
            "max_length": args.max_length,
            "eval_every": args.eval_every,
            "seeds": seeds,
            "lora_ranks": args.ranks,
            "lora_alpha": "2 x rank",
            "learning_rate_grids": {"full": args.lr_full, "lora": args.lr_lora, "adapter": args.lr_adapter},
            "adapter": f"{args.adapter}, bottleneck hidden/{args.reduction_factor}",
            "selection": "each method's learning rate (and LoRA's rank) by the dev metric of its best checkpoint "
            f"with seed {seeds[0]}; the chosen configuration then runs with every other seed",
            "memory": "peak RSS of the run's own process (CPU); peak allocated CUDA memory on a GPU",
        },
        "tasks": report_tasks,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "environment": {
            "torch": torch.__version__,
            "threads": args.threads,
            "cpus": os.cpu_count(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
        "notes": "Times are wall-clock on a possibly shared machine; compare methods within one report.",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out} ({report['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
