"""Offline data: registry sources, text cleaning, labelled sets with seeded splits, the pretraining corpus.

Build everything with ``scripts/prepare_corpora.py``; then::

    from ernie_zoo.data import load_split
    test = load_split("ner", "test")  # [{"text": ..., "entities": [{"start", "end", "type"}]}, ...]

Reserved data (``RESERVED_MEMBERS``) is refused by every reader; see ``/work/shared/DATA.md``.
"""

from .corpora import CORPUS_SOURCES, build_corpora, prepare_all
from .labelled import (
    DEFAULT_DATASETS,
    ENTITY_TYPES,
    SENTIMENT_LABELS,
    SPLITS,
    build_ner,
    build_poetry,
    build_sentiment,
    load_jsonl,
    load_split,
    parse_bmes,
    prepare_datasets,
    seeded_split,
    write_jsonl,
)
from .sources import DEFAULT_CACHE, RESERVED_MEMBERS, SOURCES, check_not_reserved, fetch, fetch_all
from .text import normalize_text, opencc_to_simplified

__all__ = [
    "CORPUS_SOURCES",
    "DEFAULT_CACHE",
    "DEFAULT_DATASETS",
    "ENTITY_TYPES",
    "RESERVED_MEMBERS",
    "SENTIMENT_LABELS",
    "SOURCES",
    "SPLITS",
    "build_corpora",
    "build_ner",
    "build_poetry",
    "build_sentiment",
    "check_not_reserved",
    "fetch",
    "fetch_all",
    "load_jsonl",
    "load_split",
    "normalize_text",
    "parse_bmes",
    "prepare_all",
    "prepare_datasets",
    "seeded_split",
    "opencc_to_simplified",
    "write_jsonl",
]
