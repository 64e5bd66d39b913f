"""Fused decoding for spelling correction (issue #22): how much the character n-gram LM, the word model and the
correction model each add, which n-gram LM ships, and the weights the shipped ernie-zoo-mini-csc decodes with, all
chosen on the synthetic dev split only (SIGHAN-2015 is never scored here; its sentences are only kept out of the
LM's text).

For every dev sentence, every confusion-set candidate of every Chinese character gets three gains over the
character as written (`ernie_zoo.models.correction.candidate_gains`): the n-gram LM's, the word model's (jieba's
dictionary frequencies), and the correction model's log-probability. Decoding (`choose_corrections`) applies
lm * g_lm + word * g_word + model * g_model > threshold. The grid is searched on the first half of the dev
sentences; the second half reports the chosen weights (and each source alone) without being chosen on.

The n-gram LM is a character Kneser-Ney LM (`ernie_zoo.evaluation.correction.correction_lms`) fitted on the text
`--lm-text` names (the clean side of the synthetic training split, and/or running-text files cut into sentences
the same way, less every dev and SIGHAN-2015 sentence) and pruned to the n-grams (of order `--prune-from-order`
and above) seen `--min-count` times. Each combination of `--lm-text`, `--order`, `--min-count` and
`--prune-from-order` is a variant, with its own weights chosen on the first half; the variant that ships is the one whose fused decoding scores best on the first half among those whose
file fits `--max-lm-bytes` (every variant is recorded in the results' `lm_variants`).

    python bench/csc_fusion.py                       # the training split's 3-gram LM, min count 2: ~2.5 minutes
    # the shipped LM: the variants recipes/zoo/build_all.sh names (~8 minutes on one core)
    python -m ernie_zoo.evaluation.correction --attach-lm ernie_zoo/zoo/ernie-zoo-mini-csc \\
        --fusion bench/results/csc_fusion.json       # ships the LM and the chosen weights with the model
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

GRID = {
    "word": [0.0, 0.5, 1.0],
    "model": [0.0, 0.5, 1.0, 2.0],
    "threshold": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0],
}


def model_gains(model, tokenizer, candidates, text: str) -> dict[int, dict[str, float]]:
    """position -> {candidate: the model's log-probability gain over the character as written}: Taskflow's
    candidate set and gains (the same `model_log_gains` / `char_options`), on the sentence as one chunk."""
    import torch

    from ernie_zoo.models.correction import char_options, model_log_gains
    from ernie_zoo.text.confusion import is_cjk

    enc = tokenizer(text, return_tensors="pt", return_offsets_mapping=True, truncation=True, max_length=512)
    offsets = enc.pop("offset_mapping")[0].tolist()
    with torch.no_grad():
        logp = model(**enc).logits[0].float().log_softmax(-1)
    chars = [t for t, (start, end) in enumerate(offsets) if end - start == 1]
    out = {}
    for t, by_id in model_log_gains(logp, enc["input_ids"][0], chars, candidates).items():
        start = offsets[t][0]
        if is_cjk(text[start]) and (
            options := char_options(by_id, tokenizer.convert_ids_to_tokens, text[start])
        ):
            out[start] = options
    return out


def _recorded_path(source: str) -> str:
    """A source as the results record it: the home directory as ~, so the command reruns elsewhere."""
    home = str(Path.home())
    return "~" + source[len(home) :] if source.startswith(home + os.sep) else source


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from ernie_zoo.evaluation.correction import TRAIN_TEXT, correction_lms, read_pairs
    from ernie_zoo.models.correction import (
        ErnieZooForSpellingCorrection,
        FusionWeights,
        candidate_gains,
        candidate_table,
        choose_corrections,
    )
    from ernie_zoo.text.correction import correction_scores
    from ernie_zoo.text.words import WordUnigram

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=REPO / "ernie_zoo/zoo/ernie-zoo-mini-csc")
    p.add_argument("--csc-data", type=Path, default=Path("~/.cache/ernie_zoo/csc").expanduser())
    p.add_argument(
        "--dev-samples", type=int, default=2000, help="first N dev sentences: half choose, half report"
    )
    p.add_argument("--order", type=int, nargs="+", default=[3], help="n-gram orders to try")
    p.add_argument(
        "--min-count",
        type=int,
        nargs="+",
        default=[2],
        help="n-grams (of order >= --prune-from-order) seen fewer times are pruned (each value tried)",
    )
    p.add_argument(
        "--prune-from-order",
        type=int,
        nargs="+",
        default=[2],
        help="--min-count prunes the n-grams of this order and above; the lower orders stay whole (each tried)",
    )
    p.add_argument(
        "--lm-text",
        nargs="+",
        default=[TRAIN_TEXT],
        metavar="SOURCES",
        help=f"the LM's text, each argument one set to try: sources joined by '+', a source {TRAIN_TEXT!r} (the "
        "clean side of the synthetic training split) or a running-text file (dev and SIGHAN-2015 sentences are "
        "dropped from it: ernie_zoo.evaluation.correction.correction_lm_texts)",
    )
    p.add_argument(
        "--max-lm-bytes",
        type=int,
        default=None,
        help="LM variants whose file is larger are sized but not scored (what the model directory leaves free)",
    )
    p.add_argument("--out", type=Path, default=REPO / "bench/results/csc_fusion.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    words = WordUnigram.jieba()
    model = ErnieZooForSpellingCorrection.from_pretrained(args.model).eval()
    shipped = (
        (model.config.to_dict().get("correction_fusion") or None) if model.ngram_lm is not None else None
    )
    model.ngram_lm = None  # the model's own gains only
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    candidates = candidate_table(model.confusion_sets, tokenizer.get_vocab())
    dev = read_pairs(args.csc_data / "dev.jsonl", args.dev_samples)
    options = []  # per sentence: position -> {candidate: the model's gain}
    for n, (src, _) in enumerate(dev):
        options.append(model_gains(model, tokenizer, candidates, src))
        if n % 500 == 0:
            log(f"model gains: {n}/{len(dev)} sentences")
    half = len(dev) // 2

    # Every candidate of every sentence as one row: (sentence, position, candidate) and the three gains; the word
    # and model gains do not depend on the LM, so only the n-gram column is recomputed per LM variant.
    def gains_of(lm, with_words: bool) -> list[list[tuple[int, str, float, float, float]]]:
        return [
            candidate_gains(
                src,
                opts if with_words else {i: dict.fromkeys(o, 0.0) for i, o in opts.items()},
                lm,
                words if with_words else None,
            )
            for (src, _), opts in zip(dev, options)
        ]

    rows_of: list[tuple[int, int, str]] = []
    word_gain = model_gain = None

    def score(part: str, lm_gain, weights: FusionWeights) -> dict:
        lo, hi = (0, half) if part == "choose" else (half, len(dev))
        total = weights.lm * lm_gain + weights.word * word_gain + weights.model * model_gain
        kept: dict[int, list] = {}
        for r in np.nonzero(total > weights.threshold)[0].tolist():
            s, i, cand = rows_of[r]
            if lo <= s < hi:
                kept.setdefault(s, []).append((i, cand, lm_gain[r], word_gain[r], model_gain[r]))
        preds = []
        for s in range(lo, hi):
            chars = list(dev[s][0])
            for i, c, _ in choose_corrections(kept.get(s, []), weights):
                chars[i] = c
            preds.append("".join(chars))
        pairs = dev[lo:hi]
        return correction_scores([a for a, _ in pairs], [b for _, b in pairs], preds)

    def best(lm_gain, lm_w: float, words_w: list[float], model_w: list[float]) -> tuple[FusionWeights, float]:
        trials = []
        for w, m, thr in itertools.product(words_w, model_w, GRID["threshold"]):
            weights = FusionWeights(lm=lm_w, word=w, model=m, threshold=thr)
            trials.append((score("choose", lm_gain, weights)["sentence_f1"], weights))
        return max(trials, key=lambda x: x[0])[::-1]

    def row(lm_gain, weights: FusionWeights, chosen_f1: float | None) -> dict:
        report = score("report", lm_gain, weights)
        return {
            "weights": weights.to_dict(),
            **({"choose_sentence_f1": round(chosen_f1, 4)} if chosen_f1 is not None else {}),
            "report_sentence_f1": round(report["sentence_f1"], 4),
            "report_sentence_precision": round(report["sentence_precision"], 4),
            "report_sentence_recall": round(report["sentence_recall"], 4),
            "report_char_correction_f1": round(report["char_correction_f1"], 4),
        }

    variants = []
    for text in args.lm_text:
        sources = [_recorded_path(s) for s in text.split("+")]
        for order in args.order:
            log(f"fitting the {order}-gram LM on {'+'.join(sources)}")
            for lm, spec in correction_lms(
                args.csc_data, order, args.min_count, sources, args.prune_from_order
            ):
                with tempfile.TemporaryDirectory() as tmp:
                    lm.save(Path(tmp) / "lm.safetensors")
                    spec["bytes"] = (Path(tmp) / "lm.safetensors").stat().st_size
                if args.max_lm_bytes is not None and spec["bytes"] > args.max_lm_bytes:  # sized, not scored
                    variants.append({"ngram_lm": spec, "systems": None, "chosen": None})
                    log(
                        f"order {order} min_count {spec['min_count']} from order {spec['prune_from_order']} "
                        f"{spec['ngrams_kept']:,} n-grams {spec['bytes'] / 1e6:.1f} MB: over --max-lm-bytes"
                    )
                    continue
                if word_gain is None:  # the first LM: every row with its word and model gains
                    table = gains_of(lm, with_words=True)
                    rows_of = [(s, i, c) for s, g in enumerate(table) for i, c, *_ in g]
                    word_gain = np.array([r[3] for g in table for r in g])
                    model_gain = np.array([r[4] for g in table for r in g])
                else:
                    table = gains_of(lm, with_words=False)
                    assert [(s, i, c) for s, g in enumerate(table) for i, c, *_ in g] == rows_of
                lm_gain = np.array([r[2] for g in table for r in g])
                systems = {
                    "n-gram LM alone": best(lm_gain, 1.0, [0.0], [0.0]),
                    "model alone": best(lm_gain, 0.0, [0.0], [1.0]),
                    "n-gram LM + word model": best(lm_gain, 1.0, [1.0, 0.5], [0.0]),
                    "n-gram LM + model": best(lm_gain, 1.0, [0.0], GRID["model"][1:]),
                    "n-gram LM + word model + model (chosen)": best(
                        lm_gain, 1.0, GRID["word"], GRID["model"]
                    ),
                }
                rows = {name: row(lm_gain, w, f1) for name, (w, f1) in systems.items()}
                if shipped:
                    rows["the model directory's correction_fusion"] = row(
                        lm_gain, FusionWeights(**shipped), None
                    )
                full = rows["n-gram LM + word model + model (chosen)"]
                variants.append(
                    {
                        "ngram_lm": spec,
                        "systems": rows,
                        "chosen": systems["n-gram LM + word model + model (chosen)"][0].to_dict(),
                    }
                )
                log(
                    f"order {order} min_count {spec['min_count']} from order {spec['prune_from_order']} "
                    f"{spec['ngrams_kept']:,} n-grams "
                    f"{spec['bytes'] / 1e6:.1f} MB: choose {full['choose_sentence_f1']:.4f} "
                    f"report {full['report_sentence_f1']:.4f} {full['weights']}"
                )
    fits = [v for v in variants if v["systems"] is not None]
    if not fits:
        raise SystemExit(f"no LM variant fits --max-lm-bytes {args.max_lm_bytes}")
    top = max(
        fits, key=lambda v: v["systems"]["n-gram LM + word model + model (chosen)"]["choose_sentence_f1"]
    )
    for name, r in top["systems"].items():
        print(
            f"{name:42s} choose {r.get('choose_sentence_f1', float('nan')):.4f}  "
            f"report {r['report_sentence_f1']:.4f}  {r['weights']}",
            flush=True,
        )
    result = {
        # as typed, with the home directory the shell expanded written as ~ (the record holds no user's paths)
        "command": " ".join(
            ["python bench/csc_fusion.py", *(argv if argv is not None else sys.argv[1:])]
        ).replace(str(Path.home()) + os.sep, "~" + os.sep),
        "model": str(args.model.relative_to(REPO) if args.model.is_relative_to(REPO) else args.model),
        "dev_sentences": {"choose": half, "report": len(dev) - half},
        "ngram_lm": top["ngram_lm"],
        "word_model": "jieba dict.txt frequencies (best-segmentation log-probability of 9-character windows)",
        "grid": GRID,
        "systems": top["systems"],
        "chosen": top["chosen"],
        "max_lm_bytes": args.max_lm_bytes,
        "lm_variants": [
            {
                **{
                    k: v["ngram_lm"][k]
                    for k in ("order", "min_count", "prune_from_order", "text", "ngrams_kept", "bytes")
                },
                **(
                    {
                        k: v["systems"]["n-gram LM + word model + model (chosen)"][k]
                        for k in ("choose_sentence_f1", "report_sentence_f1")
                    }
                    | {
                        "lm_alone_choose_sentence_f1": v["systems"]["n-gram LM alone"]["choose_sentence_f1"],
                        "chosen": v["chosen"],
                    }
                    if v["systems"] is not None
                    else {"scored": "no: over --max-lm-bytes"}
                ),
            }
            for v in variants
        ],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
