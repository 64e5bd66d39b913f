"""Format checks for classical poems, usable on generated text and on the real test split alike.

A *line* (句) is the Han text between punctuation marks or newlines.  Regulated verse (近体诗) has
4 lines (绝句) or 8 lines (律诗) of 5 or 7 characters each, arranged in couplets (联): the first line
of a couplet ends with a comma, the second with a full stop (or ! ?).

>>> f = check_poem_format("床前明月光，疑是地上霜。\\n举头望明月，低头思故乡。")
>>> f.line_lengths, f.line_count_ok, f.line_length_ok, f.couplets_parallel, f.punctuation_ok
([5, 5, 5, 5], True, True, True, True)
>>> f.is_regulated
True
>>> check_poem_format("春眠不觉晓，处处闻啼鸟，夜来风雨声。").is_regulated
False

Half-width punctuation (what NFKC makes of ``，``) is accepted as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ernie_zoo.models.generation import END_MARKS, HAN_RE, LINE_COUNTS, LINE_LENGTHS, MID_MARKS

__all__ = [
    "END_MARKS",
    "HAN_RE",
    "LINE_COUNTS",
    "LINE_LENGTHS",
    "MID_MARKS",
    "PoemFormat",
    "check_poem_format",
    "format_rates",
    "poem_lines",
]

# The verse form (marks, line lengths and counts) lives with the poem_format decoding in ernie_zoo.models.generation.
_SEGMENT_RE = re.compile(
    rf"([^{re.escape(MID_MARKS + END_MARKS)}\n]*)([{re.escape(MID_MARKS + END_MARKS)}]?)"
)


def poem_lines(text: str) -> list[tuple[str, str]]:
    """``(line, closing punctuation)`` pairs; the line keeps only its Han characters, ``""`` = no mark."""
    if not isinstance(text, str):
        raise TypeError(f"poem text must be str, got {type(text).__name__}")
    out = []
    for m in _SEGMENT_RE.finditer(text):
        body, mark = m.group(1), m.group(2)
        han = "".join(HAN_RE.findall(body))
        if han:
            out.append((han, mark))
        elif mark and out and not out[-1][1]:
            out[-1] = (out[-1][0], mark)
    return out


@dataclass(frozen=True)
class PoemFormat:
    """Result of :func:`check_poem_format`.

    Attributes:
        n_lines: number of lines.
        line_lengths: Han characters per line.
        line_count_ok: 4 or 8 lines.
        line_length_ok: every line has 5 characters, or every line has 7.
        couplets_parallel: an even number of lines and both lines of each couplet equally long.
        punctuation_ok: couplet-internal mark (，) after odd lines, an end mark (。！？) after even ones.
    """

    n_lines: int
    line_lengths: list[int]
    line_count_ok: bool
    line_length_ok: bool
    couplets_parallel: bool
    punctuation_ok: bool

    @property
    def is_regulated(self) -> bool:
        """All four checks pass: a well-formed 5/7-character quatrain or regulated octave."""
        return self.line_count_ok and self.line_length_ok and self.couplets_parallel and self.punctuation_ok

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["is_regulated"] = self.is_regulated
        return d


def check_poem_format(text: str) -> PoemFormat:
    """Check the regulated-verse form of one poem (see the module docstring)."""
    lines = poem_lines(text)
    lengths = [len(line) for line, _ in lines]
    even = len(lines) % 2 == 0 and len(lines) > 0
    parallel = even and all(lengths[i] == lengths[i + 1] for i in range(0, len(lengths), 2))
    punct = even and all(
        (mark in MID_MARKS if i % 2 == 0 else mark in END_MARKS) and mark != ""
        for i, (_, mark) in enumerate(lines)
    )
    return PoemFormat(
        n_lines=len(lines),
        line_lengths=lengths,
        line_count_ok=len(lines) in LINE_COUNTS,
        line_length_ok=bool(lengths) and len(set(lengths)) == 1 and lengths[0] in LINE_LENGTHS,
        couplets_parallel=parallel,
        punctuation_ok=punct,
    )


def format_rates(texts: Iterable[str]) -> dict[str, float | int]:
    """Share of ``texts`` passing each check (and all of them), plus the count."""
    checks = [check_poem_format(t) for t in texts]
    if not checks:
        raise ValueError("format_rates needs at least one poem")
    n = len(checks)
    return {
        "poems": n,
        "line_count_ok": sum(c.line_count_ok for c in checks) / n,
        "line_length_ok": sum(c.line_length_ok for c in checks) / n,
        "couplets_parallel": sum(c.couplets_parallel for c in checks) / n,
        "punctuation_ok": sum(c.punctuation_ok for c in checks) / n,
        "is_regulated": sum(c.is_regulated for c in checks) / n,
    }
