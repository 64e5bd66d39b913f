"""The one sentence splitter: cut a text into chunks of at most `max_len` characters at the best boundary.

Used by Taskflow for texts longer than a model's `max_seq_len`, by `masking.prepare` for pretraining lines
and by `data.text.iter_clean_lines` for corpus lines (PaddleNLP has one `_auto_splitter` for every task; so
do we). `chunk_spans` works in three steps:

1. sentences: cut after a run of sentence-final punctuation (`SENTENCE_END`: 。！？!?；;… and newline) and any
   closing quotes or brackets that follow (`CLOSERS`); whole sentences are packed greedily into chunks of at
   most `max_len` characters;
2. a sentence longer than `max_len` is cut after clause punctuation (`CLAUSE_END`: ，,、：: tab and space) and
   its clauses are packed the same way;
3. a clause still longer than `max_len` is cut every `max_len` characters (never inside a `protected` span,
   such as a `[MASK]` literal).

Chunks are contiguous and cover the whole text, so an offset in a chunk maps back to the original string by
adding the chunk's start. `width` measures a character in another unit than one (`masking.prepare` counts
characters after NFKC, which turns … into ...).

>>> text = "床前明月光，疑是地上霜。举头望明月，低头思故乡。"
>>> chunk_text(text, 12)
['床前明月光，疑是地上霜。', '举头望明月，低头思故乡。']
>>> chunk_text(text, 8)
['床前明月光，', '疑是地上霜。', '举头望明月，', '低头思故乡。']
>>> chunk_spans("他说：“走吧。”好的。", 9)  # the closing quote stays with its sentence
[(0, 8), (8, 11)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate

SENTENCE_END = "。！？!?；;…\n"
CLAUSE_END = "，,、：:\t "
CLOSERS = "”’」』）)】》\"'"


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


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Contiguous `(start, end)` spans of the sentences of `text` (step 1 above, without packing)."""
    bounds = [0, *_cut_after(text, 0, len(text), SENTENCE_END), len(text)]
    return list(zip(bounds, bounds[1:])) if text else []


def _pack(bounds: list[int], max_len: int, pos: list[int]) -> list[tuple[int, int]]:
    """Greedily merge consecutive pieces [bounds[k], bounds[k+1]) into spans of at most max_len (measured by
    the prefix widths `pos`); a single piece longer than that is returned on its own (the caller cuts it)."""
    spans: list[tuple[int, int]] = []
    start = bounds[0]
    for k in range(1, len(bounds)):
        if pos[bounds[k]] - pos[start] > max_len and bounds[k - 1] > start:
            spans.append((start, bounds[k - 1]))
            start = bounds[k - 1]
    spans.append((start, bounds[-1]))
    return spans


def chunk_spans(
    text: str,
    max_len: int,
    protected: Sequence[tuple[int, int]] = (),
    *,
    width: Callable[[str], int] | None = None,
) -> list[tuple[int, int]]:
    """Cut `text` into contiguous `(start, end)` spans of at most `max_len` characters (see the module docstring).

    protected: spans (e.g. the positions of `[MASK]` literals) never cut through; one longer than `max_len`
        raises ValueError.
    width: the length of one character (default 1); a character wider than `max_len` becomes a chunk alone.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    n = len(text)
    pos = range(n + 1) if width is None else [0, *accumulate(map(width, text))]  # width of text[:i]
    if pos[n] <= max_len:
        return [(0, n)]
    for a, b in protected:
        if pos[b] - pos[a] > max_len:
            raise ValueError(f"protected span {text[a:b]!r} is longer than the chunk size {max_len}")

    def allowed(p: int) -> bool:
        return all(not (a < p < b) for a, b in protected)

    out: list[tuple[int, int]] = []
    sentences = _pack([0, *[p for p in _cut_after(text, 0, n, SENTENCE_END) if allowed(p)], n], max_len, pos)
    for s, e in sentences:
        if pos[e] - pos[s] <= max_len:
            out.append((s, e))
            continue
        clauses = _pack([s, *[p for p in _cut_after(text, s, e, CLAUSE_END) if allowed(p)], e], max_len, pos)
        for cs, ce in clauses:
            while pos[ce] - pos[cs] > max_len and ce - cs > 1:
                cut = cs + 1
                while cut < ce and pos[cut + 1] - pos[cs] <= max_len:
                    cut += 1
                while not allowed(cut):
                    cut -= 1
                out.append((cs, cut))
                cs = cut
            out.append((cs, ce))
    return out


def overlapping_chunk_spans(text: str, max_len: int, overlap: int) -> list[tuple[int, int]]:
    """`chunk_spans`, with the chunks on either side of a border *inside* a sentence overlapping.

    A border at a sentence end cuts nothing that matters; one inside a sentence (a clause cut, or a hard cut in
    a long run without punctuation) may cut a name in two. Where `chunk_spans(text, max_len)` has such a border,
    the text is cut again with `max_len - overlap` and the chunk after each inside-a-sentence border starts
    `overlap` characters earlier: a span of at most `overlap` characters that a border cuts lies whole in the
    next chunk. Chunks stay within `max_len` and cover the text; `overlap` is capped at `max_len // 4`. A text
    whose borders are all sentence ends gets exactly `chunk_spans(text, max_len)`.

    >>> overlapping_chunk_spans("李明毕业于北京大学现居上海", 8, 2)
    [(0, 6), (4, 12), (10, 13)]
    """
    if overlap < 0:
        raise ValueError(f"overlap must be >= 0, got {overlap}")
    spans = chunk_spans(text, max_len)
    overlap = min(overlap, max_len // 4)
    sentence_starts = {s for s, _ in sentence_spans(text)}
    if overlap == 0 or all(s in sentence_starts for s, _ in spans[1:]):
        return spans
    spans = chunk_spans(text, max_len - overlap)
    out = spans[:1]
    for start, end in spans[1:]:
        if start not in sentence_starts:
            start = max(start - overlap, out[-1][0] + 1)
        out.append((start, end))
    return out


def chunk_text(text: str, max_len: int, *, width: Callable[[str], int] | None = None) -> list[str]:
    """The chunks of `chunk_spans` as strings, stripped of surrounding whitespace, empty ones dropped."""
    return [c for c in (text[s:e].strip() for s, e in chunk_spans(text, max_len, width=width)) if c]


__all__ = [
    "CLAUSE_END",
    "CLOSERS",
    "SENTENCE_END",
    "chunk_spans",
    "chunk_text",
    "overlapping_chunk_spans",
    "sentence_spans",
]
