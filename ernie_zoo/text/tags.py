"""Entity spans <-> BIO / BIOES / BMES tag sequences: the one tag codec of ernie_zoo.

A `Span(start, end, type)` has `end` exclusive and indexes characters (data, metrics, Taskflow) or tokens /
words (a model's tag sequence); on disk a span is the dict `span._asdict()` (`{"start", "end", "type"}`).

>>> tags_to_spans(["B-PER", "E-PER", "O", "B-ORG", "M-ORG", "E-ORG"])
[Span(start=0, end=2, type='PER'), Span(start=3, end=6, type='ORG')]
>>> spans_to_tags([Span(0, 2, "PER"), (3, 4, "LOC")], 5, "bioes")
['B-PER', 'E-PER', 'O', 'S-LOC', 'O']

Decoding is lenient, as conlleval is, so a model's imperfect tag sequence and MSRA's 100-character chunks
(which cut a few names in two, leaving e.g. `E-PER` right after `O`) always decode:

- an inside (I-/M-) or end (E-) tag that does not continue an open entity of the same type starts one:
  `O I-PER` -> PER(1, 2); `B-PER I-LOC` -> PER(0, 1) LOC(1, 2); a lone `E-PER` or `M-PER` -> PER(0, 1);
- B- and S- close the open entity; S- and E- close their own; an entity without an end tag closes at the next
  O/B/S, at a type change or at the end (`B-PER M-PER` -> PER(0, 2)).

This is the behaviour of all three decoders it replaces (`data/labelled.py` for MSRA, `finetune/tagging.py`
for dev F1 and `taskflow/ner.py` for Taskflow and so the model card): they gave the same spans on every
sequence all of them accepted, so recorded F1 numbers stay valid. Taskflow's decoder accepted more tags
(I- and M- in one sequence, `B_PER`, lower-case prefixes, a bare `S`); that parsing is kept, since a model's
`id2label` may use it. `scheme=` refuses prefixes outside a scheme (data files); `strict=True` keeps only
well-formed entities (B (I|M)* E or S; B I* for BIO) and drops fragments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

OUTSIDE = "O"
PREFIXES = frozenset("BIMES")
SCHEMES = {"bio": "BIO", "bioes": "BIOES", "bmes": "BMES"}  # scheme -> the prefixes it allows


class Span(NamedTuple):
    start: int
    end: int  # exclusive
    type: str


def as_span(span: Span | tuple[int, int, str] | Mapping[str, Any]) -> Span:
    """A `Span` from a (start, end, type) tuple or a `{"start", "end", "type"}` mapping, checked."""
    if isinstance(span, Mapping):
        try:
            s, e, t = span["start"], span["end"], span["type"]
        except KeyError as exc:
            raise ValueError(f"span {dict(span)} lacks key {exc}") from None
    elif isinstance(span, tuple) and len(span) == 3:
        s, e, t = span
    else:
        raise TypeError(f"a span must be a mapping with start/end/type or a 3-tuple, got {span!r}")
    if not (isinstance(s, int) and isinstance(e, int) and s < e):
        raise ValueError(f"span {span!r} must have integer start < end")
    return Span(s, e, str(t))


def parse_tag(tag: str) -> tuple[str, str | None]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', None); 'I_LOC' -> ('I', 'LOC'); 'S' -> ('S', '')."""
    if tag in ("O", "o"):
        return OUTSIDE, None
    for sep in ("-", "_"):
        head, _, rest = tag.partition(sep)
        if rest and head.upper() in PREFIXES:
            return head.upper(), rest
    if tag.upper() in PREFIXES:
        return tag.upper(), ""
    raise ValueError(f"invalid tag {tag!r}: expected O or B/I/M/E/S-TYPE (BIO, BIOES or BMES)")


def detect_scheme(tags: Iterable[str]) -> str:
    """ "bmes", "bioes" or "bio" from the prefixes used; ValueError for an invalid tag or I- mixed with M-."""
    prefixes = set()
    for tag in tags:
        prefix, kind = parse_tag(tag)
        if kind == "":
            raise ValueError(f"invalid tag {tag!r}: an entity tag needs a type (B-PER, not B)")
        prefixes.add(prefix)
    if "I" in prefixes and "M" in prefixes:
        raise ValueError("tags mix I- (BIO/BIOES) and M- (BMES) prefixes; use one scheme per file")
    return "bmes" if "M" in prefixes else "bioes" if prefixes & {"E", "S"} else "bio"


def tags_to_spans(tags: Sequence[str], scheme: str | None = None, *, strict: bool = False) -> list[Span]:
    """Entity spans of a tag sequence, decoded leniently (see the module docstring).

    scheme: "bio", "bioes" or "bmes" to refuse (ValueError) a prefix outside it; None accepts any prefix.
    strict: keep only well-formed entities (for BIO: any B I*; otherwise B (I|M)* E or S); the scheme is
        detected from the tags when not given.
    """
    if scheme is not None and scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r}; expected one of {sorted(SCHEMES)}")
    needs_end = strict and (scheme or detect_scheme(tags)) != "bio"
    spans: list[Span] = []
    start, kind, well_formed = -1, "", True

    def close(end: int, ended: bool) -> None:
        nonlocal start, kind, well_formed
        if start >= 0 and (not strict or (well_formed and (ended or not needs_end))):
            spans.append(Span(start, end, kind))
        start, kind, well_formed = -1, "", True

    for i, tag in enumerate(tags):
        prefix, typ = parse_tag(tag)
        if scheme is not None and prefix not in SCHEMES[scheme] + OUTSIDE:
            raise ValueError(f"tag {tag!r} at position {i} is not valid in the {SCHEMES[scheme]} scheme")
        if prefix == OUTSIDE:
            close(i, False)
        elif prefix in "BS":
            close(i, False)
            start, kind = i, typ or ""
            if prefix == "S":
                close(i + 1, True)
        else:  # I, M or E
            if start < 0 or kind != typ:
                close(i, False)
                start, kind, well_formed = i, typ or "", False
            if prefix == "E":
                close(i + 1, True)
    close(len(tags), False)
    return spans


def spans_to_tags(spans: Iterable[Any], length: int, scheme: str = "bio") -> list[str]:
    """Tags of `length` units for non-overlapping spans (`Span`s, tuples or dicts) in `scheme`."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r}; expected one of {sorted(SCHEMES)}")
    tags = [OUTSIDE] * length
    inside = "M" if scheme == "bmes" else "I"
    for s, e, t in map(as_span, spans):
        if not 0 <= s < e <= length:
            raise ValueError(f"span {(s, e, t)} out of range for length {length}")
        if any(tag != OUTSIDE for tag in tags[s:e]):
            raise ValueError(f"span {(s, e, t)} overlaps another span")
        if scheme == "bio":
            tags[s:e] = [f"B-{t}"] + [f"I-{t}"] * (e - s - 1)
        elif e - s == 1:
            tags[s] = f"S-{t}"
        else:
            tags[s:e] = [f"B-{t}"] + [f"{inside}-{t}"] * (e - s - 2) + [f"E-{t}"]
    return tags


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


__all__ = [
    "OUTSIDE",
    "SCHEMES",
    "Span",
    "as_span",
    "check_flat",
    "detect_scheme",
    "label_names",
    "parse_tag",
    "spans_to_tags",
    "tags_to_spans",
]
