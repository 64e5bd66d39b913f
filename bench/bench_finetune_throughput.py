"""Fine-tuning throughput on data of mixed lengths: `ernie-finetune` (random batches, and `train.group_by_length`)
against transformers' `Trainer` (random batches, and `train_sampling_strategy="group_by_length"`).

Same task for all four: NER with BIOES tags on the first sentences of MSRA train (their real length mix: 3-128
tokens, mean about 46), the same model (ernie-zoo-mini-zh, the shipped 4-layer encoder, with a fresh
token-classification head, fp32), batch 32, AdamW, the same number of optimizer steps, the same torch threads.
Speed is optimizer steps per second over the steps after the first few (start-up, evaluation and saving excluded),
read from each loop's own per-step clock: ernie-finetune's TensorBoard train/loss events and a Trainer callback.
The four variants run interleaved over several rounds (median reported), so drifting background load hits them
alike. Reported: examples/s, the ratio against `Trainer` with its default (random) sampling measured in the same
run, and padding efficiency (real tokens / padded slots).

    python bench/bench_finetune_throughput.py                   # about 10 min on 2 CPU cores
    python bench/bench_finetune_throughput.py --rounds 1 --steps 20 --threads 2
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

NER_TRAIN = Path.home() / ".cache/ernie_zoo/datasets/ner/train.jsonl"
MODEL = Path(__file__).resolve().parents[1] / "ernie_zoo/zoo/ernie-zoo-mini-zh"


def _steps_per_s(times: list[float], skip: int) -> float:
    return (len(times) - 1 - skip) / (times[-1] - times[skip])


def finetune_args(data_dir: Path, out: Path, group: bool, args):
    """The ernie-finetune arguments of one run (the Trainer runs read their task and features from them too)."""
    from ernie_zoo.finetune import build_args

    return build_args(
        {
            "task": "token_classification",
            "data": {
                "train_file": str(data_dir / "train.jsonl"),
                "dev_file": str(data_dir / "dev.jsonl"),
                "entity_types": ["LOC", "ORG", "PER"],
                "tag_scheme": "bioes",
                "max_length": 128,
            },
            "model": {"model_name_or_path": str(MODEL)},
            "method": {"method": "full"},
            "train": {
                "output_dir": str(out),
                "max_steps": args.steps,
                "eval_every": args.steps,
                "batch_size": args.batch_size,
                "learning_rate": 1e-4,
                "group_by_length": group,
                "progress": False,
                "num_threads": args.threads,
                "seed": args.seed,
            },
        }
    )


def run_ours(data_dir: Path, args, group: bool, workdir: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ernie_zoo.finetune import run_finetune

    out = workdir / f"ours-{group}"
    run_finetune(finetune_args(data_dir, out, group, args))
    events = EventAccumulator(str(next((out / "runs").iterdir())))
    events.Reload()
    times = [e.wall_time for e in events.Scalars("train/loss")]
    return {"steps_per_s": _steps_per_s(times, args.skip)}


def run_trainer(task, features: list[dict], tokenizer, args, group: bool, workdir: Path) -> dict:
    """transformers Trainer on the features ernie-finetune trains on (its own NER encoding, same head)."""
    import torch
    from transformers import DataCollatorForTokenClassification, Trainer, TrainerCallback, TrainingArguments

    from ernie_zoo.models import ErnieZooConfig

    config = ErnieZooConfig.from_pretrained(MODEL)
    for key, value in task.config_updates().items():  # as ernie-finetune's build_model applies them
        setattr(config, key, value)
    model = task.model_class().from_pretrained(MODEL, config=config, dtype=torch.float32)
    clock: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            clock.append(time.perf_counter())

    targs = TrainingArguments(
        output_dir=str(workdir / f"trainer-{group}"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=1e-4,
        train_sampling_strategy="group_by_length" if group else "random",
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        logging_steps=10_000,
        disable_tqdm=True,
        use_cpu=True,
        seed=args.seed,
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=features,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        callbacks=[Clock()],
    )
    trainer.train()
    return {"steps_per_s": _steps_per_s(clock, args.skip)}


def padding_efficiency(lengths: list[int], batch_size: int, group: bool, seed: int) -> float:
    from types import SimpleNamespace

    from ernie_zoo.training.supervised import SupervisedTraining

    fake = SimpleNamespace(
        features={"train": [{"input_ids": [0] * n} for n in lengths]},
        t=SimpleNamespace(batch_size=batch_size, seed=seed, group_by_length=group),
    )
    batches = SupervisedTraining._epoch_batches(fake, 0)
    return sum(lengths) / sum(max(lengths[i] for i in b) * len(b) for b in batches)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=3200, help="MSRA train sentences (the first N)")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per run")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    p.add_argument("--skip", type=int, default=5, help="first steps left out of the rate (warm-up)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default="bench/results/finetune_throughput.json")
    args = p.parse_args(argv)
    if not NER_TRAIN.is_file():
        raise SystemExit(f"{NER_TRAIN} is missing: run scripts/prepare_corpora.py first")
    if args.steps <= args.skip + 1:
        raise SystemExit(f"--steps must exceed --skip + 1 ({args.skip + 1})")

    import torch
    from transformers import AutoTokenizer

    import ernie_zoo.auto  # noqa: F401
    from ernie_zoo.finetune.objectives import make_objective

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in NER_TRAIN.read_text(encoding="utf-8").splitlines()[: args.sentences]]
    variants = ("transformers Trainer", "ernie-finetune")
    # Rounds interleave the four variants, so a change in the machine's background load hits them alike; each
    # variant's rate is its median over the rounds.
    rates: dict[str, list[float]] = {
        f"{name} ({order})": [] for name in variants for order in ("random", "group_by_length")
    }
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        for name, part in (("train", rows), ("dev", rows[:32])):
            (data_dir / f"{name}.jsonl").write_text(
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8"
            )
        # The training features, encoded once by ernie-finetune's NER task: the Trainer runs train on them.
        task = make_objective(finetune_args(data_dir, data_dir / "unused", False, args))
        task.read()
        tokenizer = AutoTokenizer.from_pretrained(MODEL)
        features = [
            {k: v for k, v in f.items() if not k.startswith("_")}
            for f in task.encode(task.splits["train"], tokenizer)
        ]
        lengths = [len(f["input_ids"]) for f in features]
        for round_ in range(args.rounds):
            for name in rates:
                group = name.endswith("(group_by_length)")
                with tempfile.TemporaryDirectory() as work:
                    print(f"== round {round_ + 1}: {name}", flush=True)
                    if name.startswith("ernie-finetune"):
                        run = run_ours(data_dir, args, group, Path(work))
                    else:
                        run = run_trainer(task, features, tokenizer, args, group, Path(work))
                    rates[name].append(run["steps_per_s"])
    runs = {}
    for name, values in rates.items():
        steps_per_s = statistics.median(values)
        runs[name] = {
            "steps_per_s": steps_per_s,
            "steps_per_s_rounds": values,
            "examples_per_s": steps_per_s * args.batch_size,
        }
    base = runs["transformers Trainer (random)"]["steps_per_s"]
    for r in runs.values():
        r["speed_vs_trainer_random"] = r["steps_per_s"] / base
    result = {
        "what": "fine-tuning examples/s on MSRA NER sentences (mixed lengths), ernie-finetune vs transformers "
        "Trainer, each with random and length-grouped batches",
        "command": "python bench/bench_finetune_throughput.py " + " ".join(argv or []),
        "setup": {
            "model": "ernie-zoo-mini-zh (4 layers, hidden 256) + token-classification head, fp32, full fine-tuning",
            "sentences": len(rows),
            "mean_tokens": sum(lengths) / len(lengths),
            "batch_size": args.batch_size,
            "steps": args.steps,
            "rate_over_steps": f"{args.skip + 1}-{args.steps}",
            "rounds": args.rounds,
            "threads": args.threads,
            "machine": f"{platform.machine()} CPU, torch {torch.__version__}",
        },
        "padding_efficiency": {
            "random": padding_efficiency(lengths, args.batch_size, False, args.seed),
            "group_by_length": padding_efficiency(lengths, args.batch_size, True, args.seed),
        },
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{'run':42s} {'examples/s':>10s} {'vs Trainer (random)':>20s}")
    for name, r in runs.items():
        print(f"{name:42s} {r['examples_per_s']:10.1f} {r['speed_vs_trainer_random']:19.2f}x")
    print(f"padding efficiency: {result['padding_efficiency']}  -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
