"""Entity-level precision/recall/F1 on hand-made cases, and the span <-> tag codec used around it."""

from __future__ import annotations

import pytest

from ernie_zoo.finetune.metrics import classification_scores, entity_scores, multilabel_scores
from ernie_zoo.finetune.tagging import Span, detect_scheme, label_names, spans_to_tags, tags_to_spans

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


def test_tags_to_spans_all_schemes():
    text = "张伟在北京大学读书"
    bio = ["B-PER", "I-PER", "O", "B-ORG", "I-ORG", "I-ORG", "I-ORG", "O", "O"]
    bioes = ["B-PER", "E-PER", "O", "B-ORG", "I-ORG", "I-ORG", "E-ORG", "O", "O"]
    bmes = ["B-PER", "E-PER", "O", "B-ORG", "M-ORG", "M-ORG", "E-ORG", "O", "O"]
    expected = [Span(0, 2, PER), Span(3, 7, ORG)]
    for tags, scheme in ((bio, "bio"), (bioes, "bioes"), (bmes, "bmes")):
        assert detect_scheme(tags) == scheme
        assert tags_to_spans(tags) == expected
    assert [text[s.start : s.end] for s in expected] == ["张伟", "北京大学"]
    assert tags_to_spans(["S-LOC", "O"]) == [Span(0, 1, LOC)]


def test_lenient_decoding_of_broken_sequences():
    # an I- tag after O starts an entity (conlleval); a type change splits
    assert tags_to_spans(["O", "I-PER", "I-PER"], "bio") == [Span(1, 3, PER)]
    assert tags_to_spans(["B-PER", "I-LOC"], "bio") == [Span(0, 1, PER), Span(1, 2, LOC)]


def test_spans_to_tags_roundtrip_and_errors():
    spans = [Span(0, 2, PER), Span(3, 4, LOC), Span(5, 9, ORG)]
    for scheme in ("bio", "bioes"):
        tags = spans_to_tags(spans, 10, scheme)
        assert tags_to_spans(tags, scheme) == spans
    assert spans_to_tags([Span(3, 4, LOC)], 5, "bioes")[3] == "S-LOC"
    with pytest.raises(ValueError, match="overlaps"):
        spans_to_tags([Span(0, 3, PER), Span(2, 4, LOC)], 5)
    with pytest.raises(ValueError, match="out of range"):
        spans_to_tags([Span(3, 7, PER)], 5)


def test_detect_scheme_rejects_bad_tags():
    with pytest.raises(ValueError, match="invalid tag"):
        detect_scheme(["B-PER", "X-PER"])
    with pytest.raises(ValueError, match="mix"):
        detect_scheme(["B-PER", "I-PER", "O", "B-LOC", "M-LOC"])


def test_label_names():
    assert label_names(["LOC", "PER"], "bio") == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert len(label_names(["LOC"], "bioes")) == 5


def test_classification_and_multilabel_scores():
    s = classification_scores([0, 0, 1, 1], [0, 1, 1, 1], 2)
    assert s["accuracy"] == 0.75
    assert s["per_label"][0] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2}
    m = multilabel_scores([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]])
    assert m["micro_precision"] == 1.0 and m["micro_recall"] == pytest.approx(2 / 3)
    assert m["exact_match"] == 0.5
