"""`ernie-zoo baselines`: LAC / jieba NER, SnowNLP / TF-IDF+LR sentiment, n-gram poetry LM on our splits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ernie_zoo.data.labelled import DEFAULT_DATASETS


@dataclass
class Args:
    """Run the reference baselines on the prepared labelled splits."""

    datasets: Path = DEFAULT_DATASETS
    """Prepared labelled sets."""
    out: Path = Path("bench/results/baselines.json")
    """The results JSON to write."""
    tasks: list[str] = field(default_factory=lambda: ["ner", "sentiment", "poetry"])
    """Tasks to run (--tasks ner sentiment)."""
    no_progress: bool = False
    """No progress bars."""


def run(args: Args, argv: list[str]) -> int:
    from ernie_zoo.evaluation.baselines import main

    argv = ["--datasets", str(args.datasets), "--out", str(args.out), "--tasks", *args.tasks]
    return main(argv + (["--no-progress"] if args.no_progress else []))
