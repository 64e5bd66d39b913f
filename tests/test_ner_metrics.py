"""Fine-tuning metrics on hand-made cases: entity-level precision/recall/F1 (the layout fine-tuning logs), classification."""

from __future__ import annotations

import pytest

from ernie_zoo.text.metrics import classification_scores, entity_scores, multilabel_scores
from ernie_zoo.text.tags import Span

PER, LOC, ORG = "PER", "LOC", "ORG"


def test_perfect_prediction():
    gold = [[Span(0, 2, PER), Span(3, 7, ORG)], [Span(6, 8, LOC)]]
    s = entity_scores(gold, gold)
    assert s["precision"] == s["recall"] == s["f1"] == 1.0
    assert s["per_type"][ORG]["support"] == 1
    assert s["n_gold"] == s["n_pred"] == 3


def test_partial_and_overlapping_spans_count_as_errors():
    # gold: 北京大学 (ORG, 3-7); predictions: 北京 (LOC, 3-5) overlaps with the wrong type and end,
    # 北京大学读 (ORG, 3-8) overlaps with the right type but the wrong end.
    gold = [[Span(0, 2, PER), Span(3, 7, ORG)]]
    pred = [[Span(0, 2, PER), Span(3, 5, LOC), Span(3, 8, ORG)]]
    s = entity_scores(gold, pred)
    assert s["n_pred"] == 3 and s["n_gold"] == 2
    assert s["precision"] == pytest.approx(1 / 3)
    assert s["recall"] == pytest.approx(1 / 2)
    assert s["f1"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert s["per_type"][PER]["f1"] == 1.0
    assert s["per_type"][ORG] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert s["per_type"][LOC]["precision"] == 0.0 and s["per_type"][LOC]["support"] == 0
    # macro F1 averages the types that occur in the gold data (PER 1.0, ORG 0.0)
    assert s["macro_f1"] == pytest.approx(0.5)

    lenient = entity_scores(gold, pred, match="overlap")
    # overlap mode: 北京大学读 matches 北京大学 (same type, overlapping); 北京/LOC still does not
    assert lenient["precision"] == pytest.approx(2 / 3)
    assert lenient["recall"] == 1.0


def test_overlap_mode_matches_each_gold_entity_once():
    gold = [[Span(0, 4, ORG)]]
    pred = [[Span(0, 2, ORG), Span(2, 4, ORG)]]  # two fragments of one entity
    s = entity_scores(gold, pred, match="overlap")
    assert s["precision"] == 0.5 and s["recall"] == 1.0
    assert entity_scores(gold, pred)["f1"] == 0.0


def test_duplicate_predictions_are_not_double_counted():
    gold = [[Span(0, 2, PER)]]
    pred = [[Span(0, 2, PER), Span(0, 2, PER)]]
    s = entity_scores(gold, pred)
    assert s["recall"] == 1.0 and s["precision"] == 0.5


def test_spans_match_per_sentence_not_across_sentences():
    gold = [[Span(0, 2, PER)], []]
    pred = [[], [Span(0, 2, PER)]]
    s = entity_scores(gold, pred)
    assert s["f1"] == 0.0 and s["n_gold"] == 1 and s["n_pred"] == 1


def test_empty_inputs_and_errors():
    s = entity_scores([[]], [[]])
    assert s["f1"] == 0.0 and s["n_gold"] == 0
    with pytest.raises(ValueError, match="sentences"):
        entity_scores([[]], [[], []])
    with pytest.raises(ValueError, match="match"):
        entity_scores([[]], [[]], match="fuzzy")


def test_tuples_are_accepted():
    s = entity_scores([[(0, 2, "PER")]], [[(0, 2, "PER")]])
    assert s["f1"] == 1.0


def test_classification_and_multilabel_scores():
    s = classification_scores([0, 0, 1, 1], [0, 1, 1, 1], 2)
    assert s["accuracy"] == 0.75
    assert s["per_label"][0] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2}
    m = multilabel_scores([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]])
    assert m["micro_precision"] == 1.0 and m["micro_recall"] == pytest.approx(2 / 3)
    assert m["exact_match"] == 0.5
