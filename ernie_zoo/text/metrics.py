"""The package's metrics, in one place (standard library only): P/R/F1 from counts (`prf`), which every F1 below
uses; entity spans (`span_scores`, and `entity_scores`: its layout in fine-tuning logs; `entity_names`,
`recall_by_seen`); labels (`accuracy`, `macro_f1`, `classification_scores`, `multilabel_scores`); generated text
(`char_f1`, `rouge_l`, `distinct2`). The fine-tuning dev scores and the model cards' scores are the same functions.

Entity spans: a span is a `Span`, a ``(start, end, type)`` tuple or a ``{"start", "end", "type"}`` mapping (end
exclusive). A predicted entity counts only if its start, end and type all match a gold entity of the same sentence (the
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
from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Any

from .tags import Span, as_span

_PRF = ("precision", "recall", "f1")


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


def entity_scores(
    gold: Sequence[Sequence[Any]], pred: Sequence[Sequence[Any]], match: str = "exact"
) -> dict[str, Any]:
    """`span_scores` in the layout fine-tuning logs: {"precision", "recall", "f1", "macro_f1",
    "per_type": {type: {precision, recall, f1, support}}, "n_gold", "n_pred"}."""
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


def macro_f1(
    gold: Sequence[Hashable], pred: Sequence[Hashable], labels: Sequence[Hashable] | None = None
) -> float:
    """Unweighted mean of the per-label F1 over ``labels``: by default every label in gold or pred (a label only
    predicted counts too; the cards' macro F1), `classification_scores` passes the labels with gold support."""
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels but pred has {len(pred)}")
    if labels is None:
        labels = sorted(set(gold) | set(pred), key=str)
        if not labels:
            raise ValueError("macro_f1 of an empty set is undefined")
    if not labels:
        return 0.0
    scores = []
    for lab in labels:
        tp = sum(g == lab and p == lab for g, p in zip(gold, pred))
        fp = sum(g != lab and p == lab for g, p in zip(gold, pred))
        fn = sum(g == lab and p != lab for g, p in zip(gold, pred))
        scores.append(prf(tp, fp, fn)["f1"])
    return sum(scores) / len(scores)


def classification_scores(gold: Sequence[int], pred: Sequence[int], num_labels: int) -> dict[str, Any]:
    """Accuracy, macro F1 (over the labels with gold support) and per-label precision/recall/F1 for single-label
    classification: fine-tuning's dev and test scores."""
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels but pred has {len(pred)}")
    if not gold:
        raise ValueError("no examples to score")
    per_label = {}
    for k in range(num_labels):
        tp = sum(1 for g, p in zip(gold, pred) if g == k and p == k)
        n_pred, support = sum(1 for p in pred if p == k), sum(1 for g in gold if g == k)
        per_label[k] = {**prf(tp, n_pred - tp, support - tp, counts=False), "support": support}
    present = [k for k in range(num_labels) if per_label[k]["support"] > 0]
    return {
        "accuracy": accuracy(gold, pred),
        "macro_f1": macro_f1(gold, pred, labels=present),
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


def char_f1(prediction: str, reference: str) -> float:
    """F1 of the character multisets (bag of characters), 0 when either is empty: a coarse generation score
    (symmetric: the arguments may come in either order)."""
    common = sum((Counter(prediction) & Counter(reference)).values())
    return prf(common, len(prediction) - common, len(reference) - common)["f1"]


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1 on characters (longest common subsequence)."""
    prev = [0] * (len(reference) + 1)
    for a in prediction:
        cur = [0]
        for j, b in enumerate(reference):
            cur.append(prev[j] + 1 if a == b else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    return prf(lcs, len(prediction) - lcs, len(reference) - lcs)["f1"]


def distinct2(text: str) -> float:
    """Distinct character bigrams / bigrams (1.0 for texts under two characters): a repetition check."""
    grams = [text[i : i + 2] for i in range(len(text) - 1)]
    return len(set(grams)) / len(grams) if grams else 1.0
