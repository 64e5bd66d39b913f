"""The text of SKEP pretraining (recipes/experiments/pretrain-skep-s7.yaml): six cleaned corpora from `scripts/prepare_corpora.py
--sources msra reviews xinhua fortunes manpages libreoffice`, stripped of every held-out text, mixed under
per-source character budgets.

Drops every line that `HeldOut.from_datasets` holds out (the labelled dev/test splits + the multi-domain sentiment
dev/test via data/eval/sentiment_multidomain/exclude.txt) or that contains an exclude.txt text (a Xinhua entry
quoting an idiom example, for instance), writes the cleaned sources to --clean (recipes/zoo/sentiment_silver.py
labels its silver sentences there) and the mixture to --out (ernie_zoo.data.mix.mix_corpus; ~40 s)::

    python recipes/zoo/skep_mix.py --src runs/zoo/data/corpora_csc
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ernie_zoo.data.corpora import HeldOut
from ernie_zoo.data.mix import mix_corpus

BUDGETS = {
    "msra": 2_100_000,
    "reviews": 1_100_000,
    "xinhua": 4_000_000,
    "fortunes": 550_000,
    "manpages": 800_000,
    "libreoffice": 400_000,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, required=True, help="prepare_corpora.py output with the six sources")
    ap.add_argument("--clean", type=Path, default=Path("runs/zoo/data/corpora_skep"))
    ap.add_argument("--out", default="runs/zoo/data/skep-mix.txt")
    ap.add_argument("--datasets", type=Path, default=Path.home() / ".cache/ernie_zoo/datasets")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    held = HeldOut.from_datasets(args.datasets)  # labelled dev/test + exclude.txt
    args.clean.mkdir(parents=True, exist_ok=True)
    for source in BUDGETS:
        lines = (args.src / f"{source}.txt").read_text(encoding="utf-8").splitlines()
        # also lines that hold an excluded text (a Xinhua entry quoting an idiom example)
        lines = [x for x in lines if not held.contains(x) and not held.quotes(x)]
        (args.clean / f"{source}.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    print(mix_corpus(args.clean, BUDGETS, args.out, seed=args.seed))


if __name__ == "__main__":
    main()
