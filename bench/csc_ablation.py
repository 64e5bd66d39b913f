#!/usr/bin/env python
"""Do the character features help spelling correction? The same correction fine-tuning from the shipped encoder
with its features removed, at equal budget, two seeds each (issue #22's ablation).

Variants, all from ernie-zoo-mini-zh's weights:

* ``full``    — pinyin + radical + stroke-count features, as shipped;
* ``pinyin``  — pinyin only (the radical and stroke embeddings dropped from the architecture);
* ``none``    — no character features (plain ERNIE embeddings; the tokenizer's pinyin_ids are ignored).

A variant's base is written once (`<work>/base-<variant>`: the config with the features switched off and the
shipped weights minus the dropped modules), then ``ernie-finetune recipes/zoo/csc.yaml`` runs on it with the same
overrides for every variant: the first ``--train-samples`` examples of the denser-error training split, ``--steps``
steps at learning rate ``--lr``, one torch thread, dev scored once at the end on the first ``--dev-samples`` dev
sentences (sentence F1 at the best decoding margin and at margin 0, char-level F1). Results go to
``bench/results/csc_ablation.json``, whatever they show. These are fine-tuning ablations from one pretrained
encoder (the features were there during its pretraining), not pretraining ablations: they show what the features
add to spelling correction on top of that encoder at this budget.

    python bench/csc_ablation.py --steps 800 --seeds 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "ernie_zoo/zoo/ernie-zoo-mini-zh"
VARIANTS = {
    "full": {},
    "pinyin": {"use_radical": False, "use_strokes": False},
    "none": {"use_pinyin": False, "use_radical": False, "use_strokes": False},
}


def write_base(variant: str, out: Path) -> Path:
    from ernie_zoo.models import ErnieZooConfig, ErnieZooForMaskedLM
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    if (out / "model.safetensors").is_file():
        return out
    config = ErnieZooConfig.from_pretrained(BASE)
    for key, value in VARIANTS[variant].items():
        setattr(config, key, value)
    tokenizer = ErnieZooTokenizerFast.from_pretrained(BASE)
    shipped = ErnieZooForMaskedLM.from_pretrained(BASE)
    model = ErnieZooForMaskedLM(config)
    missing, _ = model.load_state_dict(shipped.state_dict(), strict=False)
    if missing:
        raise SystemExit(f"{variant}: weights missing from the shipped model: {missing}")
    model.load_char_tables(tokenizer)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--train-samples", type=int, default=30000)
    p.add_argument("--dev-samples", type=int, default=1000)
    p.add_argument("--work", type=Path, default=REPO / "runs/csc_ablation")
    p.add_argument("--out", type=Path, default=REPO / "bench/results/csc_ablation.json")
    args = p.parse_args()
    runs = []
    for variant in args.variants:
        base = write_base(variant, args.work / f"base-{variant}")
        for seed in args.seeds:
            out_dir = args.work / f"{variant}-seed{seed}"
            cmd = [
                sys.executable, "-m", "ernie_zoo.finetune.cli", str(REPO / "recipes/zoo/csc.yaml"),
                "--model.model_name_or_path", str(base),
                "--model.config_overrides", "{detection_loss_weight: 0.3, correction_copy_rate: 0.25}",
                "--data.max_train_samples", str(args.train_samples),
                "--data.max_eval_samples", str(args.dev_samples),
                "--train.output_dir", str(out_dir),
                "--train.max_steps", str(args.steps),
                "--train.eval_every", str(args.steps),
                "--train.learning_rate", str(args.lr),
                "--train.seed", str(seed),
                "--train.num_threads", "1",
                "--train.progress", "false",
                "--train.tensorboard", "false",
            ]  # fmt: skip
            t0 = time.perf_counter()
            if not (out_dir / "eval_results.json").is_file():
                subprocess.run(cmd, check=True, cwd=REPO)
            dev = json.loads((out_dir / "eval_results.json").read_text(encoding="utf-8"))["dev"]
            runs.append(
                {
                    "variant": variant,
                    "seed": seed,
                    "best_sentence_f1": dev["best_sentence_f1"],
                    "best_min_prob": dev["best_min_prob"],
                    "sentence_f1_at_0": dev["sweep_sentence_f1"]["0.0"],
                    "char_correction_f1": dev["char_correction_f1"],
                    "char_detection_f1": dev["char_detection_f1"],
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
            print(json.dumps(runs[-1]), flush=True)
    summary = {}
    for variant in args.variants:
        vals = [r["best_sentence_f1"] for r in runs if r["variant"] == variant]
        summary[variant] = {
            "best_sentence_f1_mean": statistics.mean(vals),
            "best_sentence_f1_sd": statistics.stdev(vals) if len(vals) > 1 else None,
            "char_correction_f1_mean": statistics.mean(
                r["char_correction_f1"] for r in runs if r["variant"] == variant
            ),
        }
    result = {
        "command": " ".join(["python bench/csc_ablation.py", *sys.argv[1:]]),
        "budget": {
            "steps": args.steps,
            "batch_size": 32,
            "learning_rate": args.lr,
            "train_samples": args.train_samples,
            "dev_samples": args.dev_samples,
            "torch_threads": 1,
        },
        "runs": runs,
        "summary": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
