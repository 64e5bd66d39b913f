"""The hand-labelled relation set (``data/eval/relations``, issue #48) and its evaluator.

The set: MSRA news sentences (from the NER builder's dev carve-out, so never trained or pretrained on) labelled by
reading with five entity types and eight relation types (``data/eval/relations/GUIDE.md``), as a doccano relation
export. :data:`RELATION_TYPES` is the one place that says which subject and object types each relation joins; the
builder (``scripts/build_relations.py``) checks every row against it.

The evaluator runs ``Taskflow("information_extraction", schema=SCHEMA)`` over a split and scores

* **entities**: a (type, start, end) span is right when its type and character offsets equal a gold entity's;
* **triples**: (subject type, subject text, relation, object text). A relation prompt is "<subject>的<relation>"
  (``ernie_zoo.text.extraction.relation_prompt``), so two mentions of one name get the same answers: a triple is
  keyed by the subject's and object's *text* within its sentence, and each distinct triple counts once per sentence.

micro precision / recall / F1 over the split, and per type. ``score_predictions`` is the arithmetic alone (no model).

    python -m ernie_zoo.evaluation.relations --model runs/ie --split test --out bench/results/ie_relations.json
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ernie_zoo.data.annotations import AnnotatedText, read_annotations
from ernie_zoo.recipe_cli import command_main

logger = logging.getLogger(__name__)

__all__ = [
    "ENTITY_TYPES",
    "RELATIONS_DIR",
    "RELATION_TYPES",
    "SCHEMA",
    "check_row",
    "evaluate_relations",
    "gold_entities",
    "gold_triples",
    "load_relation_split",
    "predicted_entities",
    "predicted_triples",
    "score_predictions",
]

RELATIONS_DIR = Path(__file__).resolve().parents[2] / "data" / "eval" / "relations"

#: the entity labels of the set
ENTITY_TYPES: tuple[str, ...] = ("人物", "机构", "地点", "职务", "时间")
#: relation -> (the subject labels it may start from, the object label it points to)
RELATION_TYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "任职机构": (("人物",), "机构"),
    "职务": (("人物",), "职务"),
    "国籍": (("人物",), "地点"),
    "籍贯": (("人物",), "地点"),
    "毕业院校": (("人物",), "机构"),
    "所在地": (("机构", "地点"), "地点"),
    "创始人": (("机构",), "人物"),
    "成立时间": (("机构",), "时间"),
}


def _schema() -> dict[str, list[str] | None]:
    relations: dict[str, list[str]] = {t: [] for t in ENTITY_TYPES}
    for name, (subjects, _) in RELATION_TYPES.items():
        for subject in subjects:
            relations[subject].append(name)
    return {t: (relations[t] or None) for t in ENTITY_TYPES}


#: the Taskflow schema that asks for every entity type and every relation of the set
SCHEMA: dict[str, list[str] | None] = _schema()

Span = tuple[str, int, int]  # (type, start, end)
Triple = tuple[str, str, str, str]  # (subject type, subject text, relation, object text)


def check_row(row: AnnotatedText, where: str) -> None:
    """ValueError naming ``where`` unless every entity label and relation (type, subject label, object label) of
    ``row`` is one :data:`ENTITY_TYPES` / :data:`RELATION_TYPES` allows, and no two entities overlap."""
    by_id = {m.id: m for m in row.entities}
    spans = sorted((m.start, m.end) for m in row.entities)
    for m in row.entities:
        if m.label not in ENTITY_TYPES:
            raise ValueError(f"{where}: entity label {m.label!r} is not one of {ENTITY_TYPES}")
        if not 0 <= m.start < m.end <= len(row.text):
            raise ValueError(f"{where}: entity {m.id!r} offsets {m.start}:{m.end} outside the text")
    for (_, end), (start, _) in zip(spans, spans[1:]):
        if start < end:
            raise ValueError(f"{where}: entities overlap (the set is flat): {spans}")
    for r in row.relations:
        if r.type not in RELATION_TYPES:
            raise ValueError(f"{where}: relation type {r.type!r} is not one of {list(RELATION_TYPES)}")
        subjects, obj = RELATION_TYPES[r.type]
        s, o = by_id[r.from_id], by_id[r.to_id]
        if s.label not in subjects or o.label != obj:
            raise ValueError(
                f"{where}: {r.type} joins {'/'.join(subjects)} -> {obj}, got {s.label} -> {o.label} "
                f"({row.text[s.start : s.end]} -> {row.text[o.start : o.end]})"
            )


def load_relation_split(split: str, directory: str | Path = RELATIONS_DIR) -> list[AnnotatedText]:
    """The rows of ``<directory>/<split>.jsonl`` read with the project's doccano reader and checked
    (:func:`check_row`); ``split`` is ``dev``, ``test`` or ``labelled`` (both)."""
    if split not in ("dev", "test", "labelled"):
        raise ValueError(f"split must be dev, test or labelled, got {split!r}")
    path = Path(directory) / f"{split}.jsonl"
    rows = read_annotations(path)
    for n, row in enumerate(rows, 1):
        check_row(row, f"{path}:{n}")
    return rows


def gold_entities(row: AnnotatedText) -> set[Span]:
    return {(m.label, m.start, m.end) for m in row.entities}


def gold_triples(row: AnnotatedText) -> set[Triple]:
    by_id = {m.id: m for m in row.entities}
    out = set()
    for r in row.relations:
        s, o = by_id[r.from_id], by_id[r.to_id]
        out.add((s.label, row.text[s.start : s.end], r.type, row.text[o.start : o.end]))
    return out


def predicted_entities(result: dict[str, list[dict[str, Any]]]) -> set[Span]:
    """The top-level findings of one Taskflow result (``{type: [{"text", "start", "end", ...}]}``)."""
    return {(kind, item["start"], item["end"]) for kind, items in result.items() for item in items}


def predicted_triples(result: dict[str, list[dict[str, Any]]]) -> set[Triple]:
    """(subject type, subject text, relation, object text) of one Taskflow result's first relation level."""
    out = set()
    for kind, items in result.items():
        for item in items:
            for relation, objects in (item.get("relations") or {}).items():
                out |= {(kind, item["text"], relation, o["text"]) for o in objects}
    return out


@dataclass
class _Tally:
    tp: Counter
    n_pred: Counter
    n_gold: Counter

    @classmethod
    def new(cls) -> _Tally:
        return cls(Counter(), Counter(), Counter())

    def add(self, gold: set, pred: set, key: int) -> None:
        for item in gold:
            self.n_gold[item[key]] += 1
        for item in pred:
            self.n_pred[item[key]] += 1
        for item in gold & pred:
            self.tp[item[key]] += 1

    def scores(self) -> dict[str, Any]:
        def prf(tp: int, n_pred: int, n_gold: int) -> dict[str, Any]:
            p = tp / n_pred if n_pred else 0.0
            r = tp / n_gold if n_gold else 0.0
            f = 2 * p * r / (p + r) if p + r else 0.0
            return {"precision": p, "recall": r, "f1": f, "tp": tp, "pred": n_pred, "gold": n_gold}

        total = prf(sum(self.tp.values()), sum(self.n_pred.values()), sum(self.n_gold.values()))
        kinds = sorted(set(self.n_gold) | set(self.n_pred))
        total["per_type"] = {k: prf(self.tp[k], self.n_pred[k], self.n_gold[k]) for k in kinds}
        return total


def score_predictions(
    rows: Sequence[AnnotatedText], results: Sequence[dict[str, list[dict[str, Any]]]]
) -> dict[str, Any]:
    """Micro P/R/F1 of ``results`` (one Taskflow result dict per row) against ``rows``: ``entities`` (per
    entity type) and ``triples`` (per relation type), each with its tp / pred / gold counts."""
    if len(rows) != len(results):
        raise ValueError(f"{len(results)} results for {len(rows)} annotated texts")
    entities, triples = _Tally.new(), _Tally.new()
    for row, result in zip(rows, results):
        entities.add(gold_entities(row), predicted_entities(result), key=0)
        triples.add(gold_triples(row), predicted_triples(result), key=2)
    return {"texts": len(rows), "entities": entities.scores(), "triples": triples.scores()}


def evaluate_relations(
    model_dir: str | Path,
    splits: Iterable[str] = ("test",),
    directory: str | Path = RELATIONS_DIR,
    batch_size: int = 16,
    position_prob: float = 0.5,
) -> dict[str, Any]:
    """Run ``Taskflow("information_extraction", schema=SCHEMA)`` from ``model_dir`` over each split of the set
    and score it (:func:`score_predictions`); the set's files are read (and refused when malformed) first."""
    from ernie_zoo.taskflow import Taskflow

    data = {s: load_relation_split(s, directory) for s in splits}
    flow = Taskflow(
        "information_extraction",
        task_path=str(model_dir),
        schema=SCHEMA,
        batch_size=batch_size,
        position_prob=position_prob,
    )
    out: dict[str, Any] = {"model": str(model_dir), "schema": SCHEMA}
    for split, rows in data.items():
        results = flow([r.text for r in rows])
        out[split] = score_predictions(rows, results)
        logger.info(
            "%s: entity F1 %.4f, triple F1 %.4f",
            split,
            out[split]["entities"]["f1"],
            out[split]["triples"]["f1"],
        )
    return out


@dataclass
class Args:
    """Score an information-extraction model on the hand-labelled relation set (data/eval/relations)."""

    model: Path = Path("runs/ie")
    """The model directory (what `ernie-finetune --task information_extraction` writes)."""
    splits: tuple[str, ...] = ("test",)
    """Which splits to score (dev, test)."""
    data_dir: Path = RELATIONS_DIR
    """The set's directory."""
    batch_size: int = 16
    """Taskflow batch size."""
    position_prob: float = 0.5
    """Pointer threshold of the span decoder."""
    out: Path | None = None
    """Write the scores to this JSON file (else print them)."""


def run(args: Args, argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    scores = evaluate_relations(args.model, args.splits, args.data_dir, args.batch_size, args.position_prob)
    text = json.dumps(scores, ensure_ascii=False, indent=1)
    if args.out is None:
        print(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(Args, run, "python -m ernie_zoo.evaluation.relations", __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
