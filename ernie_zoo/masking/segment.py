"""Word segmentation (phrase units) and POS-tag entity spans, via rjieba (Rust) with a jieba fallback.

    >>> seg = Segmenter()
    >>> seg.spans("我爱北京天安门")
    [(0, 1), (1, 2), (2, 4), (4, 7)]
    >>> seg.pos_entity_spans("李克强在北京会见外宾")  # nr / ns / nt / nz words
    [(0, 3), (4, 6)]

rjieba is jieba's algorithm and dictionary in Rust: segmenting 5,000 review sentences takes 0.09 s and
POS-tagging them 0.13 s, where `jieba.posseg` needs about 13 s per 10,000 sentences. jieba (pure Python)
is used only when rjieba is not installed or `backend="jieba"` is asked for.

A user dictionary uses jieba's format, one word per line: `word [freq] [tag]`. Without a frequency the
word gets jieba's `suggest_freq` (the frequency needed for it to be cut as one word), so every user word
comes out whole; with a tag in {nr, ns, nt, nz} it also becomes a POS entity.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Sequence

logger = logging.getLogger(__name__)

__all__ = ["ENTITY_POS_TAGS", "Segmenter", "read_user_dict"]

#: jieba's proper-noun tags: person, place, organisation, other proper noun.
ENTITY_POS_TAGS = ("nr", "ns", "nt", "nz")

UserDictEntry = tuple[str, "int | None", "str | None"]


def read_user_dict(source: str | os.PathLike | Iterable[str]) -> list[UserDictEntry]:
    """Parse a jieba-format user dictionary (a path, or an iterable of lines / words) into
    `(word, freq or None, tag or None)` entries."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as f:
            lines: Iterable[str] = f.read().splitlines()
    else:
        lines = source
    entries: list[UserDictEntry] = []
    for number, line in enumerate(lines, 1):
        if not isinstance(line, str):
            raise TypeError(f"user dictionary line {number}: expected str, got {type(line).__name__}")
        parts = line.strip().split()
        if not parts or parts[0].startswith("#"):
            continue
        word, freq, tag = parts[0], None, None
        for part in parts[1:3]:
            if part.isdigit() and freq is None:
                freq = int(part)
            else:
                tag = part
        entries.append((word, freq, tag))
    return entries


class Segmenter:
    """Cuts text into word units (character spans covering the whole text) and finds POS-tag entities.

    Args:
        backend: "auto" (rjieba if importable, else jieba), "rjieba" or "jieba".
        user_dict: a jieba-format user dictionary: a path, or an iterable of lines such as `"云计算平台 nz"`.
        hmm: let jieba's HMM join out-of-vocabulary characters into words.
        entity_tags: the POS tags that `pos_entity_spans` treats as entities.

    Picklable (the backend is rebuilt lazily in each process), so it can be handed to `datasets.map`
    with `num_proc > 1`.
    """

    def __init__(
        self,
        backend: str = "auto",
        user_dict: str | os.PathLike | Iterable[str] | None = None,
        hmm: bool = True,
        entity_tags: Sequence[str] = ENTITY_POS_TAGS,
    ):
        if backend not in ("auto", "rjieba", "jieba"):
            raise ValueError(f"backend must be 'auto', 'rjieba' or 'jieba', got {backend!r}")
        if backend == "auto":
            try:
                import rjieba  # noqa: F401

                backend = "rjieba"
            except ImportError:  # pragma: no cover - rjieba is a dependency; kept for slim installs
                logger.warning("rjieba is not installed; falling back to jieba (much slower POS tagging)")
                backend = "jieba"
        self.backend = backend
        self.hmm = hmm
        self.entity_tags = frozenset(entity_tags)
        self.user_words: list[UserDictEntry] = read_user_dict(user_dict) if user_dict is not None else []
        self._impl = None

    # ------------------------------------------------------------------ backend
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_impl"] = None  # neither rjieba.Jieba nor jieba.Tokenizer pickles
        return state

    def fingerprint(self) -> str:
        """A stable hash of the configuration (for cache keys)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((self.backend, self.hmm, sorted(self.entity_tags), self.user_words)).encode())
        return h.hexdigest()

    def _backend(self):
        if self._impl is not None:
            return self._impl
        if self.backend == "rjieba":
            import rjieba

            if self.user_words:
                impl = rjieba.Jieba()
                for word, freq, tag in self.user_words:
                    impl.add_word(word, freq if freq is not None else max(1, impl.suggest_freq(word)), tag)
            else:
                impl = rjieba._DEFAULT_JIEBA  # shared, read-only use
        else:
            import jieba

            impl = jieba.Tokenizer()
            impl.initialize()
            for word, freq, tag in self.user_words:
                impl.add_word(word, freq if freq is not None else impl.suggest_freq(word), tag)
        self._impl = impl
        return impl

    # ------------------------------------------------------------------ API
    def cut(self, text: str) -> list[str]:
        """The words of `text` (their concatenation is `text`)."""
        impl = self._backend()
        if self.backend == "rjieba":
            return impl.cut(text, self.hmm)
        return list(impl.cut(text, HMM=self.hmm))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Word units as `(start, end)` character spans, contiguous and covering all of `text`."""
        impl = self._backend()
        if self.backend == "rjieba":
            return [(s, e) for _, s, e in impl.tokenize(text, "default", self.hmm)]
        return [(s, e) for _, s, e in impl.tokenize(text, HMM=self.hmm)]

    def tag(self, text: str) -> list[tuple[str, str]]:
        """`(word, POS tag)` pairs."""
        impl = self._backend()
        if self.backend == "rjieba":
            return impl.tag(text, self.hmm)
        import jieba.posseg

        tagger = jieba.posseg.POSTokenizer(impl)
        return [(p.word, p.flag) for p in tagger.cut(text, HMM=self.hmm)]

    def pos_entity_spans(self, text: str) -> list[tuple[int, int]]:
        """Spans of the words whose POS tag is in `entity_tags` (default nr, ns, nt, nz)."""
        spans, pos = [], 0
        for word, tag in self.tag(text):
            if tag in self.entity_tags:
                spans.append((pos, pos + len(word)))
            pos += len(word)
        return spans
