"""Entity lexicon features for NER: which characters begin, continue or end a known name of each type.

    >>> lex = EntityLexicon({"北京": {"LOC"}, "王小明": {"PER"}}, types=("PER", "LOC", "ORG"))
    >>> [lex.describe(f) for f in lex.char_features("王小明在北京")]
    ['PER-B', 'PER-M', 'PER-E', '', 'LOC-B', 'LOC-E']

Every lexicon word of two or more characters found anywhere in the text counts (overlapping matches too), so
a character carries, per entity type, three bits: begins a match (B), inside one (M), ends one (E). With T
types a token's feature is a 3T-bit integer, `lexicon_ids` (B, T) next to `input_ids`; the tagger turns the
bits into a vector added to its input embeddings (`ErnieZooForTokenClassificationCRF`). The lexicon only
suggests: a match of 高明 in 高明的办法 is not a name, and the model learns from context when to trust it.
Names missing from every lexicon are the case the model must still find alone.

Matching runs on the text converted to Simplified characters (`to_simplified`, one character to one), so
Traditional input finds the same names and the offsets stay valid.

File format (`entity_lexicon.txt`, saved next to the model weights): a first line
``# ernie-zoo entity lexicon: PER LOC ORG`` naming the types in bit order, then one ``word<TAB>TYPE[,TYPE]``
per line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from ernie_zoo.utils import atomic_write_text

from .traditional import to_simplified

__all__ = ["JIEBA_NAME_TYPES", "LEXICON_FILE", "EntityLexicon", "find_lexicon"]

LEXICON_FILE = "entity_lexicon.txt"
#: jieba's POS tags of names and the entity type each stands for (the lexicon builder, NER user_dict tags).
JIEBA_NAME_TYPES = {"nr": "PER", "nrt": "PER", "nrfg": "PER", "ns": "LOC", "nt": "ORG"}
_HEADER = "# ernie-zoo entity lexicon:"
_PARTS = ("B", "M", "E")


def find_lexicon(model_name_or_path: str | os.PathLike, **hub_kwargs) -> str | None:
    """Path of the `entity_lexicon.txt` saved with a model (a local directory, or a hub repo through the hub
    cache), or None when the model has none."""
    from transformers.utils import cached_file

    return cached_file(
        str(model_name_or_path), LEXICON_FILE, _raise_exceptions_for_missing_entries=False, **hub_kwargs
    )


class EntityLexicon:
    """Words with their entity types; `char_features` / `token_features` give the per-position bit masks."""

    def __init__(self, words: Mapping[str, Iterable[str]], types: Sequence[str]):
        self.types = tuple(types)
        if not self.types or len(set(self.types)) != len(self.types):
            raise ValueError(f"lexicon types must be distinct and non-empty, got {list(types)}")
        index = {t: i for i, t in enumerate(self.types)}
        self.words: dict[str, int] = {}  # word -> bit mask of its types
        for word, word_types in words.items():
            if len(word) < 2 or any(c in word for c in "\t\n\r"):
                continue  # one-character "names" (京, 沪) would mark most text; tabs/newlines break the file
            mask = 0
            for t in word_types:
                if t not in index:
                    raise ValueError(f"lexicon word {word!r} has type {t!r}, not one of {list(self.types)}")
                mask |= 1 << index[t]
            if mask:
                self.words[word] = self.words.get(word, 0) | mask
        # Word lengths by their first two characters (every word has at least two): most character pairs of a text
        # begin no word, so one dictionary probe per position rules them out.
        lengths: dict[str, set[int]] = {}
        for word in self.words:
            lengths.setdefault(word[:2], set()).add(len(word))
        shared: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._lengths = {
            pair: shared.setdefault(key, key) for pair, ls in lengths.items() for key in [tuple(sorted(ls))]
        }
        # type mask -> its B bits (bit 3k for each type k in the mask)
        self._spread = [
            sum(1 << (3 * k) for k in range(len(self.types)) if mask >> k & 1)
            for mask in range(1 << len(self.types))
        ]

    def same_as(self, other: EntityLexicon | None) -> bool:
        """Whether `other` holds the same words with the same types (so it gives every text the same features)."""
        return other is not None and self.types == other.types and self.words == other.words

    def entries(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """(word, its type names) for every word, in sorted word order."""
        for word in sorted(self.words):
            mask = self.words[word]
            yield word, tuple(t for k, t in enumerate(self.types) if mask >> k & 1)

    def with_words(self, words: Mapping[str, Iterable[str]]) -> EntityLexicon:
        """A copy with `words` (word -> types) added; this lexicon is left as it is."""
        merged: dict[str, set[str]] = {word: set(types) for word, types in self.entries()}
        for word, types in words.items():
            merged.setdefault(word, set()).update(types)
        return EntityLexicon(merged, self.types)

    @property
    def num_features(self) -> int:
        """Bits per position: B, M and E for each type."""
        return 3 * len(self.types)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.words

    # ----------------------------------------------------------------- features
    def char_features(self, text: str) -> list[int]:
        """One bit mask per character of `text`: bit 3k / 3k+1 / 3k+2 = begins / inside / ends a type-k match."""
        simple = to_simplified(text)
        out = [0] * len(text)
        spread = self._spread
        lengths = self._lengths
        for i in range(len(simple) - 1):
            for n in lengths.get(simple[i : i + 2], ()):
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
        chars = self.char_features(text)
        out = []
        for t, span in enumerate(offsets):
            value = 0
            if span is not None and not (special is not None and special[t]):
                for c in range(span[0], min(span[1], len(chars))):
                    value |= chars[c]
            out.append(value)
        return out

    def describe(self, mask: int) -> str:
        """`PER-B,LOC-E`-style text of a bit mask (for reading features, not for the model)."""
        return ",".join(
            f"{t}-{p}"
            for k, t in enumerate(self.types)
            for b, p in enumerate(_PARTS)
            if mask >> (3 * k + b) & 1
        )

    # ----------------------------------------------------------------- files
    def save(self, path: str | os.PathLike) -> None:
        """Write the lexicon atomically (sorted, so the file's checksum is stable)."""
        lines = [f"{_HEADER} {' '.join(self.types)}"]
        lines += [word + "\t" + ",".join(types) for word, types in self.entries()]
        atomic_write_text(path, "\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> EntityLexicon:
        path = Path(path)
        with path.open(encoding="utf-8") as fh:
            header = fh.readline().rstrip("\n")
            if not header.startswith(_HEADER):
                raise ValueError(f"{path}: not an entity lexicon (first line must start with {_HEADER!r})")
            types = header[len(_HEADER) :].split()
            words: dict[str, list[str]] = {}
            for n, line in enumerate(fh, start=2):
                line = line.rstrip("\n")
                if not line:
                    continue
                word, sep, kinds = line.partition("\t")
                if not sep or not kinds:
                    raise ValueError(f"{path}:{n}: expected 'word<TAB>TYPE[,TYPE]', got {line!r}")
                words[word] = kinds.split(",")
        try:
            return cls(words, types)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
