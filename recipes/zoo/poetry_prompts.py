"""Prompt/continuation pairs for ernie-zoo-mini-poetry from the seeded poetry splits.

Each training poem is used once, with one of two prompts drawn with a fixed seed: its title (title -> poem)
or nothing (the poem learnt from its first character, which is also what continuing a first line needs:
`[CLS] first line` is the start of such an example). Dev keeps the title prompts.

    python recipes/zoo/poetry_prompts.py            # -> runs/zoo/data/poetry-{train,dev}.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from ernie_zoo.utils import atomic_write_text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default=str(Path.home() / ".cache/ernie_zoo/datasets"))
    ap.add_argument("--out", default="runs/zoo/data")
    ap.add_argument("--title_fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        rows = []
        with open(Path(args.datasets) / "poetry" / f"{split}.jsonl", encoding="utf-8") as f:
            for line in f:
                poem = json.loads(line)
                use_title = split == "dev" or rng.random() < args.title_fraction
                rows.append({"prompt": poem["title"] if use_title else "", "text": poem["text"]})
        atomic_write_text(
            out / f"poetry-{split}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        )
        print(
            f"{split}: {len(rows):,} examples, {sum(bool(r['prompt']) for r in rows):,} with a title prompt"
        )


if __name__ == "__main__":
    main()
