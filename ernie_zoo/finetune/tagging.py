"""Entity spans <-> tag sequences for fine-tuning, on top of `ernie_zoo.data.labelled`'s BIO/BIOES/BMES codec.

Spans here are `Span(start, end, type)` tuples (end exclusive) over characters (data, metrics) or tokens (the
model); the codec in `ernie_zoo.data.labelled` works on `{"start", "end", "type"}` dicts. Decoding is lenient
the way conlleval is (an inside tag that does not continue an entity starts one), so a model's imperfect tag
sequence always decodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from ernie_zoo.data.labelled import spans_to_tags as _spans_to_tags
from ernie_zoo.data.labelled import tags_to_spans as _tags_to_spans

OUTSIDE = "O"


class Span(NamedTuple):
    start: int
    end: int  # exclusive
    type: str


def detect_scheme(tags: Iterable[str]) -> str:
    """ "bmes", "bioes" or "bio" from the prefixes used; ValueError for a malformed tag or I- mixed with M-."""
    prefixes = set()
    for tag in tags:
        if tag == OUTSIDE:
            continue
        prefix, sep, kind = tag.partition("-")
        if not sep or prefix not in ("B", "I", "M", "E", "S") or not kind:
            raise ValueError(f"invalid tag {tag!r}: expected O or B/I/M/E/S-TYPE (BIO, BIOES or BMES)")
        prefixes.add(prefix)
    if "I" in prefixes and "M" in prefixes:
        raise ValueError("tags mix I- (BIO/BIOES) and M- (BMES) prefixes; use one scheme per file")
    if "M" in prefixes:
        return "bmes"
    if prefixes & {"E", "S"}:
        return "bioes"
    return "bio"


def tags_to_spans(tags: Sequence[str], scheme: str | None = None) -> list[Span]:
    """Spans of a tag sequence; `scheme` defaults to `detect_scheme(tags)`."""
    scheme = scheme or detect_scheme(tags)
    return [Span(d["start"], d["end"], d["type"]) for d in _tags_to_spans(tags, scheme)]


def spans_to_tags(spans: Iterable[Span], length: int, scheme: str = "bio") -> list[str]:
    """Tags of `length` units for non-overlapping spans, in `scheme` (bio, bioes or bmes)."""
    return _spans_to_tags(length, [Span(*s)._asdict() for s in spans], scheme)


def label_names(entity_types: Sequence[str], scheme: str = "bio") -> list[str]:
    """Classifier labels for entity types: O first, then each type's tags (B, I[, E, S])."""
    prefixes = ("B", "I") if scheme == "bio" else ("B", "I", "E", "S")
    return [OUTSIDE] + [f"{p}-{t}" for t in entity_types for p in prefixes]


def check_flat(spans: Sequence[Span], where: str) -> None:
    """Raise ValueError if two spans overlap (flat NER cannot represent nested entities)."""
    ordered = sorted(spans)
    for a, b in zip(ordered, ordered[1:]):
        if b.start < a.end:
            raise ValueError(
                f"{where}: entities {tuple(a)} and {tuple(b)} overlap; token classification needs flat "
                "(non-nested) entities"
            )


__all__ = ["OUTSIDE", "Span", "check_flat", "detect_scheme", "label_names", "spans_to_tags", "tags_to_spans"]
