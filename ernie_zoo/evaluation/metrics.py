"""Evaluation metrics: accuracy, macro-F1, and which gold entities a tagger finds by whether it saw their names.

Entity-span precision/recall/F1 is `ernie_zoo.text.metrics.span_scores` (the fine-tuning dev F1 uses it too).
A span is a mapping with ``start``, ``end`` (exclusive) and ``type`` keys, or a ``(start, end, type)`` tuple.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Any

from ernie_zoo.text.metrics import prf
from ernie_zoo.text.tags import as_span

__all__ = ["accuracy", "entity_names", "macro_f1", "recall_by_seen"]


def entity_names(texts: Sequence[str], spans: Sequence[Iterable[Any]]) -> frozenset[tuple[str, str]]:
    """The (surface text, type) of every gold span of ``texts``: the names a tagger trained on them has seen.

    >>> sorted(entity_names(["李明在北京"], [[(0, 2, "PER"), {"start": 3, "end": 5, "type": "LOC"}]]))
    [('北京', 'LOC'), ('李明', 'PER')]
    """
    if len(texts) != len(spans):
        raise ValueError("texts and their span lists must have the same number of sentences")
    return frozenset(
        (text[s:e], t) for text, sent_spans in zip(texts, spans) for s, e, t in map(as_span, sent_spans)
    )


def recall_by_seen(
    known: Collection[tuple[str, str]],
    texts: Sequence[str],
    gold: Sequence[Iterable[Any]],
    pred: Sequence[Iterable[Any]],
) -> dict[str, Any]:
    """Recall of the gold spans of ``texts``, split by whether the span's (surface text, type) is in ``known``
    (`entity_names` of the training sentences): how much a tagger relies on names it has seen.

    Returns ``{"seen": {"gold": n, "found": k, "recall": r}, "unseen": {...}, "unseen_share": share of gold}``.

    >>> known = entity_names(["李明来了"], [[(0, 2, "PER")]])
    >>> recall_by_seen(known, ["李明和王芳"], [[(0, 2, "PER"), (3, 5, "PER")]], [[(0, 2, "PER")]])
    {'seen': {'gold': 1, 'found': 1, 'recall': 1.0}, 'unseen': {'gold': 1, 'found': 0, 'recall': 0.0}, 'unseen_share': 0.5}
    """
    if not len(texts) == len(gold) == len(pred):
        raise ValueError("texts and their span lists must have the same number of sentences")
    counts = {"seen": [0, 0], "unseen": [0, 0]}
    for text, g_spans, p_spans in zip(texts, gold, pred):
        found = set(map(as_span, p_spans))
        for span in set(map(as_span, g_spans)):
            bucket = counts["seen" if (text[span[0] : span[1]], span[2]) in known else "unseen"]
            bucket[0] += 1
            bucket[1] += span in found
    out: dict[str, Any] = {
        k: {"gold": n, "found": f, "recall": f / n if n else 0.0} for k, (n, f) in counts.items()
    }
    total = counts["seen"][0] + counts["unseen"][0]
    out["unseen_share"] = counts["unseen"][0] / total if total else 0.0
    return out


def accuracy(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> float:
    """Share of positions where ``pred`` equals ``gold``.

    Raises:
        ValueError: different lengths or empty input.
    """
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels but pred has {len(pred)}")
    if not gold:
        raise ValueError("accuracy of an empty set is undefined")
    return sum(g == p for g, p in zip(gold, pred)) / len(gold)


def macro_f1(gold: Sequence[Hashable], pred: Sequence[Hashable]) -> float:
    """Unweighted mean over the gold labels of the per-label F1 (labels only predicted count too)."""
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels but pred has {len(pred)}")
    labels = sorted(set(gold) | set(pred), key=str)
    if not labels:
        raise ValueError("macro_f1 of an empty set is undefined")
    scores = []
    for lab in labels:
        tp = sum(g == lab and p == lab for g, p in zip(gold, pred))
        fp = sum(g != lab and p == lab for g, p in zip(gold, pred))
        fn = sum(g == lab and p != lab for g, p in zip(gold, pred))
        scores.append(prf(tp, fp, fn)["f1"])
    return sum(scores) / len(scores)
