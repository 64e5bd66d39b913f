#!/usr/bin/env python
"""Build the zoo generator's data: idiom and headline splits, the pretraining mixture, the held-out prefixes.

Needs ``scripts/prepare_corpora.py`` first (its datasets and corpora under the same cache). Writes
``<cache>/datasets/{idioms,headlines}/{train,dev,test}.jsonl`` and, in ``--out`` (default ``runs/zoo/data``, where
the zoo recipes read their corpora),
``generator.txt`` (one document per line, what ``recipes/zoo/pretrain-generator.yaml`` reads),
``generator_prefixes.jsonl`` (200 held-out prefixes: news, reviews, everyday), ``generator_heldout.jsonl``
(held-out modern text for perplexity) and ``generator.json`` (counts and sha256s). See
:mod:`ernie_zoo.data.generation`.

    python recipes/zoo/generator_data.py --cache $ERNIE_ZOO_CACHE
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ernie_zoo.data.generation import build_generator_data  # noqa: E402
from ernie_zoo.data.sources import DEFAULT_CACHE  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help="cache root (raw/, datasets/, corpora/)"
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "runs/zoo/data", help="output dir (default runs/zoo/data)"
    )
    parser.add_argument("--seed", type=int, default=42, help="split seed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = args.out
    manifest = build_generator_data(
        args.cache, out, REPO / "data/eval/generation/everyday.txt", seed=args.seed
    )
    print(json.dumps({k: v for k, v in manifest.items() if k != "mixture"}, ensure_ascii=False, indent=1))
    print(json.dumps(manifest["mixture"]["sources"], ensure_ascii=False, indent=1))
    print(
        f"mixture: {manifest['mixture']['lines']:,} lines, {manifest['mixture']['chars']:,} chars -> {out}/generator.txt"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
