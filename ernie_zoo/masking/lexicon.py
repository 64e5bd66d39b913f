"""Entity lexicon matching with an Aho-Corasick automaton (leftmost-longest, non-overlapping).

    >>> lex = EntityLexicon(["北京", "北京大学", "大学生", "清华大学"])
    >>> lex.find("北京大学生在清华大学")
    [(0, 4), (6, 10)]

`北京大学` wins over `北京` (longest at the leftmost start) and `大学生` is dropped because it overlaps the
match already taken, the same rule as pyahocorasick's `iter_long` and regex leftmost-longest alternation.
The automaton is pure Python (one dict per trie node); building 100k entries takes about a second and
matching runs at roughly a million characters per second, which is fine for a one-off, multi-process
preprocessing pass.

`SentimentWords` (SKEP's sentiment masking unit) matches a sentiment lexicon the same way, keeping only
matches that start and end on word boundaries of the segmenter, so 好 is found in 很好 but not in 好像:

    >>> words = SentimentWords({"好": 1, "不错": 1, "糟糕": -1})
    >>> words.find("质量不错，服务好像很糟糕", boundaries={0, 2, 4, 5, 7, 9, 10, 12})  # 好像 is one word
    [(2, 4, 1), (10, 12, -1)]
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Container, Iterable, Iterator, Mapping

__all__ = ["AhoCorasick", "EntityLexicon", "SentimentWords"]


class AhoCorasick:
    """A multi-pattern string matcher over Python strings (code points).

    Args:
        patterns: the strings to find; empty strings are ignored, duplicates are kept once.
    """

    def __init__(self, patterns: Iterable[str]):
        self._goto: list[dict[str, int]] = [{}]
        self._fail: list[int] = [0]
        # length of the pattern that ends exactly at this node (0 if none)
        self._length: list[int] = [0]
        # next node on the failure chain whose `_length` is non-zero (-1 if none): the "dictionary link"
        self._dict_link: list[int] = [-1]
        self._count = 0
        for pattern in patterns:
            self._add(pattern)
        self._build()

    def __len__(self) -> int:
        return self._count

    def _add(self, pattern: str) -> None:
        if not isinstance(pattern, str):
            raise TypeError(f"patterns must be str, got {type(pattern).__name__}: {pattern!r}")
        if not pattern:
            return
        node = 0
        for ch in pattern:
            nxt = self._goto[node].get(ch)
            if nxt is None:
                nxt = len(self._goto)
                self._goto[node][ch] = nxt
                self._goto.append({})
                self._fail.append(0)
                self._length.append(0)
                self._dict_link.append(-1)
            node = nxt
        if self._length[node] == 0:
            self._count += 1
        self._length[node] = len(pattern)

    def _build(self) -> None:
        goto, fail, length, link = self._goto, self._fail, self._length, self._dict_link
        queue = deque(goto[0].values())
        while queue:
            node = queue.popleft()
            f = fail[node]
            link[node] = f if length[f] else link[f]
            for ch, child in goto[node].items():
                queue.append(child)
                g = f
                while g and ch not in goto[g]:
                    g = fail[g]
                fail[child] = goto[g].get(ch, 0)

    def iter_matches(self, text: str) -> Iterator[tuple[int, int]]:
        """Every occurrence of every pattern, overlapping ones included, as `(start, end)` character
        offsets, in order of their end position."""
        goto, fail, length, link = self._goto, self._fail, self._length, self._dict_link
        node = 0
        for i, ch in enumerate(text):
            while node and ch not in goto[node]:
                node = fail[node]
            node = goto[node].get(ch, 0)
            out = node if length[node] else link[node]
            while out > 0:
                yield i + 1 - length[out], i + 1
                out = link[out]

    def find_longest(self, text: str, boundaries: Container[int] | None = None) -> list[tuple[int, int]]:
        """Leftmost-longest, non-overlapping matches as sorted `(start, end)` character offsets.

        boundaries: if given, only matches whose start and end offsets are both in it count (e.g. the word
        boundaries of a segmentation, so that a pattern never matches part of a word)."""
        best: dict[int, int] = {}
        for start, end in self.iter_matches(text):
            if boundaries is not None and (start not in boundaries or end not in boundaries):
                continue
            if end > best.get(start, -1):
                best[start] = end
        spans = []
        cursor = 0
        for start in sorted(best):
            if start >= cursor:
                spans.append((start, best[start]))
                cursor = best[start]
        return spans


class EntityLexicon:
    """A set of entity strings (optionally typed) matched leftmost-longest, non-overlapping.

    Args:
        entries: entity strings, or a mapping entity -> type (e.g. `{"北京": "LOC"}`).
        min_length: ignore entries shorter than this many characters (single characters are rarely useful
            entities and would turn entity masking into character masking).

    Matching is exact on the text as given (no case folding or normalisation), so build the lexicon in the
    same script and form as the corpus.
    """

    def __init__(self, entries: Iterable[str] | Mapping[str, str | None], min_length: int = 1):
        if isinstance(entries, (str, bytes)):
            raise TypeError(
                "EntityLexicon expects an iterable of entity strings, not a single string; "
                "use EntityLexicon.from_file(path) to read a file"
            )
        if min_length < 1:
            raise ValueError(f"min_length must be >= 1, got {min_length}")
        items = entries.items() if isinstance(entries, Mapping) else ((e, None) for e in entries)
        self.types: dict[str, str | None] = {}
        for entity, label in items:
            if not isinstance(entity, str):
                raise TypeError(f"entity entries must be str, got {type(entity).__name__}: {entity!r}")
            entity = entity.strip()
            if len(entity) >= min_length:
                self.types[entity] = label
        self.min_length = min_length
        self._matcher = AhoCorasick(self.types)

    @classmethod
    def from_file(cls, path: str | os.PathLike, min_length: int = 1) -> EntityLexicon:
        """Read one entity per line, optionally followed by whitespace and a type (`北京大学\\tORG`);
        blank lines and lines starting with `#` are skipped. The file must be UTF-8."""
        entries: dict[str, str | None] = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                parts = line.split()
                entries[parts[0]] = parts[1] if len(parts) > 1 else None
        if not entries:
            raise ValueError(f"{path}: the entity lexicon is empty")
        return cls(entries, min_length=min_length)

    def __len__(self) -> int:
        return len(self.types)

    def __contains__(self, entity: object) -> bool:
        return entity in self.types

    def __reduce__(self):
        # Rebuild from the entries (the automaton is cheap to rebuild and much larger to pickle).
        return (type(self), (self.types, self.min_length))

    def fingerprint(self) -> str:
        """A stable hash of the entries and types (for cache keys)."""
        h = hashlib.blake2b(digest_size=16)
        for entity in sorted(self.types):
            h.update(f"{entity}\t{self.types[entity]}\n".encode())
        h.update(str(self.min_length).encode())
        return h.hexdigest()

    def find(self, text: str) -> list[tuple[int, int]]:
        """Leftmost-longest, non-overlapping entity spans in `text` as `(start, end)` character offsets."""
        return self._matcher.find_longest(text)

    def find_typed(self, text: str) -> list[tuple[int, int, str | None]]:
        """Like `find`, with each span's entity type (None if the lexicon has no types)."""
        return [(s, e, self.types[text[s:e]]) for s, e in self.find(text)]


class SentimentWords:
    """Sentiment words with their polarity (+1 positive, -1 negative), matched as whole words.

    Matching is `EntityLexicon`'s (leftmost-longest, non-overlapping Aho-Corasick) restricted to matches that
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
        of its sources agree on (`ernie_zoo.data.sentiment_lexicon.load_sentiment_lexicon`)."""
        from ernie_zoo.data.sentiment_lexicon import load_sentiment_lexicon

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
