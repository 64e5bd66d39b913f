"""Entity lexicons: one set of (optionally typed) names, matched two ways.

    >>> lex = EntityLexicon({"北京": "LOC", "北京大学": "ORG", "大学生": None, "王小明": "PER"})
    >>> lex.find("北京大学生在清华大学")  # leftmost-longest, non-overlapping: entity masking's spans
    [(0, 4)]
    >>> [lex.describe(f) for f in lex.char_features("王小明在北京")]  # every match: the NER tagger's input bits
    ['PER-B', 'PER-M', 'PER-E', '', 'LOC-B', 'LOC-E']

`find` (entity masking, `ernie_zoo.masking`): leftmost-longest, non-overlapping spans on the text as given, by a
pure-Python Aho-Corasick automaton (pyahocorasick's `iter_long` rule: `北京大学` wins over `北京`, and `大学生` overlaps
it and is dropped); 100k entries build in about a second and match about a million characters a second.

`char_features` / `token_features` (the CRF tagger's `lexicon_ids`, `ernie_zoo.models.crf_tagger`): every match of
two or more characters, overlapping ones too, on the text converted to Simplified (`to_simplified`, one character to
one, so offsets stay valid) sets three bits per type on its characters: begins (B), inside (M), ends (E).

`load` reads two formats: the typed one `save` writes (`entity_lexicon.txt` next to a tagger's weights, `python -m
ernie_zoo.data.lexicon`), a first line ``# ernie-zoo entity lexicon: PER LOC ORG`` naming the types in bit order
then ``word<TAB>TYPE[,TYPE]`` lines; and a plain list (entity masking's `data.lexicon`), one entity per line, maybe
followed by whitespace and its type(s), blank and ``#`` lines skipped, its types the sorted names it uses.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence

from .traditional import to_simplified

__all__ = ["AhoCorasick", "EntityLexicon", "token_masks"]

_HEADER = "# ernie-zoo entity lexicon:"


def token_masks(
    chars: Sequence[int], offsets: Sequence[tuple[int, int] | None], special: Sequence[int] | None = None
) -> list[int]:
    """Per-character bit masks `chars` as one mask per token (`offsets`: its characters): the OR over its
    characters; 0 for special tokens and tokens without characters (offsets (0, 0) or None)."""
    out = []
    for t, span in enumerate(offsets):
        value = 0
        if span is not None and not (special is not None and special[t]):
            for c in range(span[0], min(span[1], len(chars))):
                value |= chars[c]
        out.append(value)
    return out


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
    """Entity names, each with a set of types (possibly none).

    Args:
        words: entity strings (untyped), or a mapping word -> its types: None, a type name (``"LOC"``, or
            ``"LOC,ORG"`` for several) or an iterable of type names.
        types: the type names in bit order; every word's types must be among them. None: the sorted names the
            words use.
        min_length: leave out words shorter than this many characters (single characters are rarely useful
            entities and would turn entity masking into character masking; features ignore them anyway).

    Words are stripped of surrounding whitespace; words with a tab or a line break are left out (they would break
    the file). A word given twice keeps the types of its last occurrence.
    """

    def __init__(
        self,
        words: Iterable[str] | Mapping[str, str | Iterable[str] | None],
        types: Sequence[str] | None = None,
        min_length: int = 1,
    ):
        if isinstance(words, (str, bytes)):
            raise TypeError(
                "EntityLexicon expects an iterable of entity strings, not a single string; "
                "use EntityLexicon.load(path) to read a file"
            )
        if min_length < 1:
            raise ValueError(f"min_length must be >= 1, got {min_length}")
        pairs = words.items() if isinstance(words, Mapping) else ((w, None) for w in words)
        items = [(word, _type_names(t)) for word, t in pairs]
        if types is None:
            types = sorted({t for _, names in items for t in names})
        self.types = tuple(types)
        if len(set(self.types)) != len(self.types):
            raise ValueError(f"lexicon types must be distinct, got {list(types)}")
        self.min_length = min_length
        self._index = {t: i for i, t in enumerate(self.types)}
        self.words: dict[str, int] = {}  # word -> bit mask of its types (bit k: self.types[k])
        for word, names in items:
            self._add(word, names)
        self._matcher: AhoCorasick | None = None  # built on first use: entity masking's `find`
        self._pairs: tuple[dict[str, tuple[int, ...]], list[int]] | None = None  # and the tagger's features

    def _add(self, word: str, names: Iterable[str]) -> None:
        if not isinstance(word, str):
            raise TypeError(f"entity entries must be str, got {type(word).__name__}: {word!r}")
        word = word.strip()
        if len(word) < self.min_length or any(c in word for c in "\t\n\r"):
            return
        mask = 0
        for t in names:
            if t not in self._index:
                raise ValueError(f"lexicon word {word!r} has type {t!r}, not one of {list(self.types)}")
            mask |= 1 << self._index[t]
        self.words[word] = mask

    def _names(self, mask: int) -> tuple[str, ...]:
        return tuple(t for k, t in enumerate(self.types) if mask >> k & 1)

    def _label(self, word: str) -> str | None:  # "LOC", "LOC,ORG" or None (a plain list's type column)
        return ",".join(self._names(self.words[word])) or None

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.words

    def __reduce__(self):
        # Rebuild from the entries (the matchers are cheap to rebuild and much larger to pickle).
        words = {word: self._names(mask) for word, mask in self.words.items()}
        return (type(self), (words, self.types, self.min_length))

    def entries(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """(word, its type names) for every word, in sorted word order."""
        for word in sorted(self.words):
            yield word, self._names(self.words[word])

    def same_as(self, other: EntityLexicon | None) -> bool:
        """Whether `other` holds the same words with the same types (so it gives every text the same features)."""
        return other is not None and self.types == other.types and self.words == other.words

    def with_words(self, words: Mapping[str, Iterable[str]]) -> EntityLexicon:
        """A copy with `words` (word -> types) added; this lexicon is left as it is."""
        merged: dict[str, set[str]] = {word: set(types) for word, types in self.entries()}
        for word, types in words.items():
            merged.setdefault(word, set()).update(types)
        return EntityLexicon(merged, self.types, self.min_length)

    def fingerprint(self) -> str:
        """A stable hash of the entries, their types and `min_length` (for cache keys)."""
        h = hashlib.blake2b(digest_size=16)
        for word in sorted(self.words):
            h.update(f"{word}\t{self._label(word)}\n".encode())
        h.update(str(self.min_length).encode())
        return h.hexdigest()

    # ----------------------------------------------------------------- entity masking
    def find(self, text: str) -> list[tuple[int, int]]:
        """Leftmost-longest, non-overlapping entity spans in `text` as `(start, end)` character offsets."""
        if self._matcher is None:
            self._matcher = AhoCorasick(self.words)
        return self._matcher.find_longest(text)

    def find_typed(self, text: str) -> list[tuple[int, int, str | None]]:
        """Like `find`, with each span's types (``"LOC"``, ``"LOC,ORG"``; None if it has none)."""
        return [(s, e, self._label(text[s:e])) for s, e in self.find(text)]

    # ----------------------------------------------------------------- tagger features
    @property
    def num_features(self) -> int:
        """Bits per position: B, M and E for each type."""
        return 3 * len(self.types)

    def char_features(self, text: str) -> list[int]:
        """One bit mask per character of `text`: bit 3k / 3k+1 / 3k+2 = begins / inside / ends a type-k match."""
        if self._pairs is None:
            # Word lengths by their first two characters: most character pairs of a text begin no word, so one
            # dictionary probe per position rules them out.
            lengths: dict[str, set[int]] = {}
            for word in self.words:
                if len(word) >= 2:
                    lengths.setdefault(word[:2], set()).add(len(word))
            shared: dict[tuple[int, ...], tuple[int, ...]] = {}
            pairs = {
                pair: shared.setdefault(key, key)
                for pair, ls in lengths.items()
                for key in [tuple(sorted(ls))]
            }
            # type mask -> its B bits (bit 3k for each type k in the mask)
            spread = [
                sum(1 << (3 * k) for k in range(len(self.types)) if mask >> k & 1)
                for mask in range(1 << len(self.types))
            ]
            self._pairs = pairs, spread
        pairs, spread = self._pairs
        simple = to_simplified(text)
        out = [0] * len(text)
        for i in range(len(simple) - 1):
            for n in pairs.get(simple[i : i + 2], ()):
                if i + n > len(simple):
                    break  # lengths are sorted; a shorter slice at the end must not match a shorter word
                types = self.words.get(simple[i : i + n])
                if types is None:
                    continue
                begin = spread[types]  # the B bits of its types; I bits are one higher, E bits two
                out[i] |= begin
                out[i + n - 1] |= begin << 2
                for j in range(i + 1, i + n - 1):
                    out[j] |= begin << 1
        return out

    def token_features(
        self, text: str, offsets: Sequence[tuple[int, int] | None], special: Sequence[int] | None = None
    ) -> list[int]:
        """`lexicon_ids` of one encoding: the OR of its characters' masks per token; 0 for special tokens and
        tokens without characters (offsets (0, 0) or None)."""
        return token_masks(self.char_features(text), offsets, special)

    def describe(self, mask: int) -> str:
        """`PER-B,LOC-E`-style text of a feature mask (for reading features, not for the model)."""
        bits = enumerate(f"{t}-{p}" for t in self.types for p in "BME")
        return ",".join(name for b, name in bits if mask >> b & 1)

    # ----------------------------------------------------------------- files
    def save(self, path: str | os.PathLike) -> None:
        """Write the lexicon in the typed format, atomically (sorted, so the file's checksum is stable)."""
        from ernie_zoo.utils import atomic_write_text

        lines = [f"{_HEADER} {' '.join(self.types)}"]
        lines += [word + "\t" + ",".join(types) if types else word for word, types in self.entries()]
        atomic_write_text(path, "\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike, min_length: int = 1) -> EntityLexicon:
        """Read a lexicon file of either format (see the module's docstring); UTF-8."""
        typed, plain = None, {}
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                try:
                    if n == 1 and line.startswith(_HEADER):
                        typed = cls({}, line[len(_HEADER) :].split(), min_length)
                    elif typed is None:  # a plain list
                        parts = line.split()
                        if parts and not parts[0].startswith("#"):
                            plain[parts[0]] = parts[1] if len(parts) > 1 else None
                    elif line := line.rstrip("\n"):
                        word, _, kinds = line.partition("\t")
                        if typed.types and not kinds:
                            raise ValueError(f"expected 'word<TAB>TYPE[,TYPE]', got {line!r}")
                        typed._add(word, kinds.split(",") if kinds else ())
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: {exc}") from None
        if typed is None and not plain:
            raise ValueError(f"{path}: the entity lexicon is empty")
        return typed if typed is not None else cls(plain, min_length=min_length)


def _type_names(types: str | Iterable[str] | None) -> tuple[str, ...]:
    """A word's types as given to `EntityLexicon`: None, ``"LOC"`` / ``"LOC,ORG"``, or an iterable of names."""
    return () if types is None else tuple(types.split(",") if isinstance(types, str) else types)
