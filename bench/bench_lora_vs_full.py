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
The default grids are small because the CPU budget is (about 3 hours on 2 cores): full fine-tuning tries two rates,
LoRA three ranks at the recipes' rate (2e-3), the adapter the notebook's rate (2e-3); 400 steps of 32 examples
(1.6 passes over 8,000 training examples), batches grouped by length (the same batches for every method).
Reported per run: dev and test metric, trainable parameters, training seconds, peak memory (the run's process:
peak RSS on CPU, peak allocated CUDA memory on a GPU; each run is its own subprocess). Summary per task and
method: mean and standard deviation of the test metric over seeds, and LoRA minus full against the targets
(within 1.0 accuracy point on sentiment, 1.5 F1 on NER, training at most 10% of the parameters).

Resumable: each finished run's record is kept in --work-dir (keyed by its settings and the data sample's
sha256), so an interrupted bench, run again with the same arguments, redoes only the runs it had not finished.

Data: the seeded splits `python scripts/prepare_corpora.py` writes to ~/.cache/ernie_zoo/datasets; the first
--train / --dev / --test examples of a seeded shuffle of each split (the same sample for every run).

    python bench/bench_lora_vs_full.py --jobs 2              # the full comparison: hours on 2 CPU cores
    python bench/bench_lora_vs_full.py --tasks sentiment --seeds 1 --ranks 8 --steps 10 --train 200 \
        --dev 50 --test 50 --lr-full 1e-4 --lr-lora 2e-3 --lr-adapter 2e-3 --out /tmp/lora_vs_full_tiny.json
"""

from __future__ import annotations

import argparse
import hashlib
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
        # the budget: 1.6 passes over 8,000 reviews; dev accuracy is still rising slowly at the end
        "budget": {"train": 8000, "steps": 400, "eval_every": 100},
    },
    "ner": {
        "recipe": "recipes/finetune/msra_ner_crf.yaml",
        "data": "ner",
        "metric": "f1",
        "target": 0.015,  # within 1.5 entity F1
        # a CRF tagger needs more steps than a sentence classifier: at 400 steps on 8,000 sentences full
        # fine-tuning reached only 0.35 test F1, so NER gets 2.4 passes over 16,000 sentences
        "budget": {"train": 16000, "steps": 1200, "eval_every": 200},
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
    if spec.get("modules_to_save"):  # --lora-modules-to-save: what else LoRA runs train fully
        method.update(modules_to_save=spec["modules_to_save"])
    if spec["method"] in ("houlsby", "pfeiffer"):
        method.update(reduction_factor=spec["reduction_factor"])
    overrides = {
        **{f"data.{k}_file": v for k, v in spec["files"].items()},
        "data.max_length": spec["max_length"],
        **{f"method.{k}": v for k, v in method.items()},
        "train.output_dir": spec["output_dir"],
        "train.max_steps": spec["steps"],
        "train.batch_size": spec["batch_size"],
        "train.group_by_length": spec["group_by_length"],
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
    if spec.get(
        "base"
    ):  # another base directory (bench/char_feature_ablation.py: the encoder minus features)
        overrides["model.model_name_or_path"] = spec["base"]
    args = build_args(REPO / spec["recipe"], overrides)
    if args.model.model_name_or_path != spec.get("base", BASE):
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


def _budget(args, task_name: str, key: str) -> int:
    """--steps / --train / --eval-every when given, else the task's own budget."""
    value = getattr(args, key)
    return TASKS[task_name]["budget"][key] if value is None else value


def _spec(
    args, work: Path, task_name: str, files: dict, method: str, lr: float, seed: int, rank=None
) -> dict:
    task = TASKS[task_name]
    name = f"{task_name}-{method}{rank or ''}-lr{lr:g}-s{seed}"
    extra = {}
    if method == "lora" and args.lora_modules_to_save:
        extra["modules_to_save"] = args.lora_modules_to_save
        name += "-train-" + "-".join(args.lora_modules_to_save)
    return {
        **extra,
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
        "steps": _budget(args, task_name, "steps"),
        "batch_size": args.batch_size,
        "group_by_length": args.group_by_length,
        "max_length": args.max_length,
        "eval_every": _budget(args, task_name, "eval_every"),
        "threads": args.threads,
        "device": args.device,
        "output_dir": str(work / "runs" / name),
    }


def _spec_key(spec: dict) -> str:
    """A run's identity for the record cache: every setting that changes its result (not where it runs)."""
    same = {k: v for k, v in spec.items() if k not in ("output_dir", "files")}
    same["data"] = {split: _sha256(Path(path)) for split, path in spec["files"].items()}
    return hashlib.sha256(json.dumps(same, sort_keys=True).encode()).hexdigest()[:16]


def sample_task_data(args, work: Path, task_name: str, data_dir: Path) -> tuple[dict, dict]:
    """The task's train / dev / test samples under `work`/data (the same for every run): (files, sizes)."""
    files, sizes = {}, {}
    for split, n in (("train", _budget(args, task_name, "train")), ("dev", args.dev), ("test", args.test)):
        src = data_dir / TASKS[task_name]["data"] / f"{split}.jsonl"
        if not src.is_file():
            raise SystemExit(f"{src} is missing: run python scripts/prepare_corpora.py first")
        files[split] = str(work / "data" / task_name / f"{split}.jsonl")
        sizes[split] = _sample(src, Path(files[split]), n or None, seed=0)
    return files, sizes


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _spawn(spec: dict, log, records: Path) -> dict:
    """Run one configuration in a subprocess, or return its record from an earlier, interrupted bench."""
    cached = records / f"{spec['name']}.json"
    key = _spec_key(spec)
    if cached.is_file():
        saved = json.loads(cached.read_text(encoding="utf-8"))
        if saved.get("spec_key") == key:
            print(f"cached {spec['name']}", flush=True)
            return saved["record"]
    proc = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    log.write(proc.stderr)
    log.flush()
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"run {spec['name']} failed (exit {proc.returncode}):\n{tail}")
    record = json.loads(lines[-1][len("RESULT ") :])
    shutil.rmtree(spec["output_dir"], ignore_errors=True)
    tmp = cached.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"spec_key": key, "record": record}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, cached)  # a run counts as done only once its whole record is on disk
    print(json.dumps(record), flush=True)
    return record


def render_table(report: dict) -> str:
    """The markdown table of a results file (docs/finetuning.md shows it): one row per task and method, then LoRA minus full."""
    names = {"full": "full fine-tuning", "lora": "LoRA", "adapter": "bottleneck adapter"}
    rows = [
        "| task (test metric) | method | trainable params | test mean ± sd | dev mean | train s | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for task_name, task in report["tasks"].items():
        metric = task["metric"]
        for family, s in task["summary"].items():
            setting = f"lr {s['learning_rate']:g}"
            if s["rank"]:
                setting = f"r {s['rank']}, " + setting
            if s["reduction_factor"]:
                setting = f"{s['method']} hidden/{s['reduction_factor']}, " + setting
            sd = s[f"test_{metric}_sd"]
            spread = f" ± {sd:.3f}" if sd is not None else ""
            rows.append(
                f"| {task_name} ({metric}) | {names.get(family, family)} ({setting}) "
                f"| {s['trainable_params']:,} ({100 * s['trainable_fraction']:.1f}%) "
                f"| {s[f'test_{metric}_mean']:.3f}{spread} (n={len(s['seeds'])}) "
                f"| {s[f'dev_{metric}_mean']:.3f} | {s['train_seconds_mean']:.0f} | {s['peak_rss_mib_max']:.0f} |"
            )
        target = task["target"]
        verdicts.append(
            f"{task_name}: LoRA - full = {100 * task['lora_minus_full_test']:+.1f} points "
            f"(target: within {100 * target['lora_within']:.1f}, at most "
            f"{100 * target['max_trainable_fraction']:.0f}% trained): {'met' if target['met'] else 'missed'}"
        )
    setup = report["setup"]
    budgets = "; ".join(
        f"{t}: {b['steps']} steps on {b['train']:,} training examples" for t, b in setup["budgets"].items()
    )
    head = (
        f"Base {report['base_model']}; batches of {setup['batch_size']}, {setup['max_length']} tokens, seeds "
        f"{', '.join(map(str, setup['seeds']))}; {budgets}."
    )
    return "\n".join([head, "", *rows, "", *(f"- {v}" for v in verdicts)]) + "\n"


# ----------------------------------------------------------------------------------------------- the bench
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one configuration (JSON) and print it
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--seeds", type=int, default=2, help="seeds per chosen configuration (>= 2 for a spread)")
    p.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16], help="LoRA ranks (chosen on dev)")
    p.add_argument("--lr-full", type=_floats, default=[1e-4, 3e-4], help="comma-separated grid")
    p.add_argument("--lr-lora", type=_floats, default=[2e-3])
    p.add_argument("--lr-adapter", type=_floats, default=[2e-3])
    p.add_argument(
        "--lora-modules-to-save",
        nargs="+",
        help="modules LoRA runs train fully (method.modules_to_save; the task head must be listed too), e.g. "
        "classifier embeddings: does retraining the embeddings close LoRA's gap to full fine-tuning?",
    )
    p.add_argument("--adapter", default="houlsby", choices=["houlsby", "pfeiffer"])
    p.add_argument("--reduction-factor", type=int, default=4, help="adapter bottleneck = hidden / this")
    p.add_argument(
        "--train", type=int, help="training examples per task (0: all); default: the task's budget (TASKS)"
    )
    p.add_argument("--dev", type=int, default=1000)
    p.add_argument("--test", type=int, default=0, help="test examples (0: the whole test split)")
    p.add_argument("--steps", type=int, help="optimizer steps per run; default: the task's budget")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument(
        "--group-by-length",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="batch examples of similar length (train.group_by_length): less padding, same for every method",
    )
    p.add_argument("--eval-every", type=int, help="default: the task's budget")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (subprocesses; e.g. 2 on 2 cores)")
    p.add_argument("--device", default="auto")
    p.add_argument("--data-dir", default="~/.cache/ernie_zoo/datasets")
    p.add_argument(
        "--work-dir",
        default="runs/bench_lora_vs_full",
        help="data samples, run directories and each finished run's record; a rerun with the same settings "
        "reuses the records, so an interrupted bench continues where it stopped",
    )
    p.add_argument("--out", default="bench/results/lora_vs_full_zoo.json")
    p.add_argument(
        "--table", action="store_true", help="print --out's markdown table (docs/finetuning.md) and exit"
    )
    args = p.parse_args(argv)
    if args.table:
        print(render_table(json.loads(Path(args.out).read_text(encoding="utf-8"))), end="")
        return 0
    if args.one:
        print("RESULT " + json.dumps(run_one(json.loads(args.one))), flush=True)
        return 0
    if args.seeds < 1:
        p.error("--seeds must be >= 1")

    seeds = [42 + i for i in range(args.seeds)]
    work = Path(args.work_dir).expanduser().resolve()
    records = work / "records"
    records.mkdir(parents=True, exist_ok=True)
    log = (work / "runs.log").open("a", encoding="utf-8")
    data_dir = Path(args.data_dir).expanduser()
    start = time.perf_counter()
    prepared = {}
    for task_name in args.tasks:
        files, sizes = sample_task_data(args, work, task_name, data_dir)

        def spec(method, lr, seed, rank=None, _files=files, _name=task_name):
            return _spec(args, work, _name, _files, method, lr, seed, rank)

        grid = {
            "full": [spec("full", lr, seeds[0]) for lr in args.lr_full],
            "lora": [spec("lora", lr, seeds[0], r) for r in args.ranks for lr in args.lr_lora],
            "adapter": [spec(args.adapter, lr, seeds[0]) for lr in args.lr_adapter],
        }
        prepared[task_name] = {"files": files, "sizes": sizes, "grid": grid, "spec": spec}

    def run_all(specs: list[dict]) -> list[dict]:
        # One pool for every task, so no core idles while another task's phase ends.
        with ThreadPoolExecutor(args.jobs) as pool:
            return list(pool.map(lambda s: _spawn(s, log, records), specs))

    # Phase 1: every grid with the first seed; phase 2: each method's choice with the other seeds.
    phase1 = [s for task in prepared.values() for specs in task["grid"].values() for s in specs]
    found = dict(zip((s["name"] for s in phase1), run_all(phase1)))
    again = []
    for task_name, task in prepared.items():
        dev_key = f"dev_{TASKS[task_name]['metric']}"
        tried = {fam: [found[s["name"]] for s in specs] for fam, specs in task["grid"].items()}
        task["tried"] = tried
        task["chosen"] = {fam: max(runs, key=lambda r: r[dev_key]) for fam, runs in tried.items()}
        task["again"] = [
            task["spec"](best["method"], best["learning_rate"], seed, best["rank"])
            for best in task["chosen"].values()
            for seed in seeds[1:]
        ]
        again += task["again"]
    found.update(zip((s["name"] for s in again), run_all(again)))

    report_tasks = {}
    for task_name, prep in prepared.items():
        task = TASKS[task_name]
        dev_key, test_key = f"dev_{task['metric']}", f"test_{task['metric']}"
        runs = [r for tried in prep["tried"].values() for r in tried] + [
            found[s["name"]] for s in prep["again"]
        ]
        summary = {}
        for family, best in prep["chosen"].items():
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
                "sizes": prep["sizes"],
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
            "budgets": {
                t: {k: _budget(args, t, k) for k in ("train", "steps", "eval_every")} for t in prepared
            },
            "batch_size": args.batch_size,
            "group_by_length": args.group_by_length,
            "max_length": args.max_length,
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
        "wall_seconds": round(time.perf_counter() - start, 1),  # this invocation (records may be reused)
        "run_seconds_total": round(sum(r["run_seconds"] for r in found.values()), 1),
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
    print(f"wrote {out} ({report['wall_seconds']:.0f} s; run records kept in {records})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
