"""Per-character glyph features: Kangxi radical, total stroke count and 5-type stroke sequence.

The table ships as package data (``ernie_zoo/tokenization/data/char_features.tsv.gz``, built by
``scripts/build_char_tables.py``; sources and licences in ``data/LICENSES.md``) and is read once through
:mod:`importlib.resources`, so it also works from an installed wheel or zip.

Coverage: CJK Unified Ideographs (U+4E00–9FFF), Extension A (U+3400–4DBF) and CJK Compatibility
Ideographs (U+F900–FAFF).  Anything else (Latin, punctuation, Extension B+ ideographs, ...) is "unknown":
radical 0, 0 strokes, empty stroke sequence.

* Radicals (Unihan ``kRSUnicode``, first value) are numbered 1..214; simplified radical forms such as
  ``120'`` (纟) count as their Kangxi radical (120, 糸).
* Total strokes (Unihan ``kTotalStrokes``, first value = the zh-Hans preferred count) are clipped to
  :data:`MAX_STROKES`.
* Stroke sequences (rime-stroke, Mainland-glyph entries preferred) use 1=横 h, 2=竖 s, 3=撇 p, 4=捺/点 n,
  5=折 z.

Model code should call :func:`build_vocab_tables` once when building a tokenizer/model and store the
resulting tensors as buffers or in the saved files — never read this table from inside a model's
``__init__``.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch

__all__ = [
    "NUM_RADICALS",
    "MAX_STROKES",
    "STROKE_TYPES",
    "MAX_STROKE_SEQ",
    "CharFeatures",
    "CharTable",
    "load_char_table",
    "radical",
    "total_strokes",
    "stroke_sequence",
    "radical_char",
    "build_vocab_tables",
]

#: Number of Kangxi radicals; radical ids are 1..NUM_RADICALS, 0 = unknown (embedding size NUM_RADICALS+1).
NUM_RADICALS: int = 214
#: Upper clip for total stroke counts (embedding size MAX_STROKES+1; 0 = unknown).  The largest count in
#: the shipped table is 52 (Unihan 15.0 over the covered blocks), so clipping is currently a no-op; the
#: constant is fixed at 64 so that embedding shapes do not change when the table is rebuilt.
MAX_STROKES: int = 64
#: Number of stroke types (1=横 2=竖 3=撇 4=捺/点 5=折); 0 is padding (embedding size STROKE_TYPES+1).
STROKE_TYPES: int = 5
#: Length of the stroke-sequence tensor rows in :func:`build_vocab_tables`; longer sequences are truncated.
MAX_STROKE_SEQ: int = 32

_DATA_FILE = "char_features.tsv.gz"


class CharFeatures(NamedTuple):
    """Features of one character as stored in the table (strokes not clipped)."""

    radical: int
    strokes: int
    stroke_seq: str


class CharTable(NamedTuple):
    """The parsed data file (read-only mappings)."""

    #: character -> features, for every ``[chars]`` row of the data file
    chars: Mapping[str, CharFeatures]
    #: radical number as in CJKRadicals.txt (``"85"``, ``"120'"``) -> (radical char, unified ideograph)
    radicals: Mapping[str, tuple[str, str]]


def _parse(text: str) -> CharTable:
    chars: dict[str, CharFeatures] = {}
    radicals: dict[str, tuple[str, str]] = {}
    section = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        if line in ("[radicals]", "[chars]"):
            section = line
            continue
        fields = line.split("\t")
        if section == "[chars]" and len(fields) == 4 and len(fields[0]) == 1:
            ch, rad, tot, seq = fields
            if not (seq == "" or set(seq) <= set("12345")):
                raise ValueError(f"{_DATA_FILE}:{lineno}: bad stroke sequence {seq!r}")
            chars[ch] = CharFeatures(int(rad), int(tot), seq)
        elif section == "[radicals]" and len(fields) == 3:
            radicals[fields[0]] = (fields[1], fields[2])
        else:
            raise ValueError(f"{_DATA_FILE}:{lineno}: malformed line {line!r}")
    return CharTable(MappingProxyType(chars), MappingProxyType(radicals))


@lru_cache(maxsize=1)
def load_char_table() -> CharTable:
    """Read and parse the packaged feature table (cached; about 28k characters)."""
    ref = resources.files(__package__).joinpath("data").joinpath(_DATA_FILE)
    with ref.open("rb") as f:
        text = gzip.decompress(f.read()).decode("utf-8")
    return _parse(text)


def radical(ch: str) -> int:
    """Kangxi radical number (1..214) of the character ``ch``; 0 if unknown or not a covered Han char."""
    f = load_char_table().chars.get(ch)
    return f.radical if f else 0


def total_strokes(ch: str) -> int:
    """Total stroke count of ``ch`` clipped to :data:`MAX_STROKES`; 0 if unknown."""
    f = load_char_table().chars.get(ch)
    return min(f.strokes, MAX_STROKES) if f else 0


def stroke_sequence(ch: str) -> str:
    """Full stroke sequence of ``ch`` as digits 1..5 (e.g. ``'34'`` for 人); ``''`` if unknown."""
    f = load_char_table().chars.get(ch)
    return f.stroke_seq if f else ""


def radical_char(n: int, simplified: bool = False) -> str:
    """The Kangxi radical ``n`` written as a normal CJK ideograph, e.g. ``radical_char(85) == '水'``.

    With ``simplified=True`` the simplified form is returned where Unicode defines one (``120`` -> 纟,
    ``90`` -> 丬), else the traditional one.  Returns ``''`` for ``n == 0`` (the "unknown" id);
    raises :class:`ValueError` for other values outside 1..:data:`NUM_RADICALS`.
    """
    if n == 0:
        return ""
    if not 1 <= n <= NUM_RADICALS:
        raise ValueError(f"radical number must be in 0..{NUM_RADICALS}, got {n}")
    radicals = load_char_table().radicals
    if simplified and f"{n}'" in radicals:
        return radicals[f"{n}'"][1]
    return radicals[str(n)][1]


def _token_char(token: str) -> str | None:
    if len(token) == 1:
        return token
    if len(token) == 3 and token.startswith("##"):
        return token[2]
    return None


def build_vocab_tables(vocab: Mapping[str, int], vocab_size: int | None = None) -> dict[str, torch.Tensor]:
    """Per-token feature tensors for a vocabulary (token -> id).

    A token is looked up if it is exactly one character, or a WordPiece continuation ``"##x"`` of one
    character ``x``; every other token (and every character not in the table) gets zeros.

    Args:
        vocab: token -> id mapping (ids must be in ``0..V-1``).
        vocab_size: ``V``; defaults to ``max(id) + 1``.  May exceed the vocabulary (padded embeddings).

    Returns:
        int64 tensors ``radical_ids`` (V,) in 0..214, ``stroke_counts`` (V,) in 0..MAX_STROKES and
        ``stroke_seqs`` (V, MAX_STROKE_SEQ) with stroke types 1..5, zero-padded / truncated.
    """
    import torch

    size = vocab_size if vocab_size is not None else (max(vocab.values(), default=-1) + 1)
    table = load_char_table().chars
    radical_ids = [0] * size
    stroke_counts = [0] * size
    stroke_seqs = [0] * (size * MAX_STROKE_SEQ)  # flat row-major (size, MAX_STROKE_SEQ)
    for token, idx in vocab.items():
        if not 0 <= idx < size:
            raise ValueError(f"token {token!r} has id {idx} outside 0..{size - 1}")
        ch = _token_char(token)
        f = table.get(ch) if ch is not None else None
        if f is None:
            continue
        radical_ids[idx] = f.radical
        stroke_counts[idx] = min(f.strokes, MAX_STROKES)
        seq = f.stroke_seq[:MAX_STROKE_SEQ]
        start = idx * MAX_STROKE_SEQ
        stroke_seqs[start : start + len(seq)] = [int(c) for c in seq]
    return {
        "radical_ids": torch.tensor(radical_ids, dtype=torch.int64),
        "stroke_counts": torch.tensor(stroke_counts, dtype=torch.int64),
        "stroke_seqs": torch.tensor(stroke_seqs, dtype=torch.int64).view(size, MAX_STROKE_SEQ),
    }
