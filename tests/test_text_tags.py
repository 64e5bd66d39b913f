"""The one tag codec (`ernie_zoo.text.tags`): lenient decoding of malformed sequences, strict mode, schemes, parsing,
encoding round trips. The expected spans of malformed sequences are the outputs recorded from the three decoders
it replaced (data/labelled.py, finetune/tagging.py, taskflow/ner.py), which agreed on every sequence they all
accepted."""

from __future__ import annotations

import doctest
import importlib
import itertools

import pytest

from ernie_zoo.text.tags import (
    Span,
    as_span,
    check_flat,
    detect_scheme,
    label_names,
    parse_tag,
    spans_to_tags,
    tags_to_spans,
)

PER, LOC, ORG = "PER", "LOC", "ORG"


@pytest.mark.parametrize(
    "tags, spans",
    [
        (["B-PER", "I-PER", "O", "B-LOC", "I-LOC"], [(0, 2, PER), (3, 5, LOC)]),  # BIO
        (
            ["B-PER", "E-PER", "O", "S-LOC", "B-ORG", "I-ORG", "E-ORG"],
            [(0, 2, PER), (3, 4, LOC), (4, 7, ORG)],
        ),
        (["B-PER", "M-PER", "E-PER", "S-PER", "O"], [(0, 3, PER), (3, 4, PER)]),  # BMES (MSRA)
        (["O", "O"], []),
        ([], []),
        # malformed: an inside/end tag that does not continue an entity of its type starts one
        (["O", "I-PER", "I-PER"], [(1, 3, PER)]),  # I-X after O
        (["I-LOC", "I-LOC", "O", "I-PER"], [(0, 2, LOC), (3, 4, PER)]),
        (["B-PER", "I-LOC"], [(0, 1, PER), (1, 2, LOC)]),  # B-X then I-Y
        (["B-PER", "I-LOC", "E-LOC"], [(0, 1, PER), (1, 3, LOC)]),
        (["E-PER"], [(0, 1, PER)]),  # E without B
        (["O", "E-PER", "O"], [(1, 2, PER)]),
        (["B-LOC", "O", "E-LOC"], [(0, 1, LOC), (2, 3, LOC)]),
        (["E-PER", "E-PER"], [(0, 1, PER), (1, 2, PER)]),
        (["B-PER", "E-LOC"], [(0, 1, PER), (1, 2, LOC)]),
        (["M-PER"], [(0, 1, PER)]),  # a single M
        (["M-PER", "M-LOC"], [(0, 1, PER), (1, 2, LOC)]),
        (["S-PER"], [(0, 1, PER)]),
        (["S-PER", "M-PER", "E-PER"], [(0, 1, PER), (1, 3, PER)]),  # S closes its own entity
        (["B-PER", "S-PER"], [(0, 1, PER), (1, 2, PER)]),
        (["B-PER", "B-PER", "E-PER"], [(0, 1, PER), (1, 3, PER)]),  # B closes the open entity
        (["B-PER", "M-PER"], [(0, 2, PER)]),  # no end tag: closes at the end
        (["B-PER", "I-PER", "E-PER", "I-PER"], [(0, 3, PER), (3, 4, PER)]),  # E closes
        (["I-PER", "M-PER", "E-PER"], [(0, 3, PER)]),  # I- and M- mixed (Taskflow accepted it)
        (["B_PER", "i_PER", "o", "S"], [(0, 2, PER), (3, 4, "")]),  # Taskflow's tag spellings
    ],
)
def test_lenient_decoding(tags, spans):
    assert tags_to_spans(tags) == [Span(*s) for s in spans]


def test_scheme_does_not_change_decoding_only_what_is_accepted():
    alphabet = ["O"] + [f"{p}-{t}" for t in (PER, LOC) for p in "BIMES"]
    for n in range(1, 4):
        for tags in itertools.product(alphabet, repeat=n):
            free = tags_to_spans(tags)
            for scheme, prefixes in (("bio", "BIO"), ("bioes", "BIESO"), ("bmes", "BMESO")):
                if all(t[0] in prefixes for t in tags):
                    assert tags_to_spans(tags, scheme) == free
                else:
                    with pytest.raises(ValueError, match=f"not valid in the {scheme.upper()} scheme"):
                        tags_to_spans(tags, scheme)


def test_strict_keeps_only_well_formed_entities():
    tags = ["O", "E-PER", "B-LOC", "M-LOC", "E-LOC", "S-ORG", "B-PER", "O", "M-ORG", "E-ORG"]
    assert tags_to_spans(tags, "bmes") == [
        Span(1, 2, PER),  # fragment: E after O
        Span(2, 5, LOC),
        Span(5, 6, ORG),
        Span(6, 7, PER),  # unclosed B
        Span(8, 10, ORG),  # fragment: starts with M
    ]
    assert tags_to_spans(tags, "bmes", strict=True) == [Span(2, 5, LOC), Span(5, 6, ORG)]
    assert tags_to_spans(tags, strict=True) == [Span(2, 5, LOC), Span(5, 6, ORG)]  # scheme detected
    bio = ["B-PER", "I-PER", "O", "I-LOC", "B-ORG", "B-ORG", "I-ORG"]
    assert tags_to_spans(bio, "bio") == [Span(0, 2, PER), Span(3, 4, LOC), Span(4, 5, ORG), Span(5, 7, ORG)]
    assert tags_to_spans(bio, "bio", strict=True) == [Span(0, 2, PER), Span(4, 5, ORG), Span(5, 7, ORG)]


def test_invalid_tags_and_schemes():
    with pytest.raises(ValueError, match="not valid in the BIO scheme"):
        tags_to_spans(["M-PER"], "bio")
    with pytest.raises(ValueError, match="invalid tag 'PER'"):
        tags_to_spans(["PER"])
    with pytest.raises(ValueError, match="unknown tagging scheme"):
        tags_to_spans(["O"], "iob3")
    for bad in ("positive", "B-", "-PER", "X-PER", "BI-PER", ""):
        with pytest.raises(ValueError, match="invalid tag"):
            parse_tag(bad)
    assert (
        parse_tag("B_LOC") == ("B", "LOC") and parse_tag("O") == ("O", None) and parse_tag("s") == ("S", "")
    )
    assert parse_tag("B-ORG-X") == ("B", "ORG-X")


def test_detect_scheme():
    assert detect_scheme(["B-PER", "I-PER", "O"]) == "bio"
    assert detect_scheme(["B-PER", "E-PER", "S-LOC"]) == "bioes"
    assert detect_scheme(["B-PER", "M-PER", "E-PER"]) == "bmes"
    with pytest.raises(ValueError, match="invalid tag 'X-PER'"):
        detect_scheme(["B-PER", "X-PER"])
    with pytest.raises(ValueError, match="mix"):
        detect_scheme(["B-PER", "I-PER", "O", "B-LOC", "M-LOC"])
    with pytest.raises(ValueError, match="needs a type"):
        detect_scheme(["B", "I"])


@pytest.mark.parametrize("scheme", ["bio", "bioes", "bmes"])
def test_spans_tags_round_trip(scheme):
    spans = [Span(0, 3, PER), Span(4, 5, LOC), Span(5, 7, ORG)]
    tags = spans_to_tags(spans, 8, scheme)
    assert len(tags) == 8 and tags[3] == "O" and tags[7] == "O"
    assert tags_to_spans(tags, scheme, strict=True) == spans
    as_dicts = [s._asdict() for s in spans]  # the on-disk form is accepted too
    assert spans_to_tags(as_dicts, 8, scheme) == tags
    if scheme == "bmes":
        assert tags == ["B-PER", "M-PER", "E-PER", "O", "S-LOC", "B-ORG", "E-ORG", "O"]
    with pytest.raises(ValueError, match="overlaps"):
        spans_to_tags(spans + [(2, 4, LOC)], 8, scheme)
    with pytest.raises(ValueError, match="out of range"):
        spans_to_tags(spans, 3, scheme)
    with pytest.raises(ValueError, match="unknown tagging scheme"):
        spans_to_tags(spans, 8, "iob")


def test_as_span_and_check_flat():
    assert as_span({"start": 0, "end": 2, "type": PER}) == as_span((0, 2, PER)) == Span(0, 2, PER)
    with pytest.raises(ValueError, match="start < end"):
        as_span((3, 3, PER))
    with pytest.raises(ValueError, match="lacks key"):
        as_span({"start": 0, "end": 1})
    with pytest.raises(TypeError, match="3-tuple"):
        as_span([0, 1, PER])
    check_flat([Span(0, 2, PER), Span(2, 4, LOC)], "ok")
    with pytest.raises(ValueError, match="x.jsonl: entities .* overlap"):
        check_flat([Span(0, 3, PER), Span(2, 4, LOC)], "x.jsonl")


def test_label_names():
    assert label_names([LOC, PER], "bio") == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert label_names([LOC], "bioes") == ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]


@pytest.mark.parametrize("module", ["tags", "metrics", "sentences"])
def test_docstring_examples_of_the_text_modules(module):
    result = doctest.testmod(importlib.import_module(f"ernie_zoo.text.{module}"))
    assert result.failed == 0 and result.attempted >= 2
