"""Text plumbing shared by every task: input validation, the long-text splitter (word pieces are joined by
`ernie_zoo.tokenization.tokenizer.join_wordpieces`, the tokenizer's own `decode`).

Long texts
----------
A model sees at most `max_seq_len` tokens. Longer texts are cut into chunks by `split_text`, run as
separate rows of the batch, and joined back by the task:

1. sentences: cut after sentence-final punctuation (。！？!?；;… and newlines, plus any closing quotes or
   brackets that follow), then pack whole sentences greedily into chunks of at most `max_chars` characters;
2. a sentence longer than `max_chars` is cut after clause punctuation (，,、：: and whitespace) and the clauses
   are packed the same way;
3. a clause still longer than `max_chars` is cut every `max_chars` characters (never inside a protected span
   such as a `[MASK]` literal).

Chunks are contiguous and cover the whole text, so every character offset maps back to the original string by
adding the chunk's start. Each task documents how it joins chunk results (sentiment: scores averaged weighted
by chunk length; NER: entity offsets shifted into the original string; features: embeddings averaged weighted
by token count; fill-mask: each mask predicted within its own chunk).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ernie_zoo.tokenization.tokenizer import join_wordpieces  # noqa: F401  (re-exported for the tasks)

SENTENCE_END = "。！？!?；;…\n"
CLAUSE_END = "，,、：:\t "
CLOSERS = "”’」』）)】》\"'"
_SURROGATE = re.compile("[\ud800-\udfff]")


def normalize_inputs(inputs: object) -> tuple[list[str], bool]:
    """Check what a Taskflow was called with: a `str` -> `([str], True)`, a list/tuple of `str` -> `(list, False)`.

    Raises TypeError naming the offending item for anything else (None, bytes, numbers, nested lists, dicts).
    """
    if isinstance(inputs, str):
        return [inputs], True
    if isinstance(inputs, (bytes, bytearray)):
        raise TypeError("Taskflow input is bytes; decode it to str first (for example data.decode('utf-8'))")
    if isinstance(inputs, (list, tuple)):
        for i, item in enumerate(inputs):
            if not isinstance(item, str):
                hint = " (decode bytes to str first)" if isinstance(item, (bytes, bytearray)) else ""
                kind = "a nested list" if isinstance(item, (list, tuple)) else f"{type(item).__name__}"
                raise TypeError(f"Taskflow input item {i} is {kind}, expected str{hint}: {item!r:.80}")
        return list(inputs), False
    raise TypeError(
        f"Taskflow input must be a str or a list of str, got {type(inputs).__name__}: {inputs!r:.80}"
    )


def clean_surrogates(text: str) -> str:
    """Replace unpaired UTF-16 surrogates (e.g. '\\ud800', not encodable as UTF-8) by U+FFFD.

    One code point in, one out, so character offsets stay valid for the original string.
    """
    return _SURROGATE.sub("\ufffd", text)


def _cut_after(text: str, start: int, end: int, marks: str) -> list[int]:
    """Positions p in (start, end) such that text[p-1] is one of `marks` (closers following a mark stay left)."""
    cuts = []
    i = start
    while i < end:
        if text[i] in marks:
            j = i + 1
            while j < end and (text[j] in CLOSERS or text[j] in marks):
                j += 1
            if j < end:
                cuts.append(j)
            i = j
        else:
            i += 1
    return cuts


def _pack(bounds: list[int], max_chars: int) -> list[tuple[int, int]]:
    """Greedily merge consecutive pieces [bounds[k], bounds[k+1]) into spans of at most max_chars characters;
    a single piece longer than that is returned on its own (the caller cuts it further)."""
    spans: list[tuple[int, int]] = []
    start = bounds[0]
    for k in range(1, len(bounds)):
        if bounds[k] - start > max_chars and bounds[k - 1] > start:
            spans.append((start, bounds[k - 1]))
            start = bounds[k - 1]
    spans.append((start, bounds[-1]))
    return spans


def split_text(text: str, max_chars: int, protected: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """Cut `text` into contiguous `(start, end)` spans of at most `max_chars` characters (see module docstring).

    `protected` spans (e.g. the positions of `[MASK]` literals) are never cut through; a protected span longer
    than `max_chars` raises ValueError.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    n = len(text)
    if n <= max_chars:
        return [(0, n)]
    for a, b in protected:
        if b - a > max_chars:
            raise ValueError(f"protected span {text[a:b]!r} is longer than the chunk size {max_chars}")

    def allowed(p: int) -> bool:
        return all(not (a < p < b) for a, b in protected)

    out: list[tuple[int, int]] = []
    sentences = _pack([0, *[p for p in _cut_after(text, 0, n, SENTENCE_END) if allowed(p)], n], max_chars)
    for s, e in sentences:
        if e - s <= max_chars:
            out.append((s, e))
            continue
        clauses = _pack([s, *[p for p in _cut_after(text, s, e, CLAUSE_END) if allowed(p)], e], max_chars)
        for cs, ce in clauses:
            while ce - cs > max_chars:
                cut = cs + max_chars
                while not allowed(cut):
                    cut -= 1
                out.append((cs, cut))
                cs = cut
            out.append((cs, ce))
    return out


__all__ = ["clean_surrogates", "join_wordpieces", "normalize_inputs", "split_text"]
