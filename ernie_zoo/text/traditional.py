"""Traditional -> Simplified Chinese, one character to one character.

    >>> to_simplified("這家飯店的服務很好")
    '这家饭店的服务很好'
    >>> to_simplified("我們在臺北的銀行辦理了業務")
    '我们在台北的银行办理了业务'

Models trained on Simplified text see Traditional input as unknown or rare characters; converting
first lets them generalise. The conversion is a plain character map (``str.translate``), so
``len(to_simplified(s)) == len(s)`` always and every index into the converted string is an index
into the original one: token offsets stay valid and no alignment bookkeeping is needed.

The table (``data/t2s_chars.tsv.gz``, 2,977 pairs) is OpenCC 1.1.9's ``TSCharacters.txt``
(Apache-2.0) reduced by ``scripts/build_t2s_table.py`` to 1:1 pairs: first candidate only; entries
that OpenCC itself sometimes keeps unchanged (乾 覆 藉 於 徵 瞭 ...) are left out, because Simplified
text uses them too (乾隆, 覆盖, 慰藉), so Simplified input is never changed by the table; targets
outside the Basic Multilingual Plane are left out as well.

The other way, :func:`to_traditional` uses OpenCC's ``s2t`` (its phrase tables choose among one-to-many
forms: 头发 -> 頭髮, 发展 -> 發展), kept to one character for one.

Limits of a character map: OpenCC's phrase table is not used, so one-to-many cases take the most
common form (髮/發 -> 发 is right, but 乾 stays 乾 and 著 stays 著); regional vocabulary (軟體 vs
软件) is not converted; text that mixes in Japanese kanji may be changed (後 -> 后).
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from types import MappingProxyType

__all__ = [
    "is_traditional_char",
    "reads_traditional",
    "t2s_mapping",
    "to_simplified",
    "to_traditional",
    "traditional_chars",
]

_RESOURCE = ("ernie_zoo.text", "data/t2s_chars.tsv.gz")


@lru_cache(maxsize=1)
def t2s_mapping() -> Mapping[str, str]:
    """The read-only table ``{traditional char: simplified char}`` (loaded once)."""
    package, relpath = _RESOURCE
    raw = resources.files(package).joinpath(relpath).read_bytes()
    table: dict[str, str] = {}
    for lineno, line in enumerate(gzip.decompress(raw).decode("utf-8").splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        trad, sep, simp = line.partition("\t")
        if not sep or len(trad) != 1 or len(simp) != 1 or trad == simp:
            raise ValueError(f"{relpath}:{lineno}: expected 'char<TAB>char', got {line!r}")
        table[trad] = simp
    if not table:
        raise ValueError(f"{relpath}: empty table")
    return MappingProxyType(table)


@lru_cache(maxsize=1)
def _translate_table() -> dict[int, int]:
    return {ord(t): ord(s) for t, s in t2s_mapping().items()}


@lru_cache(maxsize=1)
def traditional_chars() -> frozenset[str]:
    """Every character :func:`to_simplified` changes."""
    return frozenset(t2s_mapping())


def to_simplified(text: str) -> str:
    """Convert Traditional characters to Simplified, character by character.

    ``len(result) == len(text)``; Simplified characters, Latin, digits, punctuation, emoji and
    characters the table does not know are returned unchanged.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    return text.translate(_translate_table())


def is_traditional_char(ch: str) -> bool:
    """True if ``ch`` is a Traditional character that :func:`to_simplified` converts (這 -> 这)."""
    if not isinstance(ch, str):
        raise TypeError(f"ch must be str, not {type(ch).__name__}")
    if len(ch) != 1:
        raise ValueError(f"expected a single character, got {ch!r}")
    return ch in t2s_mapping()


@lru_cache(maxsize=1)
def _s2t():
    import opencc

    return opencc.OpenCC("s2t")


def to_traditional(text: str) -> str:
    """Convert Simplified characters to Traditional with OpenCC's ``s2t`` (phrase-aware: 头发 -> 頭髮, 发展 -> 發展).

    ``len(result) == len(text)``: where OpenCC's phrase output changes the length, each character is converted
    alone, and a character it turns into several keeps its form.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    conv = _s2t()
    out = conv.convert(text)
    if len(out) != len(text):
        out = "".join(c if len(c) == 1 else o for o, c in zip(text, (conv.convert(ch) for ch in text)))
    return out


def reads_traditional(text: str) -> bool:
    """Whether `text` is written in Traditional characters: more of them that :func:`to_simplified` changes (這 說)
    than characters :func:`to_traditional` changes (这 说). A text with neither (你好, 今天在下雨) reads as
    Simplified."""
    simplified, traditional = to_simplified(text), to_traditional(text)
    return sum(a != b for a, b in zip(text, simplified)) > sum(a != b for a, b in zip(text, traditional))
