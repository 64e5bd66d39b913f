"""Entity-span precision/recall/F1: the one computation behind the fine-tuning dev F1 and the model cards.

A predicted entity counts only if its start, end and type all match a gold entity of the same sentence (the
CoNLL / MSRA convention, `match="exact"`). `match="overlap"` is the lenient variant some Chinese NER papers
report: a prediction matches a gold entity of the same type that it overlaps, each gold entity at most once.
Spans are counted as a multiset: a system that predicts one entity twice gets one true and one false
positive (a set would hide the duplicate). Tag decoding and the gold data never produce duplicates, so the
recorded model-card numbers, computed when duplicates counted once, are unchanged.

>>> gold = [[{"start": 0, "end": 2, "type": "PER"}, {"start": 3, "end": 5, "type": "LOC"}]]
>>> r = span_scores(gold, [[(0, 2, "PER"), (3, 4, "LOC")]])
>>> r["micro"]["precision"], r["micro"]["recall"], r["micro"]["f1"], r["macro_f1"]
(0.5, 0.5, 0.5, 0.5)
>>> r["per_type"]["PER"]["f1"], r["per_type"]["LOC"]["f1"]
(1.0, 0.0)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from .tags import Span, as_span


def prf(tp: int, fp: int, fn: int, *, counts: bool = True) -> dict[str, float | int]:
    """Precision, recall, F1 from counts (0.0 where a denominator is 0), with the counts themselves unless
    `counts=False`. The one P/R/F1 of the package: entity spans, CSC sentences and characters, fine-tuning's
    classification and multi-label scores, character-overlap F1."""
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    scores = {"precision": p, "recall": r, "f1": f}
    return {**scores, "tp": tp, "fp": fp, "fn": fn} if counts else scores


def _match_overlap(gold: list[Span], pred: list[Span]) -> int:
    """Greedy one-to-one matching of overlapping spans of one type (largest overlap first)."""
    pairs = sorted(
        (-(min(g.end, p.end) - max(g.start, p.start)), i, j)
        for i, g in enumerate(gold)
        for j, p in enumerate(pred)
        if min(g.end, p.end) > max(g.start, p.start)
    )
    used_g, used_p = set(), set()
    for _, i, j in pairs:
        if i not in used_g and j not in used_p:
            used_g.add(i)
            used_p.add(j)
    return len(used_g)


def span_scores(
    gold: Sequence[Iterable[Any]],
    pred: Sequence[Iterable[Any]],
    *,
    types: Iterable[str] | None = None,
    match: str = "exact",
) -> dict[str, Any]:
    """Micro precision/recall/F1 over all spans, per entity type, and macro F1.

    Args:
        gold, pred: per sentence, the spans (`Span`s, (start, end, type) tuples or {"start", "end", "type"}
            dicts); the same number of sentences on both sides.
        types: if given, only spans of these types are scored on both sides (e.g. drop a system's TIME), and
            each of them is reported even when absent; otherwise every type seen in gold or pred is.
        match: "exact" or "overlap" (see the module docstring).

    Returns:
        `{"micro": {...}, "per_type": {type: {...}}, "macro_f1": f, "sentences": n}` where each `{...}` holds
        precision, recall, f1, tp, fp, fn (support = tp + fn) and macro_f1 is the mean F1 of the types with
        gold spans.

    Raises:
        ValueError: different numbers of sentences, a malformed span, or an unknown `match`.
    """
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} sentences but pred has {len(pred)}")
    if match not in ("exact", "overlap"):
        raise ValueError(f"match must be 'exact' or 'overlap', got {match!r}")
    keep = set(types) if types is not None else None
    tp: Counter[str] = Counter()
    n_gold: Counter[str] = Counter({t: 0 for t in keep or ()})
    n_pred: Counter[str] = Counter()
    for g_sent, p_sent in zip(gold, pred):
        g = [s for s in map(as_span, g_sent) if keep is None or s.type in keep]
        p = [s for s in map(as_span, p_sent) if keep is None or s.type in keep]
        n_gold.update(s.type for s in g)
        n_pred.update(s.type for s in p)
        if match == "exact":
            tp.update(s.type for s in (Counter(g) & Counter(p)).elements())
        else:
            for kind in {s.type for s in g} & {s.type for s in p}:
                tp[kind] += _match_overlap([s for s in g if s.type == kind], [s for s in p if s.type == kind])
    kinds = sorted(set(n_gold) | set(n_pred))
    per_type = {t: prf(tp[t], n_pred[t] - tp[t], n_gold[t] - tp[t]) for t in kinds}
    micro = prf(
        sum(tp.values()), sum(n_pred.values()) - sum(tp.values()), sum(n_gold.values()) - sum(tp.values())
    )
    with_gold = [per_type[t]["f1"] for t in kinds if n_gold[t]]
    macro = sum(with_gold) / len(with_gold) if with_gold else 0.0
    return {"micro": micro, "per_type": per_type, "macro_f1": macro, "sentences": len(gold)}


__all__ = ["prf", "span_scores"]
