"""Scores of a spelling corrector: sentence level (as pycorrector defines it) and character level.

**Sentence level** follows pycorrector's `eval_model_batch` (utils/evaluate_utils.py) exactly, so numbers compare
with the published ones on SIGHAN-2015: a sentence that needs correction is a positive. A positive corrected to
exactly its target is a TP, otherwise an FN (a wrong correction of a positive counts as a miss, not as an FP); a
negative left exactly as it is is a TN, otherwise an FP. precision = TP / (TP + FP), recall = TP / (TP + FN) (both
0 when TP is 0), accuracy = (TP + TN) / n.

**Character level** (same-length pairs): detection counts a changed position as right if the source was wrong
there; correction counts it as right if it also became the target character. Both against the wrong positions of
the sources (recall) and the changed positions of the predictions (precision).
"""

from __future__ import annotations

from collections.abc import Sequence

from .metrics import prf

__all__ = ["correction_scores"]


def correction_scores(
    sources: Sequence[str], targets: Sequence[str], predictions: Sequence[str]
) -> dict[str, float]:
    """Sentence-level (pycorrector's definition) and character-level scores; see the module docstring."""
    if not len(sources) == len(targets) == len(predictions):
        raise ValueError(f"{len(sources)} sources, {len(targets)} targets, {len(predictions)} predictions")
    tp = fp = fn = tn = 0
    det_tp = cor_tp = n_wrong = n_changed = 0
    for src, tgt, pred in zip(sources, targets, predictions):
        if src == tgt:
            tn, fp = (tn + 1, fp) if pred == tgt else (tn, fp + 1)
        else:
            tp, fn = (tp + 1, fn) if pred == tgt else (tp, fn + 1)
        if len(src) == len(tgt) == len(pred):
            wrong = {i for i, (a, b) in enumerate(zip(src, tgt)) if a != b}
            changed = {i for i, (a, b) in enumerate(zip(src, pred)) if a != b}
            n_wrong += len(wrong)
            n_changed += len(changed)
            det_tp += len(wrong & changed)
            cor_tp += sum(1 for i in wrong & changed if pred[i] == tgt[i])
    n = len(sources)
    sentence = prf(tp, fp, fn)
    det = prf(det_tp, n_changed - det_tp, n_wrong - det_tp)
    cor = prf(cor_tp, n_changed - cor_tp, n_wrong - cor_tp)
    return {
        "sentence_accuracy": (tp + tn) / n if n else 0.0,
        "sentence_precision": sentence["precision"],
        "sentence_recall": sentence["recall"],
        "sentence_f1": sentence["f1"],
        "char_detection_precision": det["precision"],
        "char_detection_recall": det["recall"],
        "char_detection_f1": det["f1"],
        "char_correction_precision": cor["precision"],
        "char_correction_recall": cor["recall"],
        "char_correction_f1": cor["f1"],
        "sentences": float(n),
        "sentences_with_errors": float(tp + fn),
    }
