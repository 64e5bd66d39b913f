"""SKEP's sentiment masking unit: sentiment words matched as whole words, so 好 is found in 很好 but not in 好像:

>>> words = SentimentWords({"好": 1, "不错": 1, "糟糕": -1})
>>> words.find("质量不错，服务好像很糟糕", boundaries={0, 2, 4, 5, 7, 9, 10, 12})  # 好像 is one word
[(2, 4, 1), (10, 12, -1)]
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Container, Mapping

from ernie_zoo.text.lexicon import AhoCorasick
from ernie_zoo.text.sentiment import load_sentiment_lexicon

__all__ = ["SentimentWords"]


class SentimentWords:
    """Sentiment words with their polarity (+1 positive, -1 negative), matched as whole words.

    Matching is `EntityLexicon.find`'s (leftmost-longest, non-overlapping Aho-Corasick) restricted to matches that
    start and end on the given word boundaries, so a sentiment word is found only where the segmenter cuts the
    text into it (one word, or several whole words for a longer entry), never inside another word.

    Args:
        entries: word -> polarity (+1 / -1; any other value is an error).
        min_length: ignore words shorter than this many characters.
    """

    def __init__(self, entries: Mapping[str, int], min_length: int = 1):
        if not isinstance(entries, Mapping):
            raise TypeError(
                "SentimentWords expects a mapping word -> polarity (+1 / -1); use SentimentWords.from_file(path) "
                "to read a lexicon file"
            )
        if min_length < 1:
            raise ValueError(f"min_length must be >= 1, got {min_length}")
        self.polarity: dict[str, int] = {}
        for word, polarity in entries.items():
            if not isinstance(word, str):
                raise TypeError(f"sentiment words must be str, got {type(word).__name__}: {word!r}")
            if polarity not in (1, -1) or isinstance(polarity, bool):
                raise ValueError(f"polarity of {word!r} must be +1 or -1, got {polarity!r}")
            word = word.strip()
            if len(word) >= min_length:
                self.polarity[word] = int(polarity)
        self.min_length = min_length
        self._matcher = AhoCorasick(self.polarity)

    @classmethod
    def from_file(cls, path: str | os.PathLike, min_sources: int = 1, min_length: int = 1) -> SentimentWords:
        """The sentiment words of a lexicon written by `python -m ernie_zoo.data.sentiment_lexicon` (negators and
        degree adverbs have no polarity and are left out); `min_sources` keeps only the words at least that many
        of its sources agree on (`ernie_zoo.text.sentiment.load_sentiment_lexicon`)."""
        lexicon = load_sentiment_lexicon(path, min_sources=min_sources)
        words = {word: polarity for word, (polarity, _strength) in lexicon.words.items()}
        if not words:
            raise ValueError(
                f"{path}: the sentiment lexicon has no sentiment words (min_sources={min_sources})"
            )
        return cls(words, min_length=min_length)

    def __len__(self) -> int:
        return len(self.polarity)

    def __contains__(self, word: object) -> bool:
        return word in self.polarity

    def __reduce__(self):
        return (type(self), (self.polarity, self.min_length))

    def fingerprint(self) -> str:
        """A stable hash of the words and polarities (for cache keys)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(b"sentiment\n")
        for word in sorted(self.polarity):
            h.update(f"{word}\t{self.polarity[word]}\n".encode())
        h.update(str(self.min_length).encode())
        return h.hexdigest()

    def find(self, text: str, boundaries: Container[int] | None = None) -> list[tuple[int, int, int]]:
        """`(start, end, polarity)` of the sentiment words in `text`, leftmost-longest and non-overlapping, among
        the matches whose start and end are in `boundaries` (every match if None)."""
        return [(s, e, self.polarity[text[s:e]]) for s, e in self._matcher.find_longest(text, boundaries)]
