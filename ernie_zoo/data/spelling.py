"""Confusion sets and synthetic spelling errors for Chinese spelling correction (CSC).

Most real Chinese spelling errors replace a character by one that sounds the same (的/地, 在/再) or looks
alike (己/已). Learners and input methods make them; a corrector learns to undo them from clean text into
which such errors are put at realistic rates. The two pieces here:

* :class:`ConfusionSets` — for each common character, the characters it is confused with, by kind:

  =============  =============================================================================================
  ``same_tone``   a reading with the same syllable and tone (pypinyin, every reading; pycorrector 同音同调)
  ``diff_tone``   the same syllable, another tone (pypinyin; pycorrector 同音异调)
  ``near_sound``  a syllable one fuzzy-pinyin step away: zh/z ch/c sh/s n/l f/h r/l initials, an/ang en/eng
                  in/ing ian/iang uan/uang finals (the confusions of southern accents and pinyin typing)
  ``shape``       the same Kangxi radical and a total stroke count within ±1 (the project's radical/stroke
                  table), or a group of pycorrector's ``same_stroke.txt``
  =============  =============================================================================================

  Candidates are restricted to a vocabulary of common characters (the corpus' frequent characters that the
  tokenizer knows), and saved with a correction model (``confusion_sets.json``) so decoding may only turn a
  character into one it is plausibly confused with.
* :class:`ErrorGenerator` — puts errors into a clean sentence: how many per sentence follows
  ``error_counts`` (most sentences 0–2, many none), which characters favours frequent ones (the function
  words learners get wrong most are also the most frequent), what a character becomes follows ``kind_weights``
  and then the candidates' corpus frequency. Only characters of the common vocabulary are replaced: names,
  numbers, Latin and punctuation are never touched, and the length never changes. Everything is drawn from a
  ``random.Random`` seeded by the caller, so a (seed, sentence index) pair always gives the same errors.

Build a training set (train/dev JSONL of ``{"source", "target"}`` pairs plus the confusion sets)::

    python -m ernie_zoo.data.spelling --corpus ~/.cache/ernie_zoo/corpora/{msra,reviews,xinhua}.txt \\
        --tokenizer ernie_zoo/zoo/ernie-zoo-mini-zh --out ~/.cache/ernie_zoo/csc --train 240000 --dev 3000

pycorrector's files (``same_pinyin.txt``, ``same_stroke.txt``, Apache-2.0) are read from its wheel (source
``pycorrector`` in :mod:`ernie_zoo.data.sources`); its SIGHAN-2015 test is never read here.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ernie_zoo.text.confusion import CONFUSION_FILE, KINDS, ConfusionSets, is_cjk

from .sources import DEFAULT_CACHE, fetch, read_archive_member

logger = logging.getLogger(__name__)

__all__ = [
    "CONFUSION_FILE",
    "KINDS",
    "ConfusionSets",
    "ErrorGenerator",
    "build_confusion_sets",
    "read_pycorrector_sets",
]


# Fuzzy pinyin: initials and finals that accents and typing confuse (one step each way).
_NEAR_INITIALS = {"zh": "z", "z": "zh", "ch": "c", "c": "ch", "sh": "s", "s": "sh", "n": "l", "l": "n",
                  "f": "h", "h": "f", "r": "l"}  # fmt: skip
_NEAR_FINALS = {"ang": "an", "an": "ang", "eng": "en", "en": "eng", "ing": "in", "in": "ing",
                "iang": "ian", "ian": "iang", "uang": "uan", "uan": "uang"}  # fmt: skip
_INITIALS = ("zh", "ch", "sh", "b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h", "j", "q", "x", "r", "z",
             "c", "s", "y", "w")  # fmt: skip


def _split_syllable(syl: str) -> tuple[str, str]:
    for ini in _INITIALS:
        if syl.startswith(ini) and len(syl) > len(ini):
            return ini, syl[len(ini) :]
    return "", syl


def near_syllables(syl: str) -> set[str]:
    """Syllables one fuzzy-pinyin step from `syl` (toneless): zhi -> zi, lan -> nan/lang, ..."""
    ini, fin = _split_syllable(syl)
    out = set()
    if ini in _NEAR_INITIALS:
        out.add(_NEAR_INITIALS[ini] + fin)
    for long_, short in _NEAR_FINALS.items():
        if fin.endswith(long_):
            out.add(ini + fin[: -len(long_)] + short)
            break
    out.discard(syl)
    return out


def _readings(ch: str) -> list[tuple[str, int]]:
    """Every (syllable, tone) pypinyin knows for `ch`; tone 5 is neutral."""
    from pypinyin import Style, pinyin

    out = []
    for r in pinyin(ch, style=Style.TONE3, heteronym=True, neutral_tone_with_five=True, errors=lambda c: [])[
        0
    ]:
        m = re.fullmatch(r"([a-z]+)([1-5])", r.replace("ü", "v"))
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


def read_pycorrector_sets(
    raw_dir: Path | None = None,
) -> tuple[dict[str, dict[str, set[str]]], list[set[str]]]:
    """pycorrector's ``same_pinyin.txt`` ({char: {"same_tone": .., "diff_tone": ..}}) and ``same_stroke.txt``
    (groups of look-alikes), read from its wheel (fetched into the raw cache if missing)."""
    wheel = fetch("pycorrector", raw_dir)
    sound: dict[str, dict[str, set[str]]] = {}
    text = read_archive_member(wheel, "pycorrector/data/same_pinyin.txt").decode("utf-8")
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        ch = parts[0].strip()
        if len(ch) != 1:
            continue
        same = set(parts[1].strip()) if len(parts) > 1 else set()
        diff = set(parts[2].strip()) if len(parts) > 2 else set()
        sound[ch] = {"same_tone": same - {ch}, "diff_tone": diff - {ch}}
    groups = []
    text = read_archive_member(wheel, "pycorrector/data/same_stroke.txt").decode("utf-8")
    for line in text.splitlines():
        group = {c for c in line.split("\t") if len(c) == 1 and is_cjk(c)}
        if len(group) > 1:
            groups.append(group)
    return sound, groups


def build_confusion_sets(
    vocab: Iterable[str],
    pycorrector: tuple[Mapping[str, Mapping[str, set[str]]], Sequence[set[str]]] | None = None,
) -> ConfusionSets:
    """Confusion sets over `vocab` (the common characters): every candidate is itself in `vocab`."""
    from ernie_zoo.tokenization.char_tables import load_char_table

    chars = sorted({c for c in vocab if is_cjk(c)})
    vocab_set = set(chars)
    table = load_char_table().chars
    readings = {c: _readings(c) for c in chars}
    by_reading: dict[tuple[str, int], set[str]] = {}
    by_syllable: dict[str, set[str]] = {}
    # A wrong character is indexed by its most common reading only: a writer who means 一 (yī) may type 衣, but
    # hardly 噎 (yē, yī only in rare uses). The intended character keeps every reading (its context decides).
    for c, rs in readings.items():
        if rs:
            syl, tone = rs[0]
            by_reading.setdefault((syl, tone), set()).add(c)
            by_syllable.setdefault(syl, set()).add(c)
    by_radical: dict[int, list[str]] = {}
    for c in chars:
        if c in table and table[c].radical:
            by_radical.setdefault(table[c].radical, []).append(c)
    groups: dict[str, set[str]] = {}
    sound_py: Mapping[str, Mapping[str, set[str]]] = {}
    if pycorrector is not None:
        sound_py, stroke_groups = pycorrector
        for g in stroke_groups:
            for c in g:
                groups.setdefault(c, set()).update(g)
    sets: dict[str, dict[str, str]] = {}
    for c in chars:
        same, diff, near = set(), set(), set()
        for syl, tone in readings[c]:
            same |= by_reading.get((syl, tone), set())
            diff |= by_syllable.get(syl, set())
            for other in near_syllables(syl):
                near |= by_syllable.get(other, set())
        py = sound_py.get(c, {})
        same |= py.get("same_tone", set()) & vocab_set
        diff |= py.get("diff_tone", set()) & vocab_set
        shape = set(groups.get(c, set())) & vocab_set
        if c in table and table[c].radical:
            n = table[c].strokes
            shape |= {o for o in by_radical[table[c].radical] if abs(table[o].strokes - n) <= 1}
        same.discard(c)
        diff -= same | {c}
        near -= same | diff | {c}
        shape -= same | diff | near | {c}
        entry = {k: "".join(sorted(s)) for k, s in zip(KINDS, (same, diff, near, shape)) if s}
        if entry:
            sets[c] = entry
    return ConfusionSets(sets)


@dataclass
class ErrorGenerator:
    """Puts realistic spelling errors into clean sentences (see the module docstring).

    Attributes:
        confusion: the confusion sets; only characters with candidates are ever replaced.
        freq: corpus character counts; they weight which positions and which candidates are drawn.
        error_counts: probability of 0, 1, 2, ... errors in a sentence (renormalised over what the sentence
            allows: at most one error per `min_chars_per_error` characters).
        kind_weights: relative weight of each confusion kind when a character has candidates of several kinds.
    """

    confusion: ConfusionSets
    freq: Mapping[str, int]
    error_counts: Sequence[float] = (0.3, 0.45, 0.17, 0.08)
    kind_weights: Mapping[str, float] = field(
        default_factory=lambda: {"same_tone": 0.5, "diff_tone": 0.2, "near_sound": 0.1, "shape": 0.2}
    )
    min_chars_per_error: int = 6

    def __post_init__(self) -> None:
        if any(p < 0 for p in self.error_counts) or not sum(self.error_counts) > 0:
            raise ValueError(
                f"error_counts must be non-negative and not all 0, got {list(self.error_counts)}"
            )
        unknown = set(self.kind_weights) - set(KINDS)
        if unknown:
            raise ValueError(f"kind_weights has unknown kinds {sorted(unknown)}; known: {KINDS}")
        self._cand_cache: dict[str, tuple[list[str], list[float]]] = {}

    def _position_weight(self, ch: str) -> float:
        return math.log1p(self.freq.get(ch, 0))

    def _candidates(self, ch: str) -> tuple[list[str], list[float]]:
        hit = self._cand_cache.get(ch)
        if hit is None:
            entry = self.confusion.sets.get(ch, {})
            cands, weights = [], []
            for kind, w in self.kind_weights.items():
                chars = entry.get(kind, "")
                if not chars or w <= 0:
                    continue
                f = [math.sqrt(self.freq.get(c, 0) + 1) for c in chars]
                total = sum(f)
                cands += list(chars)
                weights += [w * x / total for x in f]
            hit = self._cand_cache[ch] = (cands, weights)
        return hit

    def corrupt(self, text: str, rng: random.Random) -> str:
        """`text` with 0..k characters replaced by confusable ones (same length)."""
        positions = [i for i, ch in enumerate(text) if self._candidates(ch)[0]]
        limit = min(len(positions), len(text) // self.min_chars_per_error, len(self.error_counts) - 1)
        probs = list(self.error_counts[: limit + 1])
        if not positions or sum(probs) <= 0:
            return text
        n = rng.choices(range(limit + 1), weights=probs)[0]
        chosen: set[int] = set()
        weights = [self._position_weight(text[i]) for i in positions]
        while len(chosen) < n:
            chosen.add(rng.choices(positions, weights=weights)[0])
        out = list(text)
        for i in sorted(chosen):
            cands, w = self._candidates(text[i])
            out[i] = rng.choices(cands, weights=w)[0]
        return "".join(out)


# ---------------------------------------------------------------------------------------------- the build


# Particles of Classical Chinese (兮 曰 矣 焉 哉) and dictionary quotation credits ("--《老子》"): the dictionary
# corpus quotes the classics, which a corrector of modern text should not learn to write.
_CLASSICAL = re.compile(r"[兮曰矣焉哉]|--")


def iter_sentences(lines: Iterable[str], min_chars: int = 8, max_chars: int = 100) -> Iterator[str]:
    """Sentences (cut after 。！？；) of modern running text: `min_chars`..`max_chars` long, at least 70%
    Chinese characters and no Classical particles, so the corrector learns from text like what it corrects."""
    for line in lines:
        for sent in re.findall(r"[^。！？；!?;]+[。！？；!?;]?", line.strip()):
            sent = sent.strip()
            if (
                min_chars <= len(sent) <= max_chars
                and sum(map(is_cjk, sent)) >= 0.7 * len(sent)
                and not _CLASSICAL.search(sent)
            ):
                yield sent


def common_chars(
    freq: Counter, tokenizer_vocab: Mapping[str, int], min_count: int, max_chars: int
) -> list[str]:
    """The `max_chars` most frequent CJK characters seen at least `min_count` times that the tokenizer knows."""
    return [c for c, n in freq.most_common() if n >= min_count and is_cjk(c) and c in tokenizer_vocab][
        :max_chars
    ]


def build_dataset(
    corpus: Sequence[Path],
    tokenizer_dir: str,
    out: Path,
    n_train: int,
    n_dev: int,
    seed: int = 42,
    max_vocab: int = 5000,
    min_count: int = 20,
    raw_dir: Path | None = None,
    max_per_corpus: int | None = None,
    train_error_counts: Sequence[float] | None = None,
) -> dict:
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    for path in corpus:
        if not path.is_file():
            raise FileNotFoundError(
                f"--corpus {path}: no such file (build one with scripts/prepare_corpora.py)"
            )
    vocab = ErnieZooTokenizerFast.from_pretrained(tokenizer_dir).get_vocab()
    sentences = []
    for path in corpus:
        with path.open(encoding="utf-8") as f:
            own = list(dict.fromkeys(iter_sentences(f)))
        if max_per_corpus and len(own) > max_per_corpus:  # seeded sample, so no one source dominates
            own = random.Random(f"{seed}:{path.name}").sample(own, max_per_corpus)
        logger.info("%s: %d sentences", path, len(own))
        sentences += own
    sentences = list(dict.fromkeys(sentences))
    if len(sentences) < n_train + n_dev:
        logger.warning(
            "%s has %d sentences, fewer than %d + %d asked", corpus, len(sentences), n_train, n_dev
        )
    freq = Counter(ch for s in sentences for ch in s if is_cjk(ch))
    chars = common_chars(freq, vocab, min_count, max_vocab)
    confusion = build_confusion_sets(chars, read_pycorrector_sets(raw_dir))
    gen = ErrorGenerator(confusion, freq)
    # Training may see denser errors than dev (more signal per step); dev keeps the realistic rates.
    train_gen = (
        ErrorGenerator(confusion, freq, error_counts=train_error_counts) if train_error_counts else gen
    )
    rng = random.Random(seed)
    rng.shuffle(sentences)
    dev, train = sentences[:n_dev], sentences[n_dev : n_dev + n_train]
    out.mkdir(parents=True, exist_ok=True)
    stats = {}
    for name, split, offset, g in (("dev", dev, 0, gen), ("train", train, 1, train_gen)):
        tmp = out / f"{name}.jsonl.tmp"
        n_err = Counter()
        with tmp.open("w", encoding="utf-8") as f:
            for i, target in enumerate(split):
                source = g.corrupt(target, random.Random(f"{seed}:{offset}:{i}"))
                n_err[sum(a != b for a, b in zip(source, target))] += 1
                f.write(json.dumps({"source": source, "target": target}, ensure_ascii=False) + "\n")
        tmp.replace(out / f"{name}.jsonl")
        stats[name] = {"sentences": len(split), "errors_per_sentence": dict(sorted(n_err.items()))}
    confusion.save(out / CONFUSION_FILE)
    manifest = {
        "corpus": [str(p) for p in corpus],
        "seed": seed,
        "max_per_corpus": max_per_corpus,
        "vocabulary": len(chars),
        "chars_with_candidates": len(confusion),
        "mean_candidates": sum(len(confusion.candidates(c)) for c in confusion.sets) / max(len(confusion), 1),
        "kind_weights": dict(gen.kind_weights),
        "error_counts": list(gen.error_counts),
        "train_error_counts": list(train_gen.error_counts),
        **stats,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")
    return manifest


@dataclass
class Args:
    """Build the synthetic spelling-correction data: train/dev pairs and the confusion sets."""

    corpus: list[Path] | None = None
    """Clean running text files, one paragraph per line (one or more; required)."""
    tokenizer: str | None = None
    """Tokenizer directory (candidates must be in its vocabulary; required)."""
    out: Path = DEFAULT_CACHE / "csc"
    """Output directory."""
    train: int = 240_000
    """Training sentences (>= 1)."""
    dev: int = 3_000
    """Dev sentences (>= 0)."""
    seed: int = 42
    """Seed of the sampling and of the errors."""
    max_vocab: int = 5000
    """Common characters that may be replaced."""
    max_per_corpus: int | None = None
    """Sample at most this many sentences per file; null: all."""
    train_error_counts: list[float] | None = None
    """Probability of 0, 1, 2, ... errors per training sentence; null: the dev rates, 0.3 0.45 0.17 0.08."""

    def validate(self) -> None:
        if not self.corpus:
            raise ValueError("--corpus is required: the clean text files")
        if self.tokenizer is None:
            raise ValueError("--tokenizer is required: the tokenizer directory")
        if self.train < 1 or self.dev < 0:
            raise ValueError(f"--train must be >= 1 and --dev >= 0, got {self.train} and {self.dev}")


def run(args: Args, argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    manifest = build_dataset(
        args.corpus,
        args.tokenizer,
        args.out,
        args.train,
        args.dev,
        args.seed,
        args.max_vocab,
        max_per_corpus=args.max_per_corpus,
        train_error_counts=args.train_error_counts,
    )
    print(json.dumps(manifest, ensure_ascii=False, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    from ernie_zoo.recipe_cli import command_main

    return command_main(Args, run, "python -m ernie_zoo.data.spelling", __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    from ernie_zoo.utils import run_console

    raise SystemExit(run_console("python -m ernie_zoo.data.spelling", main))
