"""Evaluation metrics of fine-tuning: classification (single/multi-label), character F1 of generations, and
entity-level NER precision/recall/F1 (computed by `ernie_zoo.text.metrics.span_scores`, as the model cards are).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ernie_zoo.text.metrics import prf, span_scores

_PRF = ("precision", "recall", "f1")


def entity_scores(
    gold: Sequence[Sequence[Any]], pred: Sequence[Sequence[Any]], match: str = "exact"
) -> dict[str, Any]:
    """`ernie_zoo.text.metrics.span_scores` in the layout fine-tuning logs: {"precision", "recall", "f1",
    "macro_f1", "per_type": {type: {precision, recall, f1, support}}, "n_gold", "n_pred"}."""
    scores = span_scores(gold, pred, match=match)
    micro = scores["micro"]
    return {
        **{k: micro[k] for k in _PRF},
        "macro_f1": scores["macro_f1"],
        "per_type": {
            t: {**{k: s[k] for k in _PRF}, "support": s["tp"] + s["fn"]}
            for t, s in scores["per_type"].items()
        },
        "n_gold": micro["tp"] + micro["fn"],
        "n_pred": micro["tp"] + micro["fp"],
    }


def classification_scores(gold: Sequence[int], pred: Sequence[int], num_labels: int) -> dict[str, Any]:
    """Accuracy, macro F1 and per-label precision/recall/F1 for single-label classification."""
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels but pred has {len(pred)}")
    if not gold:
        raise ValueError("no examples to score")
    correct = sum(int(g == p) for g, p in zip(gold, pred))
    per_label = {}
    for k in range(num_labels):
        tp = sum(1 for g, p in zip(gold, pred) if g == k and p == k)
        n_pred, support = sum(1 for p in pred if p == k), sum(1 for g in gold if g == k)
        per_label[k] = {**prf(tp, n_pred - tp, support - tp, counts=False), "support": support}
    present = [k for k in range(num_labels) if per_label[k]["support"] > 0]
    return {
        "accuracy": correct / len(gold),
        "macro_f1": sum(per_label[k]["f1"] for k in present) / len(present) if present else 0.0,
        "per_label": per_label,
    }


def multilabel_scores(gold: Sequence[Sequence[int]], pred: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Micro/macro F1 and exact-match ratio for multi-hot label rows (0/1 per label)."""
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} rows but pred has {len(pred)}")
    if not gold:
        raise ValueError("no examples to score")
    num_labels = len(gold[0])
    tp = [0] * num_labels
    n_pred = [0] * num_labels
    n_gold = [0] * num_labels
    exact = 0
    for g, p in zip(gold, pred):
        exact += int(list(g) == list(p))
        for k in range(num_labels):
            tp[k] += int(g[k] == 1 and p[k] == 1)
            n_pred[k] += int(p[k] == 1)
            n_gold[k] += int(g[k] == 1)
    fp = [n - t for n, t in zip(n_pred, tp)]
    fn = [n - t for n, t in zip(n_gold, tp)]
    micro = prf(sum(tp), sum(fp), sum(fn))
    present = [k for k in range(num_labels) if n_gold[k] > 0]
    macro = sum(prf(tp[k], fp[k], fn[k])["f1"] for k in present) / len(present) if present else 0.0
    return {
        "micro_f1": micro["f1"],
        "micro_precision": micro["precision"],
        "micro_recall": micro["recall"],
        "macro_f1": macro,
        "exact_match": exact / len(gold),
    }


def char_f1(reference: str, hypothesis: str) -> float:
    """Character-overlap F1 of two strings (bag of characters): a coarse generation score."""
    ref, hyp = Counter(reference), Counter(hypothesis)
    common = sum((ref & hyp).values())
    return prf(common, sum(hyp.values()) - common, sum(ref.values()) - common)["f1"]


__all__ = ["char_f1", "classification_scores", "entity_scores", "multilabel_scores"]
