"""Text cleaning shared by the corpus builders and the labelled-set readers.

Each function does one thing and is safe to call on any ``str``:

>>> normalize_text("ＡＢＣ　１２３\u200b，好")
'ABC 123,好'
>>> strip_ansi("\x1b[32m《送别》\x1b[m")
'《送别》'

Long lines are cut by the one sentence splitter, `ernie_zoo.text.sentences.chunk_text`.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from functools import lru_cache
from html.parser import HTMLParser

from ernie_zoo.text.sentences import chunk_text

__all__ = [
    "Deduper",
    "clause_pairs",
    "groff_to_paragraphs",
    "han_count",
    "html_to_paragraphs",
    "iter_clean_lines",
    "join_wrapped",
    "normalize_text",
    "opencc_to_simplified",
    "strip_ansi",
]

_HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Zero-width and bidi controls that NFKC keeps; C0/C1 controls other than tab/newline.
_INVISIBLE_RE = re.compile(r"[\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SPACE_RE = re.compile(r"\s+")
_CLAUSE_SPLIT_RE = re.compile(r"[^\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def han_count(text: str) -> int:
    """Number of Han (CJK ideograph) characters in ``text``."""
    return len(_HAN_RE.findall(text))


def strip_ansi(text: str) -> str:
    """Remove ANSI terminal escape sequences (colours, cursor movement)."""
    return _ANSI_RE.sub("", text)


def normalize_text(text: str) -> str:
    """NFKC, drop invisible/control characters, collapse every whitespace run to one space, strip.

    This is the canonical form used for deduplication, for split disjointness and in all written files
    (the tokenizer applies NFKC as well, so nothing a model could see is lost).
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize_text expects str, got {type(text).__name__}")
    text = unicodedata.normalize("NFKC", text)
    text = _INVISIBLE_RE.sub("", text)
    return _SPACE_RE.sub(" ", text).strip()


@lru_cache(maxsize=1)
def _opencc_t2s():
    try:
        import opencc
    except ImportError as exc:  # pragma: no cover - dependency message
        raise ImportError("Traditional->Simplified conversion needs the PyPI package `opencc`") from exc
    return opencc.OpenCC("t2s")


def opencc_to_simplified(text: str) -> str:
    """Convert Traditional Chinese to Simplified with OpenCC's ``t2s`` profile (offline, phrase-aware: 乾燥 -> 干燥
    but 乾隆 stays), for corpus and lexicon preparation. Not offset-preserving in general; text that models read
    at inference goes through :func:`ernie_zoo.text.traditional.to_simplified` (one character to one)."""
    return _opencc_t2s().convert(text)


def _is_cjk_or_punct(ch: str) -> bool:
    return ord(ch) > 0x2E7F


def join_wrapped(lines: Iterable[str]) -> str:
    """Join hard-wrapped lines of one paragraph: no space between CJK neighbours, one space otherwise."""
    out = ""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if out and not (_is_cjk_or_punct(out[-1]) or _is_cjk_or_punct(line[0])):
            out += " "
        out += line
    return out


def clause_pairs(text: str, min_han: int = 8) -> set[str]:
    """Consecutive pairs of Han-only clauses (a poem couplet, two news clauses) with >= ``min_han`` chars.

    Used to keep held-out texts out of pretraining even when another source quotes them with different
    punctuation or line breaks (a Tang poem in ``fortunes-zh`` vs. the held-out poetry split).
    """
    clauses = [c for c in _CLAUSE_SPLIT_RE.split(text) if c]
    keys = set()
    for a, b in zip(clauses, clauses[1:]):
        if len(a) + len(b) >= min_han:
            keys.add(a + b)
    if not keys and len(clauses) == 1 and len(clauses[0]) >= min_han:
        keys.add(clauses[0])
    return keys


class Deduper:
    """Exact deduplication by an 8-byte BLAKE2b digest of the (already normalised) text.

    >>> d = Deduper()
    >>> [d.add(x) for x in ["甲", "乙", "甲"]]
    [True, True, False]
    """

    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()

    def add(self, text: str) -> bool:
        """Record ``text``; return True if it was new."""
        k = self.key(text)
        if k in self._seen:
            return False
        self._seen.add(k)
        return True

    def __contains__(self, text: str) -> bool:
        return self.key(text) in self._seen

    def __len__(self) -> int:
        return len(self._seen)


# --------------------------------------------------------------------------------------------- groff

# Font macros: their arguments are running text inside the current paragraph.
_GROFF_INLINE_MACROS = {
    "B", "I", "R", "BI", "BR", "IB", "IR", "RB", "RI", "SB", "SM", "Ar", "Fl", "Pa", "Dv", "Em", "Cm",
    "Ic", "Va", "Xr", "Op", "Ql", "Dq", "Sq", "Li", "Nm",
}  # fmt: skip
_GROFF_ALTERNATING = {"BI", "BR", "IB", "IR", "RB", "RI"}
# Headings / item tags: their arguments form a paragraph of their own.
_GROFF_HEADING_MACROS = {"SH", "SS", "Sh", "Ss", "Nd", "IP", "TP", "It"}
# Requests that end the current paragraph (anything else, e.g. .ft/.ds/.nr/.TH/.so, is dropped silently).
_GROFF_BREAKS = {
    "br", "sp", "bp", "PP", "LP", "P", "HP", "RS", "RE", "in", "ti", "ce", "TS", "TE", "Pp", "Bl", "El",
    "Bd", "Ed", "Dl", "D1", "UR", "UE", "MT", "ME", "TH",
}  # fmt: skip
_GROFF_SPECIAL = {
    "em": "—", "en": "–", "hy": "-", "lq": "“", "rq": "”", "oq": "‘", "cq": "’", "dq": '"', "aq": "'",
    "bu": "•", "co": "©", "rg": "®", "tm": "™", "mu": "×", "di": "÷", "+-": "±", "<=": "≤", ">=": "≥",
    "bv": "|", "or": "|", "!=": "≠", "->": "→", "<-": "←", "de": "°", "ti": "~", "ha": "^", "rs": "\\", "sl": "/", "ba": "|",
    "lB": "[", "rB": "]", "lC": "{", "rC": "}", "la": "⟨", "ra": "⟩", "Fo": "«", "Fc": "»",
}  # fmt: skip
_GROFF_ESCAPE_RE = re.compile(
    r"""\\(?:
        \(([^\s]{2})            # \(xx special character
      | \[([^\]]*)\]            # \[name] special character
      | [fF](?:\(..|\[[^\]]*\]|.)   # font change
      | s[-+]?(?:\(\d\d|\[\d+\]|\d)  # size change
      | \*(?:\(..|\[[^\]]*\]|.)    # string interpolation
      | [nkg](?:\(..|\[[^\]]*\]|.)  # registers
      | [hvwlLxXHDbNoSRzZ]'[^']*'   # escapes with a quoted argument
      | (.)                     # any other single-char escape
    )""",
    re.VERBOSE,
)
_GROFF_SINGLE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "t": " ", ".": ".", "'": "'"}


def _groff_inline(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return _GROFF_SPECIAL.get(m.group(1), "")
        if m.group(2) is not None:
            name = m.group(2)
            if name.startswith("u") and re.fullmatch(r"u[0-9A-Fa-f]{4,6}", name):
                return chr(int(name[1:], 16))
            return _GROFF_SPECIAL.get(name, "")
        if m.group(3) is not None:
            return _GROFF_SINGLE.get(m.group(3), "")  # \& \/ \, \| \^ \c ... -> nothing
        return ""

    text = text.split('\\"', 1)[0]  # comment to end of line
    return _GROFF_ESCAPE_RE.sub(sub, text)


def _macro_args(rest: str) -> list[str]:
    args, cur, quoted = [], "", False
    for ch in rest:
        if ch == '"':
            quoted = not quoted
        elif ch in " \t" and not quoted:
            if cur:
                args.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        args.append(cur)
    return args


def groff_to_paragraphs(source: str) -> list[str]:
    """Turn a man page (groff/mdoc source) into plain-text paragraphs.

    Comments and layout requests are dropped; font macros (``.B``, ``.IR`` ...) stay inline in their
    paragraph; headings and item tags (``.SH``, ``.TP``'s next line, ``.IP`` tag) become paragraphs of
    their own; inline escapes (fonts, sizes, ``\\-``, ``\\(em``) are resolved; a paragraph ends at
    breaking requests (``.PP``, ``.br``, ``.sp`` ...) and blank lines, and its wrapped lines are joined
    with :func:`join_wrapped`.  No-fill blocks (``.nf`` ... ``.fi``: code examples) keep one line each.
    """
    paragraphs: list[str] = []
    cur: list[str] = []
    nofill = False
    tag_line = False  # the first text line after .TP is the item's tag: its own paragraph

    def flush() -> None:
        if cur:
            text = join_wrapped(cur)
            if text:
                paragraphs.append(text)
            cur.clear()

    for raw in source.splitlines():
        if raw.startswith((".", "'")):
            body = raw[1:].lstrip()
            if body.startswith(('\\"', '"')) or not body:
                continue  # comment or empty request
            name, _, rest = body.partition(" ")
            name = name.strip()
            args = [_groff_inline(a) for a in _macro_args(rest)]
            if name in ("nf", "EX"):
                flush()
                nofill = True
            elif name in ("fi", "EE"):
                flush()
                nofill = False
            elif name in _GROFF_INLINE_MACROS:
                text = ("" if name in _GROFF_ALTERNATING else " ").join(args).strip()
                if text:
                    cur.append(text)
                    if nofill or tag_line:
                        flush()
                        tag_line = False
            elif name in _GROFF_HEADING_MACROS:
                flush()
                if name in ("IP", "TP", "It"):
                    args = args[:1]  # the tag; an indent argument is layout
                text = " ".join(args).strip()
                if text:
                    paragraphs.append(text)
                tag_line = name == "TP"
            elif name in _GROFF_BREAKS:
                flush()
            continue
        line = _groff_inline(raw)
        if not line.strip():
            flush()
            continue
        cur.append(line)
        if nofill or tag_line:
            flush()
            tag_line = False
    flush()
    return paragraphs


# ---------------------------------------------------------------------------------------------- html

_BLOCK_TAGS = {
    "p", "div", "br", "li", "ul", "ol", "table", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6",
    "pre", "section", "article", "blockquote", "dd", "dt", "dl", "title", "caption", "hr",
}  # fmt: skip
_SKIP_TAGS = {"script", "style", "noscript", "head", "header", "footer", "nav", "aside", "button", "input"}
_VOID_TAGS = {"br", "hr", "img", "input", "meta", "link", "base", "area", "col", "embed", "source", "wbr"}


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._buf: list[str] = []
        self._skip = 0
        self._stack: list[str] = []

    def _flush(self) -> None:
        text = _SPACE_RE.sub(" ", "".join(self._buf)).strip()
        if text:
            self.paragraphs.append(text)
        self._buf.clear()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID_TAGS:
            if tag in _BLOCK_TAGS:
                self._flush()
            return
        self._stack.append(tag)
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID_TAGS or tag not in self._stack:
            return
        while self._stack:  # close everything up to the matching tag (tolerates sloppy HTML)
            open_tag = self._stack.pop()
            if open_tag in _SKIP_TAGS:
                self._skip -= 1
            if open_tag == tag:
                break
        if tag in _BLOCK_TAGS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self._buf.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def html_to_paragraphs(html: str) -> list[str]:
    """Visible text of an HTML page, one string per block element (p, li, td, h1..h6, ...).

    ``<head>``, scripts, styles and navigation chrome (header/nav/aside/footer, buttons) are skipped;
    entities are decoded; whitespace inside a block is collapsed.
    """
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return parser.paragraphs


def iter_clean_lines(
    paragraphs: Iterable[str],
    *,
    min_chars: int = 5,
    max_chars: int = 400,
    min_han: int = 2,
    min_han_ratio: float = 0.1,
) -> Iterator[str]:
    """Normalise, cut into chunks of at most ``max_chars`` (`chunk_text`), keep those long enough and Chinese enough.

    A piece survives with >= ``min_chars`` characters, >= ``min_han`` Han characters and a Han share of
    at least ``min_han_ratio`` (drops untranslated English help pages and code listings).
    """
    for para in paragraphs:
        text = normalize_text(para)
        if not text:
            continue
        for piece in chunk_text(text, max_chars):
            if len(piece) < min_chars:
                continue
            n_han = han_count(piece)
            if n_han >= min_han and n_han >= min_han_ratio * len(piece):
                yield piece
