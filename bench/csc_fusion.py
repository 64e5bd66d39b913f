"""Fused decoding for spelling correction (issue #22): how much the character n-gram LM, the word model and the
correction model each add, and the weights the shipped ernie-zoo-mini-csc decodes with, chosen on the synthetic
dev split only (SIGHAN-2015 is never read here).

For every dev sentence, every confusion-set candidate of every Chinese character gets three gains over the
character as written (`ernie_zoo.models.correction.candidate_gains`): the n-gram LM's (a character LM fitted on
the clean side of the synthetic training split, pruned to what ships), the word model's (jieba's dictionary
frequencies), and the correction model's log-probability. Decoding (`choose_corrections`) applies
lm * g_lm + word * g_word + model * g_model > threshold. The grid is searched on the first half of the dev
sentences; the second half reports the chosen weights (and each source alone) without being chosen on.

    python bench/csc_fusion.py                       # about 15 minutes on one core
    python -m ernie_zoo.evaluation.correction --attach-lm ernie_zoo/zoo/ernie-zoo-mini-csc \\
        --fusion bench/results/csc_fusion.json       # ships the LM and the chosen weights with the model
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
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


def main(argv: list[str] | None = None) -> int:
    import torch
    from transformers import AutoTokenizer

    from ernie_zoo.evaluation.correction import read_pairs
    from ernie_zoo.models.correction import (
        ErnieZooForSpellingCorrection,
        FusionWeights,
        candidate_gains,
        candidate_table,
        choose_corrections,
    )
    from ernie_zoo.models.ngram import CharNgramLM
    from ernie_zoo.text.correction import correction_scores
    from ernie_zoo.text.words import WordUnigram

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=REPO / "ernie_zoo/zoo/ernie-zoo-mini-csc")
    p.add_argument("--csc-data", type=Path, default=Path("~/.cache/ernie_zoo/csc").expanduser())
    p.add_argument(
        "--dev-samples", type=int, default=2000, help="first N dev sentences: half choose, half report"
    )
    p.add_argument("--order", type=int, default=3)
    p.add_argument(
        "--min-count", type=int, default=2, help="n-grams of order >= 2 seen fewer times are pruned"
    )
    p.add_argument("--out", type=Path, default=REPO / "bench/results/csc_fusion.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    lm = CharNgramLM(order=args.order).fit([t for _, t in read_pairs(args.csc_data / "train.jsonl")])
    full_ngrams = lm.num_ngrams
    lm.prune(args.min_count)
    words = WordUnigram.jieba()
    model = ErnieZooForSpellingCorrection.from_pretrained(args.model).eval()
    model.ngram_lm = None  # the model's own gains only
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    candidates = candidate_table(model.confusion_sets, tokenizer.get_vocab())
    dev = read_pairs(args.csc_data / "dev.jsonl", args.dev_samples)
    feats = []
    for n, (src, _) in enumerate(dev):
        feats.append(candidate_gains(src, model_gains(model, tokenizer, candidates, src), lm, words))
        if n % 250 == 0:
            print(f"{n}/{len(dev)} sentences, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    half = len(dev) // 2
    parts = {"choose": (dev[:half], feats[:half]), "report": (dev[half:], feats[half:])}

    def score(part: str, weights: FusionWeights) -> dict:
        pairs, gains = parts[part]
        preds = []
        for (src, _), g in zip(pairs, gains):
            chars = list(src)
            for i, c, _ in choose_corrections(g, weights):
                chars[i] = c
            preds.append("".join(chars))
        return correction_scores([s for s, _ in pairs], [t for _, t in pairs], preds)

    def best(lm_w: float, words_w: list[float], model_w: list[float]) -> tuple[FusionWeights, float]:
        trials = []
        for w, m, thr in itertools.product(words_w, model_w, GRID["threshold"]):
            weights = FusionWeights(lm=lm_w, word=w, model=m, threshold=thr)
            trials.append((score("choose", weights)["sentence_f1"], weights))
        return max(trials, key=lambda x: x[0])[::-1]

    systems = {
        "n-gram LM alone": best(1.0, [0.0], [0.0]),
        "model alone": best(0.0, [0.0], [1.0]),
        "n-gram LM + word model": best(1.0, [1.0, 0.5], [0.0]),
        "n-gram LM + model": best(1.0, [0.0], GRID["model"][1:]),
        "n-gram LM + word model + model (chosen)": best(1.0, GRID["word"], GRID["model"]),
    }
    rows = {}
    for name, (weights, chosen_f1) in systems.items():
        report = score("report", weights)
        rows[name] = {
            "weights": weights.to_dict(),
            "choose_sentence_f1": round(chosen_f1, 4),
            "report_sentence_f1": round(report["sentence_f1"], 4),
            "report_sentence_precision": round(report["sentence_precision"], 4),
            "report_sentence_recall": round(report["sentence_recall"], 4),
            "report_char_correction_f1": round(report["char_correction_f1"], 4),
        }
        print(f"{name:42s} choose {chosen_f1:.4f}  report {report['sentence_f1']:.4f}  {weights}", flush=True)
    chosen = systems["n-gram LM + word model + model (chosen)"][0]
    result = {
        "command": " ".join(["python bench/csc_fusion.py", *(argv if argv is not None else sys.argv[1:])]),
        "model": str(args.model.relative_to(REPO) if args.model.is_relative_to(REPO) else args.model),
        "dev_sentences": {"choose": half, "report": len(dev) - half},
        "ngram_lm": {
            "order": args.order,
            "min_count": args.min_count,
            "ngrams_fitted": full_ngrams,
            "ngrams_kept": lm.num_ngrams,
            "training_sentences": "the clean side of the synthetic training split (csc/train.jsonl)",
        },
        "word_model": "jieba dict.txt frequencies (best-segmentation log-probability of 9-character windows)",
        "grid": GRID,
        "systems": rows,
        "chosen": chosen.to_dict(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
