"""Seeded mixture of the per-source corpora (`build_corpora` output) under per-source character budgets.

Pretraining on 2 CPU cores sees ~10M tokens an hour, far less than the 36M-character corpus, and the corpus is
half classical poetry. A mixture samples each source up to its budget so news, reviews, technical text,
dictionary glosses and poetry all appear, then shuffles the lines together.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from ernie_zoo.utils import atomic_write_text


def mix_corpus(corpora_dir: str | Path, budgets: dict[str, int], out: str | Path, seed: int = 0) -> dict:
    """Sample whole lines of `<corpora_dir>/<source>.txt` until each source's character budget is reached.

    Lines are drawn in a seeded random order per source (a budget above the source size takes all of it);
    the union is shuffled with the same seed and written atomically to `out`. Returns the mixture manifest
    (also written next to `out` as `<out>.manifest.json`).
    """
    corpora_dir, out = Path(corpora_dir), Path(out)
    if not budgets:
        raise ValueError("budgets is empty: give at least one source and its character budget")
    rng = random.Random(seed)
    picked: list[str] = []
    stats: dict[str, dict[str, int]] = {}
    for source, budget in budgets.items():
        path = corpora_dir / f"{source}.txt"
        if not path.exists():
            raise FileNotFoundError(
                f"{path}: unknown source {source!r} (run scripts/prepare_corpora.py first)"
            )
        if budget <= 0:
            raise ValueError(f"budget for {source!r} must be positive, got {budget}")
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        rng.shuffle(lines)
        taken, chars = 0, 0
        for line in lines:
            if chars >= budget:
                break
            picked.append(line)
            chars += len(line)
            taken += 1
        stats[source] = {"lines": taken, "chars": chars, "available_lines": len(lines)}
    rng.shuffle(picked)
    text = "\n".join(picked) + "\n"
    atomic_write_text(out, text)
    manifest = {
        "seed": seed,
        "budgets": budgets,
        "sources": stats,
        "lines": len(picked),
        "chars": sum(s["chars"] for s in stats.values()),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }
    atomic_write_text(Path(f"{out}.manifest.json"), json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")
    return manifest
