"""Evaluation metrics: entity-span P/R/F1 (micro and per type), accuracy, macro-F1.

Spans are compared exactly: a predicted entity counts only if its start, end and type all match a
gold entity of the same sentence (the CoNLL / MSRA convention).  A span is a mapping with
``start``, ``end`` (exclusive) and ``type`` keys, or a ``(start, end, type)`` tuple.

>>> gold = [[{"start": 0, "end": 2, "type": "PER"}, {"start": 3, "end": 5, "type": "LOC"}]]
>>> pred = [[(0, 2, "PER"), (3, 4, "LOC")]]
>>> r = span_prf(gold, pred)
>>> r["micro"]["precision"], r["micro"]["recall"], r["micro"]["f1"]
(0.5, 0.5, 0.5)
>>> r["per_type"]["PER"]["f1"], r["per_type"]["LOC"]["f1"]
(1.0, 0.0)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["accuracy", "entity_names", "macro_f1", "prf", "recall_by_seen", "span_prf"]

Span = Mapping[str, Any] | tuple[int, int, str]


def prf(tp: int, fp: int, fn: int) -> dict[str, float | int]:
    """Precision, recall, F1 from counts (0.0 where a denominator is 0), with the counts themselves."""
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f, "tp": tp, "fp": fp, "fn": fn}


def _as_tuple(span: Span) -> tuple[int, int, str]:
    if isinstance(span, Mapping):
        try:
            s, e, t = span["start"], span["end"], span["type"]
        except KeyError as exc:
            raise ValueError(f"span {dict(span)} lacks key {exc}") from None
    elif isinstance(span, tuple) and len(span) == 3:
        s, e, t = span
    else:
        raise TypeError(f"a span must be a mapping with start/end/type or a 3-tuple, got {span!r}")
    if not (isinstance(s, int) and isinstance(e, int) and s < e):
        raise ValueError(f"span {span!r} must have integer start < end")
    return s, e, str(t)


def span_prf(
    gold: Sequence[Iterable[Span]],
    pred: Sequence[Iterable[Span]],
    types: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Exact-match span precision/recall/F1, micro-averaged over all spans, plus per entity type.

    Args:
        gold: per sentence, the gold spans.
        pred: per sentence, the predicted spans (same number of sentences as ``gold``).
        types: if given, only spans of these types are scored on both sides (e.g. drop a system's
            ``TIME``); otherwise every type seen in gold or pred is reported.

    Returns:
        ``{"micro": {...}, "per_type": {type: {...}}, "sentences": n}`` where each ``{...}`` holds
        ``precision``, ``recall``, ``f1``, ``tp``, ``fp``, ``fn``.  Duplicate spans within a
        sentence count once.

    Raises:
        ValueError: different numbers of sentences, or a malformed span.
    """
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} sentences but pred has {len(pred)}")
    keep = set(types) if types is not None else None
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    seen: set[str] = set(keep or ())
    for g_spans, p_spans in zip(gold, pred):
        g = {_as_tuple(s) for s in g_spans}
        p = {_as_tuple(s) for s in p_spans}
        if keep is not None:
            g = {s for s in g if s[2] in keep}
            p = {s for s in p if s[2] in keep}
        for s in g & p:
            tp[s[2]] += 1
        for s in p - g:
            fp[s[2]] += 1
        for s in g - p:
            fn[s[2]] += 1
        seen.update(s[2] for s in g | p)
    per_type = {t: prf(tp[t], fp[t], fn[t]) for t in sorted(seen)}
    micro = prf(sum(tp.values()), sum(fp.values()), sum(fn.values()))
    return {"micro": micro, "per_type": per_type, "sentences": len(gold)}


def entity_names(texts: Sequence[str], spans: Sequence[Iterable[Span]]) -> frozenset[tuple[str, str]]:
    """The (surface text, type) of every gold span of ``texts``: the names a tagger trained on them has seen.

    >>> sorted(entity_names(["李明在北京"], [[(0, 2, "PER"), {"start": 3, "end": 5, "type": "LOC"}]]))
    [('北京', 'LOC'), ('李明', 'PER')]
    """
    if len(texts) != len(spans):
        raise ValueError("texts and their span lists must have the same number of sentences")
    return frozenset(
        (text[s:e], t) for text, sent_spans in zip(texts, spans) for s, e, t in map(_as_tuple, sent_spans)
    )


def recall_by_seen(
    known: Collection[tuple[str, str]],
    texts: Sequence[str],
    gold: Sequence[Iterable[Span]],
    pred: Sequence[Iterable[Span]],
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
        found = {_as_tuple(p) for p in p_spans}
        for span in {_as_tuple(g) for g in g_spans}:
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
