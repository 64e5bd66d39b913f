"""Evaluation metrics: classification (single/multi-label) and entity-level NER precision/recall/F1.

Entity scores follow the CoNLL convention: a predicted entity counts only if its start, end and type all match
a gold entity (`match="exact"`). `match="overlap"` is the lenient variant reported by some Chinese NER papers: a
prediction matches a gold entity of the same type that it overlaps, each gold entity matched at most once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from .tagging import Span


def _prf(tp: int, n_pred: int, n_gold: int) -> dict[str, float]:
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _match_overlap(gold: list[Span], pred: list[Span]) -> int:
    """Greedy one-to-one matching of same-type overlapping spans (largest overlap first)."""
    pairs = []
    for i, g in enumerate(gold):
        for j, p in enumerate(pred):
            overlap = min(g.end, p.end) - max(g.start, p.start)
            if overlap > 0 and g.type == p.type:
                pairs.append((-overlap, i, j))
    used_g, used_p, matched = set(), set(), 0
    for _, i, j in sorted(pairs):
        if i not in used_g and j not in used_p:
            used_g.add(i)
            used_p.add(j)
            matched += 1
    return matched


def entity_scores(
    gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]], match: str = "exact"
) -> dict[str, Any]:
    """Micro precision/recall/F1 over all entities, per-type scores and macro F1.

    gold, pred: one list of `Span`s (or (start, end, type) tuples) per sentence, in the same order.
    Returns {"precision", "recall", "f1", "macro_f1", "per_type": {type: {precision, recall, f1, support}},
    "n_gold", "n_pred"}.
    """
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} sentences but pred has {len(pred)}")
    if match not in ("exact", "overlap"):
        raise ValueError(f"match must be 'exact' or 'overlap', got {match!r}")
    tp: Counter[str] = Counter()
    n_gold: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    for g_sent, p_sent in zip(gold, pred):
        g_spans = [Span(*s) for s in g_sent]
        p_spans = [Span(*s) for s in p_sent]
        # Duplicate predictions of one entity count once as right and then as wrong: sets would hide them.
        for s in g_spans:
            n_gold[s.type] += 1
        for s in p_spans:
            n_pred[s.type] += 1
        for kind in {s.type for s in g_spans} | {s.type for s in p_spans}:
            g_k = [s for s in g_spans if s.type == kind]
            p_k = [s for s in p_spans if s.type == kind]
            if match == "exact":
                remaining = Counter(g_k)
                for s in p_k:
                    if remaining[s] > 0:
                        remaining[s] -= 1
                        tp[kind] += 1
            else:
                tp[kind] += _match_overlap(g_k, p_k)
    types = sorted(set(n_gold) | set(n_pred))
    per_type = {t: {**_prf(tp[t], n_pred[t], n_gold[t]), "support": n_gold[t]} for t in types}
    result: dict[str, Any] = _prf(sum(tp.values()), sum(n_pred.values()), sum(n_gold.values()))
    gold_types = [t for t in types if n_gold[t] > 0]
    result["macro_f1"] = sum(per_type[t]["f1"] for t in gold_types) / len(gold_types) if gold_types else 0.0
    result["per_type"] = per_type
    result["n_gold"] = sum(n_gold.values())
    result["n_pred"] = sum(n_pred.values())
    return result


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
        per_label[k] = {**_prf(tp, sum(1 for p in pred if p == k), sum(1 for g in gold if g == k))}
        per_label[k]["support"] = sum(1 for g in gold if g == k)
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
    micro = _prf(sum(tp), sum(n_pred), sum(n_gold))
    present = [k for k in range(num_labels) if n_gold[k] > 0]
    macro = sum(_prf(tp[k], n_pred[k], n_gold[k])["f1"] for k in present) / len(present) if present else 0.0
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
    if common == 0:
        return 0.0
    precision, recall = common / sum(hyp.values()), common / sum(ref.values())
    return 2 * precision * recall / (precision + recall)


__all__ = ["char_f1", "classification_scores", "entity_scores", "multilabel_scores"]
