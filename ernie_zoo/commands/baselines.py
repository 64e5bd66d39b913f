"""`ernie-zoo baselines`: LAC / jieba NER, SnowNLP / TF-IDF+LR sentiment, n-gram poetry LM on our splits."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pathlib import Path

    from ernie_zoo.data.labelled import DEFAULT_DATASETS

    parser.add_argument("--datasets", type=Path, default=DEFAULT_DATASETS, help="prepared labelled sets")
    parser.add_argument("--out", type=Path, default=Path("bench/results/baselines.json"))
    parser.add_argument("--tasks", nargs="+", default=["ner", "sentiment", "poetry"])
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ernie_zoo.evaluation.baselines import main

    argv = ["--datasets", str(args.datasets), "--out", str(args.out), "--tasks", *args.tasks]
    return main(argv + (["--no-progress"] if args.no_progress else []))
