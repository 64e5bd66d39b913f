"""Do the character features help NER and sentiment? Full fine-tuning from the shipped encoder with its pinyin /
radical / stroke features removed, at the LoRA-vs-full bench's budgets, two seeds each (issue #22, item 5).

Variants (the same as bench/csc_ablation.py, all from ernie-zoo-mini-zh's weights):

* ``full``   - pinyin + radical + stroke-count features, as shipped (the encoder by name);
* ``pinyin`` - pinyin only (the radical and stroke embeddings dropped from the architecture);
* ``none``   - no character features (plain ERNIE embeddings).

Every run is one of bench/bench_lora_vs_full.py's runs (same recipe, data sample, budget, batches, seeds and
record cache), with full fine-tuning at the learning rate that bench chose on dev, and only the base model
changed. The ``full`` variant's runs are the LoRA-vs-full bench's own full fine-tuning runs, reused from its
record cache when they are there. Reported per task and variant: the dev and test metric (accuracy; entity F1),
mean and sd over seeds. These are fine-tuning ablations from one encoder pretrained with every feature, not
pretraining ablations: they show what the features add on top of that encoder at this budget.

    python bench/char_feature_ablation.py --jobs 2       # 12 runs (4 of them reusable): about 1.5 h on 2 cores
    python bench/char_feature_ablation.py --table        # docs/zoo.md's table of the results file
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_lora_vs_full as lvf  # noqa: E402
from csc_ablation import VARIANTS, write_base  # noqa: E402

DEFAULT_LR = {"sentiment": 3e-4, "ner": 3e-4}  # what bench_lora_vs_full chose on dev for full fine-tuning


def chosen_rates(results: Path) -> dict[str, float]:
    """Full fine-tuning's learning rate per task as the LoRA-vs-full bench chose it on dev (its results file)."""
    rates = dict(DEFAULT_LR)
    if results.is_file():
        report = json.loads(results.read_text(encoding="utf-8"))
        for task, entry in report["tasks"].items():
            rates[task] = entry["summary"]["full"]["learning_rate"]
    return rates


def render_table(report: dict) -> str:
    """The markdown table docs/zoo.md shows: one row per task and variant, then each variant minus the shipped one."""
    rows = [
        "| task (test metric) | char features | test mean ± sd | dev mean ± sd | vs shipped (test) |",
        "|---|---|---:|---:|---:|",
    ]
    names = {"full": "pinyin + radical + strokes", "pinyin": "pinyin only", "none": "none"}
    for task, entry in report["tasks"].items():
        metric = entry["metric"]
        shipped = entry["summary"]["full"][f"test_{metric}_mean"]
        for variant, s in entry["summary"].items():
            delta = "" if variant == "full" else f"{100 * (s[f'test_{metric}_mean'] - shipped):+.1f}"
            rows.append(
                f"| {task} ({metric}) | {names[variant]} | {s[f'test_{metric}_mean']:.3f} ± "
                f"{s[f'test_{metric}_sd']:.3f} | {s[f'dev_{metric}_mean']:.3f} ± {s[f'dev_{metric}_sd']:.3f} "
                f"| {delta} |"
            )
    setup = report["setup"]
    head = (
        f"Full fine-tuning from {report['base_model']} with features removed; seeds "
        f"{', '.join(map(str, setup['seeds']))}; "
        + "; ".join(
            f"{t}: {b['steps']} steps on {b['train']:,} examples, lr {setup['learning_rates'][t]:g}"
            for t, b in setup["budgets"].items()
        )
        + "."
    )
    return "\n".join([head, "", *rows]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(lvf.TASKS), choices=list(lvf.TASKS))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", type=int, default=2, help="seeds per variant, from 42 (the LoRA bench's)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (subprocesses; e.g. 2 on 2 cores)")
    p.add_argument(
        "--lora-results",
        type=Path,
        default=Path("bench/results/lora_vs_full_zoo.json"),
        help="the LoRA-vs-full results: full fine-tuning's learning rate per task is read from it",
    )
    p.add_argument(
        "--work-dir",
        default="runs/bench_lora_vs_full",
        help="the LoRA-vs-full bench's work dir: data samples and run records are shared with it",
    )
    p.add_argument("--out", default="bench/results/char_feature_ablation.json")
    p.add_argument("--table", action="store_true", help="print the markdown table of --out and exit")
    # The budget and batch settings of bench_lora_vs_full (its defaults, so its records are reused).
    for flag, kind, default in (
        ("--train", int, None),
        ("--dev", int, 1000),
        ("--test", int, 0),
        ("--steps", int, None),
        ("--eval-every", int, None),
        ("--batch-size", int, 32),
        ("--max-length", int, 128),
        ("--threads", int, 1),
    ):
        p.add_argument(
            flag, type=kind, default=default, help=f"as in bench_lora_vs_full.py (default {default})"
        )
    p.add_argument("--device", default="auto")
    p.add_argument("--data-dir", default="~/.cache/ernie_zoo/datasets")
    args = p.parse_args(argv)
    args.group_by_length = True
    args.reduction_factor = None
    if args.table:
        print(render_table(json.loads(Path(args.out).read_text(encoding="utf-8"))), end="")
        return 0
    if args.seeds < 2:
        p.error("--seeds must be >= 2: an ablation needs a spread")
    seeds = [42 + i for i in range(args.seeds)]
    rates = chosen_rates(args.lora_results)
    work = Path(args.work_dir).expanduser().resolve()
    records = work / "records"
    records.mkdir(parents=True, exist_ok=True)
    data_dir = Path(args.data_dir).expanduser()
    bases = {v: None if v == "full" else str(write_base(v, work / f"base-{v}")) for v in args.variants}
    start = time.perf_counter()

    specs = []
    for task_name in args.tasks:
        files, _ = lvf.sample_task_data(args, work, task_name, data_dir)
        for variant in args.variants:
            for seed in seeds:
                spec = lvf._spec(args, work, task_name, files, "full", rates[task_name], seed)
                if bases[variant] is not None:  # the shipped variant keeps the LoRA bench's spec (and record)
                    spec["base"] = bases[variant]
                    spec["name"] += f"-features-{variant}"
                    spec["output_dir"] += f"-features-{variant}"
                spec["variant"] = variant
                specs.append(spec)

    with (work / "runs.log").open("a", encoding="utf-8") as log, ThreadPoolExecutor(args.jobs) as pool:

        def spawn(spec: dict) -> dict:
            variant = spec.pop("variant")
            return {**lvf._spawn(spec, log, records), "variant": variant}

        runs = list(pool.map(spawn, specs))

    report_tasks = {}
    for task_name in args.tasks:
        metric = lvf.TASKS[task_name]["metric"]
        summary = {}
        for variant in args.variants:
            same = [r for r in runs if r["task"] == task_name and r["variant"] == variant]
            summary[variant] = {"seeds": [r["seed"] for r in same]}
            for split in ("dev", "test"):
                values = [r[f"{split}_{metric}"] for r in same]
                summary[variant][f"{split}_{metric}_mean"] = round(statistics.mean(values), 4)
                summary[variant][f"{split}_{metric}_sd"] = round(statistics.stdev(values), 4)
        report_tasks[task_name] = {
            "recipe": lvf.TASKS[task_name]["recipe"],
            "metric": metric,
            "summary": summary,
            "runs": [r for r in runs if r["task"] == task_name],
        }
    report = {
        "command": "python "
        + " ".join(shlex.quote(a) for a in ["bench/char_feature_ablation.py", *(argv or sys.argv[1:])]),
        "base_model": lvf.BASE,
        "setup": {
            "method": "full fine-tuning",
            "variants": {v: VARIANTS[v] for v in args.variants},
            "learning_rates": {t: rates[t] for t in args.tasks},
            "budgets": {
                t: {k: lvf._budget(args, t, k) for k in ("train", "steps", "eval_every")} for t in args.tasks
            },
            "batch_size": args.batch_size,
            "max_length": args.max_length,
            "seeds": seeds,
            "selection": "each run's best checkpoint on dev (as in bench_lora_vs_full); test scored there",
        },
        "tasks": report_tasks,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "notes": "Fine-tuning ablations from one encoder pretrained with every feature, not pretraining ablations.",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    print(render_table(report), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
