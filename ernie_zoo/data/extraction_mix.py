"""The training mix of the default information-extraction model (issue #48, first part): MSRA's entities asked under
several Chinese type names each, with negative prompts, written as UIE prompt-example JSONL that
`ernie-finetune --task information_extraction` reads as it is (recipes/zoo/ie-mini.yaml).

    PER -> 人物 / 人名 / 姓名      LOC -> 地点 / 地名 / 位置      ORG -> 机构 / 组织 / 机构名
    held out (never trained, for zero-shot): PER 人, LOC 地方, ORG 单位

Each sentence asks each of the three types once, under one of its names drawn by a hash seeded with `seed` (so every
name is seen about equally): a type with mentions in the sentence is a positive prompt, one without is a negative
prompt (nothing to find). A negative never uses another name of a type the sentence has, so the model never learns
"人名 finds nothing where 人物 finds 李明".

    <out>/train.jsonl, dev.jsonl     from MSRA train / our seeded dev split of it (data/labelled.py), trained names
    <out>/test.jsonl                 MSRA test, trained names
    <out>/test_unseen.jsonl          MSRA test, held-out names (zero-shot on type names)

Texts of the repository's exclude lists (`ernie_zoo.data.corpora.EXCLUDE_FILES`: the hand-labelled relation set
`data/eval/relations`, whose sentences are MSRA training text) are dropped from train.jsonl and dev.jsonl, with the clause-pair rule
of the pretraining corpus (the MSRA test files stay the public test, whole).

The entity lexicons' types (jieba nr/ns/nt/nz/t/m, jionlp places), dictionary entries and relation templates of
#48 item 2 are not in this mix yet.

    python -m ernie_zoo.data.extraction_mix --out ~/.cache/ernie_zoo/datasets/extraction
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ernie_zoo.recipe_cli import command_main

from .annotations import PromptExample, write_prompt_examples
from .corpora import HeldOut
from .labelled import DEFAULT_DATASETS, load_split
from .text import normalize_text

logger = logging.getLogger(__name__)

#: MSRA's types under the names the model is trained on
TYPE_NAMES: dict[str, tuple[str, ...]] = {
    "PER": ("人物", "人名", "姓名"),
    "LOC": ("地点", "地名", "位置"),
    "ORG": ("机构", "组织", "机构名"),
}
#: names never trained on, for zero-shot evaluation of type names
HELD_OUT_NAMES: dict[str, tuple[str, ...]] = {"PER": ("人",), "LOC": ("地方",), "ORG": ("单位",)}


def _pick(names: Sequence[str], seed: int, key: str) -> str:
    digest = hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=8).digest()
    return names[int.from_bytes(digest, "big") % len(names)]


def msra_prompt_examples(
    records: Iterable[dict[str, Any]], names: dict[str, Sequence[str]] = TYPE_NAMES, seed: int = 0
) -> Iterator[PromptExample]:
    """Per MSRA record (`{"text", "entities": [{"start", "end", "type"}]}`) one prompt per type of `names`, under a
    name drawn for (sentence, type): its mentions, or none (a negative prompt)."""
    for record in records:
        text = record["text"]
        for kind, choices in names.items():
            spans = sorted({(e["start"], e["end"]) for e in record["entities"] if e["type"] == kind})
            yield PromptExample(_pick(choices, seed, f"{text}\0{kind}"), text, tuple(spans))


def build_extraction_mix(
    out: Path,
    datasets: Path = DEFAULT_DATASETS,
    seed: int = 0,
    exclude_files: Iterable[str | Path] | None = None,
) -> dict[str, int]:
    """Write the mix (see the module docstring) from the prepared MSRA splits, without the texts of
    ``exclude_files`` (default: the repository's exclude lists); returns the examples per file and, under
    ``dropped_heldout``, how many sentences the exclude lists removed."""
    held = HeldOut.from_exclude_files(exclude_files)
    counts = {"dropped_heldout": 0}
    for name, split, names in (
        ("train", "train", TYPE_NAMES),
        ("dev", "dev", TYPE_NAMES),
        ("test", "test", TYPE_NAMES),
        ("test_unseen", "test", HELD_OUT_NAMES),
    ):
        records = []
        for record in load_split("ner", split, datasets):
            if split != "test" and held.contains(normalize_text(record["text"])):
                counts["dropped_heldout"] += 1
            else:
                records.append(record)
        counts[name] = write_prompt_examples(
            out / f"{name}.jsonl", msra_prompt_examples(records, names, seed)
        )
        logger.info("%s: %d prompt examples", out / f"{name}.jsonl", counts[name])
    return counts


@dataclass
class Args:
    """Build the information-extraction training mix (MSRA under several type names) as UIE prompt JSONL."""

    out: Path = DEFAULT_DATASETS / "extraction"
    """Directory to write train/dev/test/test_unseen.jsonl to."""
    datasets: Path = DEFAULT_DATASETS
    """The prepared labelled sets (scripts/prepare_corpora.py --sources msra), holding ner/{train,dev,test}.jsonl."""
    seed: int = 0
    """Seed of the type-name draw."""


def run(args: Args, argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    build_extraction_mix(args.out.expanduser(), args.datasets.expanduser(), args.seed)
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(Args, run, "python -m ernie_zoo.data.extraction_mix", __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
