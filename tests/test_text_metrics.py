"""The metrics (`ernie_zoo.text.metrics`, their one home) on hand-made cases: span precision/recall/F1, whose
fine-tuning layout (`entity_scores`) is the same computation, and the label and generation scores."""

from __future__ import annotations

import random

import pytest

from ernie_zoo.text.metrics import entity_scores, prf, span_scores


def test_hand_case():
    # sentence 1: gold PER(0,3) LOC(4,6); pred PER(0,3) ok, LOC(4,5) wrong boundary
    # sentence 2: gold ORG(0,4); pred ORG(0,4) ok, PER(5,7) spurious, LOC(0,4) wrong type
    # sentence 3: gold PER(1,3) missed; no prediction
    gold = [
        [{"start": 0, "end": 3, "type": "PER"}, {"start": 4, "end": 6, "type": "LOC"}],
        [(0, 4, "ORG")],
        [(1, 3, "PER")],
    ]
    pred = [[(0, 3, "PER"), (4, 5, "LOC")], [(0, 4, "ORG"), (5, 7, "PER"), (0, 4, "LOC")], []]
    r = span_scores(gold, pred)
    # tp = 2 (PER s1, ORG s2); fp = 3 (LOC s1, PER s2, LOC s2); fn = 2 (LOC s1, PER s3)
    assert (r["micro"]["tp"], r["micro"]["fp"], r["micro"]["fn"]) == (2, 3, 2)
    assert r["micro"]["precision"] == pytest.approx(2 / 5)
    assert r["micro"]["recall"] == pytest.approx(2 / 4)
    assert r["micro"]["f1"] == pytest.approx(2 * 0.4 * 0.5 / 0.9)
    assert r["per_type"]["PER"] == prf(1, 1, 1)
    assert r["per_type"]["LOC"] == prf(0, 2, 1)
    assert r["per_type"]["ORG"] == prf(1, 0, 0) and r["per_type"]["ORG"]["f1"] == 1.0
    assert r["macro_f1"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert r["sentences"] == 3


def test_type_filter_duplicates_and_errors():
    gold = [[(0, 2, "PER")]]
    pred = [[(0, 2, "PER"), (0, 2, "PER"), (3, 5, "TIME")]]
    r = span_scores(gold, pred, types=["PER", "LOC", "ORG"])
    # a duplicate prediction is one true and one false positive
    assert r["micro"]["recall"] == 1.0 and r["micro"]["precision"] == 0.5 and "TIME" not in r["per_type"]
    assert r["per_type"]["LOC"] == prf(0, 0, 0)  # requested types are always reported
    assert r["macro_f1"] == r["per_type"]["PER"]["f1"]  # types without gold spans are not averaged
    assert span_scores(gold, pred)["per_type"]["TIME"]["fp"] == 1
    assert span_scores([[]], [[]])["micro"]["f1"] == 0.0 and span_scores([[]], [[]])["macro_f1"] == 0.0
    with pytest.raises(ValueError, match="2 sentences"):
        span_scores([[], []], [[]])
    with pytest.raises(ValueError, match="start < end"):
        span_scores([[(3, 3, "PER")]], [[]])
    with pytest.raises(ValueError, match="lacks key"):
        span_scores([[{"start": 0, "end": 1}]], [[]])
    with pytest.raises(TypeError, match="3-tuple"):
        span_scores([[[0, 1, "PER"]]], [[]])
    with pytest.raises(ValueError, match="match"):
        span_scores([[]], [[]], match="fuzzy")


def test_overlap_match_pairs_each_gold_entity_once():
    gold = [[(0, 4, "ORG"), (5, 7, "PER")]]
    pred = [[(0, 2, "ORG"), (2, 4, "ORG"), (5, 8, "LOC")]]  # two fragments of one entity; a wrong type
    r = span_scores(gold, pred, match="overlap")
    assert (r["micro"]["tp"], r["micro"]["fp"], r["micro"]["fn"]) == (1, 2, 1)
    assert span_scores(gold, pred)["micro"]["tp"] == 0


def test_finetune_layout_is_the_same_computation():
    rng = random.Random(0)

    def sentence():
        return [
            (s, s + rng.randint(1, 3), rng.choice("ABC")) for s in rng.sample(range(12), rng.randint(0, 4))
        ]

    gold = [sentence() for _ in range(50)]
    pred = [sentence() + sentence()[:1] for _ in range(50)]
    for match in ("exact", "overlap"):
        flat, full = entity_scores(gold, pred, match), span_scores(gold, pred, match=match)
        micro = full["micro"]
        assert [flat[k] for k in ("precision", "recall", "f1", "macro_f1")] == [
            micro["precision"],
            micro["recall"],
            micro["f1"],
            full["macro_f1"],
        ]
        assert (flat["n_gold"], flat["n_pred"]) == (micro["tp"] + micro["fn"], micro["tp"] + micro["fp"])
        for t, s in full["per_type"].items():
            assert flat["per_type"][t] == {
                "precision": s["precision"],
                "recall": s["recall"],
                "f1": s["f1"],
                "support": s["tp"] + s["fn"],
            }


def test_prf_is_the_one_home_of_precision_recall_f1():
    """Fine-tuning's classification, multi-label and character F1 and the CSC sentence scores all come from
    `prf` (one formula; no second copy to drift)."""
    from ernie_zoo.text.correction import correction_scores
    from ernie_zoo.text.metrics import char_f1, classification_scores, multilabel_scores, prf

    assert prf(2, 1, 3, counts=False) == {"precision": 2 / 3, "recall": 0.4, "f1": 0.5}
    assert prf(0, 0, 0) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "tp": 0, "fp": 0, "fn": 0}
    per_label = classification_scores([0, 1, 1, 2], [0, 1, 2, 2], 3)["per_label"]
    assert per_label[1] == {**prf(1, 0, 1, counts=False), "support": 2}
    micro = multilabel_scores([[1, 0], [1, 1]], [[1, 1], [0, 1]])
    assert micro["micro_f1"] == prf(2, 1, 1)["f1"]
    assert char_f1("明月光", "明月") == prf(2, 0, 1)["f1"] and char_f1("a", "b") == 0.0
    scores = correction_scores(["我门好", "他很好"], ["我们好", "他很好"], ["我们好", "他很坏"])
    assert scores["sentence_f1"] == prf(1, 1, 0)["f1"]


def _old_char_f1(prediction: str, reference: str) -> float:  # evaluation/generation.py before the move
    from collections import Counter

    common = sum((Counter(prediction) & Counter(reference)).values())
    if not common:
        return 0.0
    p, r = common / len(prediction), common / len(reference)
    return 2 * p * r / (p + r)


def _old_rouge_l(prediction: str, reference: str) -> float:  # evaluation/generation.py before the move
    if not prediction or not reference:
        return 0.0
    prev = [0] * (len(reference) + 1)
    for a in prediction:
        cur = [0]
        for j, b in enumerate(reference):
            cur.append(prev[j] + 1 if a == b else max(prev[j + 1], cur[j]))
        prev = cur
    if not prev[-1]:
        return 0.0
    p, r = prev[-1] / len(prediction), prev[-1] / len(reference)
    return 2 * p * r / (p + r)


def test_one_char_f1_and_rouge_l_give_the_numbers_of_both_former_copies():
    """`char_f1` was defined twice (the generator eval's `(prediction, reference)`, fine-tuning's `(reference,
    hypothesis)` on `prf`); the one left gives both former results bit for bit, in either argument order."""
    from ernie_zoo.evaluation.generation import char_f1 as eval_char_f1
    from ernie_zoo.evaluation.generation import rouge_l as eval_rouge_l
    from ernie_zoo.text.metrics import char_f1, rouge_l

    assert eval_char_f1 is char_f1 and eval_rouge_l is rouge_l  # one definition, re-exported
    rng = random.Random(0)
    texts = ["", "a", "明月", "明月光", "床前明月光"] + [
        "".join(rng.choice("明月光床前地上霜举头望") for _ in range(rng.randint(0, 12))) for _ in range(300)
    ]
    for pred, ref in zip(texts, reversed(texts)):
        old = _old_char_f1(pred, ref)
        assert char_f1(pred, ref) == old == char_f1(ref, pred)
        assert old == _old_finetune_char_f1(ref, pred) == _old_finetune_char_f1(pred, ref)
        assert rouge_l(pred, ref) == _old_rouge_l(pred, ref)


def _old_finetune_char_f1(reference: str, hypothesis: str) -> float:  # finetune/metrics.py before the move
    from collections import Counter

    ref, hyp = Counter(reference), Counter(hypothesis)
    common = sum((ref & hyp).values())
    return prf(common, sum(hyp.values()) - common, sum(ref.values()) - common)["f1"]


def test_macro_f1_over_chosen_labels_is_fine_tunings_and_the_cards():
    """`macro_f1` averages over every label seen (the cards); fine-tuning's `classification_scores` over the
    labels with gold support, through the same function."""
    from ernie_zoo.text.metrics import classification_scores, macro_f1

    gold, pred = [0, 0, 1, 1, 1], [0, 2, 1, 1, 0]  # label 2 is only predicted
    seen = macro_f1(gold, pred)
    assert seen == pytest.approx((prf(1, 1, 1)["f1"] + prf(2, 0, 1)["f1"] + 0.0) / 3)
    scores = classification_scores(gold, pred, 3)
    assert scores["macro_f1"] == (prf(1, 1, 1)["f1"] + prf(2, 0, 1)["f1"]) / 2 != seen
    assert scores["macro_f1"] == macro_f1(gold, pred, labels=[0, 1]) and scores["accuracy"] == 3 / 5
    assert macro_f1(gold, pred, labels=[]) == 0.0
    with pytest.raises(ValueError, match="empty set"):
        macro_f1([], [])
