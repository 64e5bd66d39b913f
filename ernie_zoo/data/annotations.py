"""Annotation-tool exports for information extraction: doccano JSONL and Label Studio JSON, read into one shape and
turned into UIE prompt examples.

    doccano (relation project, JSONL, one text per line):
        {"text": "李明毕业于北京大学", "entities": [{"id": 1, "start_offset": 0, "end_offset": 2, "label": "人物"},
         {"id": 2, "start_offset": 5, "end_offset": 9, "label": "学校"}],
         "relations": [{"id": 1, "from_id": 1, "to_id": 2, "type": "毕业院校"}]}
      (doccano's sequence-labelling export, `"label": [[start, end, "人物"], ...]`, is read too.)
    Label Studio (JSON export: one array of tasks):
        [{"data": {"text": ...}, "annotations": [{"result": [
            {"id": "a", "type": "labels", "value": {"start": 0, "end": 2, "labels": ["人物"]}},
            {"type": "relation", "from_id": "a", "to_id": "b", "labels": ["毕业院校"]}, ...]}]}]

    PaddleNLP UIE prompt examples (JSONL, what PaddleNLP's doccano.py writes, and what `write_prompt_examples`
    writes; read as they are, by `read_prompt_examples`):
        {"content": "李明毕业于北京大学", "prompt": "李明的毕业院校", "result_list": [{"text": "北京大学", "start": 5, "end": 9}]}

The format is detected from the content (an array of tasks with "data"/"annotations": Label Studio; JSON lines with
"content" and "prompt": UIE prompt examples; other JSON lines: doccano). Every row is checked and a bad one is named by file:line: text missing or empty, an entity's offsets outside
the text or not integers, two entities of the same label overlapping (one prompt's pointers cannot give both), an
entity id used twice, a relation from or to an entity id the row does not have.

`prompt_examples` turns annotated texts into what the span extractor learns (`ernie_zoo.text.extraction` prompts):

    entity prompts    "人物" -> [李明]            one per label present in the text
    relation prompts  "李明的毕业院校" -> [北京大学]  one per (subject, relation type)
    negative prompts  "地点" -> []  "李明的出生地" -> []  labels (relation types of the subject's label) absent from
                      the text, at most `negative_ratio` per positive prompt of the text, drawn with a seeded hash
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ernie_zoo.text.extraction import relation_prompt

from .labelled import read_text_file


@dataclass(frozen=True)
class Mention:
    id: Any
    start: int
    end: int
    label: str


@dataclass(frozen=True)
class Relation:
    from_id: Any
    to_id: Any
    type: str


@dataclass
class AnnotatedText:
    text: str
    entities: list[Mention] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    where: str = ""  # file:line


@dataclass(frozen=True)
class PromptExample:
    """One (prompt, text) pair and the character spans the prompt asks for (empty: a negative prompt)."""

    prompt: str
    text: str
    spans: tuple[tuple[int, int], ...] = ()


def detect_annotation_format(text: str) -> str:
    """ "label_studio" for a JSON array (Label Studio's export), "uie" for JSON lines of prompt examples
    ("content", "prompt"), "doccano" for other JSON lines."""
    if text.lstrip().startswith("["):
        return "label_studio"
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return "doccano"  # whose reader names the line
    return "uie" if isinstance(row, dict) and {"content", "prompt"} <= set(row) else "doccano"


def read_prompt_examples(path: str | Path, max_line_bytes: int | None = None) -> list[PromptExample]:
    """The prompt examples of a UIE JSONL file (see the module docstring); a bad line is named by file:line."""
    path = Path(path)
    content = read_text_file(path, max_line_bytes)
    out = []
    for n, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or not {"content", "prompt"} <= set(row):
            raise ValueError(f"{where}: a prompt example needs content, prompt and result_list")
        text = _text(row["content"], where)
        prompt = row["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{where}: the prompt is missing or empty")
        spans = set()
        for item in row.get("result_list") or []:
            start, end = (item.get("start"), item.get("end")) if isinstance(item, dict) else (None, None)
            ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end))
            if not ints or not 0 <= start < end <= len(text):
                raise ValueError(
                    f"{where}: result {item!r:.80} has offsets outside the text of {len(text)} characters"
                )
            if item.get("text") is not None and item["text"] != text[start:end]:
                raise ValueError(
                    f"{where}: result text {item['text']!r} != content[{start}:{end}] {text[start:end]!r}"
                )
            spans.add((start, end))
        out.append(PromptExample(prompt.strip(), text, tuple(sorted(spans))))
    if not out:
        raise ValueError(f"data file {path} has no prompt examples")
    return out


def write_prompt_examples(path: str | Path, examples: Iterable[PromptExample]) -> int:
    """Write `examples` as UIE JSONL (atomically: a temporary file renamed into place); returns their number."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for ex in examples:
            row = {
                "content": ex.text,
                "prompt": ex.prompt,
                "result_list": [{"text": ex.text[s:e], "start": s, "end": e} for s, e in ex.spans],
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n


def read_annotations(path: str | Path, max_line_bytes: int | None = None) -> list[AnnotatedText]:
    """The annotated texts of a doccano JSONL or Label Studio JSON export (format detected), every row checked."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data file {path} does not exist")
    content = read_text_file(path, max_line_bytes)
    if not content.strip():
        raise ValueError(f"data file {path} is empty")
    if detect_annotation_format(content) == "uie":
        raise ValueError(
            f"{path} holds prompt examples (content/prompt/result_list): read it with read_prompt_examples"
        )
    if detect_annotation_format(content) == "label_studio":
        rows = _label_studio(content, str(path))
    else:
        rows = _doccano(content, str(path))
    if not rows:
        raise ValueError(f"data file {path} has no annotated texts")
    return rows


def _line_of(content: str, pos: int) -> int:
    return content.count("\n", 0, pos) + 1


def _doccano(content: str, source: str) -> list[AnnotatedText]:
    rows = []
    for n, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{where}: not JSON ({e.msg}); doccano exports one JSON object per line"
            ) from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
        text = _text(row.get("text", row.get("data")), where)
        entities = []
        if isinstance(row.get("entities"), list):
            for e in row["entities"]:
                if not isinstance(e, dict) or not {"start_offset", "end_offset", "label"} <= set(e):
                    raise ValueError(
                        f"{where}: an entity needs start_offset, end_offset and label, got {e!r:.80}"
                    )
                entities.append((e.get("id"), e["start_offset"], e["end_offset"], e["label"]))
        elif isinstance(row.get("label"), list):  # sequence labelling export: [[start, end, label], ...]
            for i, e in enumerate(row["label"]):
                if not isinstance(e, list) or len(e) != 3:
                    raise ValueError(f"{where}: a label is [start, end, label], got {e!r:.80}")
                entities.append((f"label{i}", *e))
        elif row.get("entities", row.get("label")) is not None:
            raise ValueError(f"{where}: 'entities' must be a list of objects")
        relations = []
        for r in row.get("relations") or []:
            if not isinstance(r, dict) or not {"from_id", "to_id", "type"} <= set(r):
                raise ValueError(f"{where}: a relation needs from_id, to_id and type, got {r!r:.80}")
            relations.append((r["from_id"], r["to_id"], r["type"]))
        rows.append(_checked(text, entities, relations, where))
    return rows


def _label_studio(content: str, source: str) -> list[AnnotatedText]:
    decoder = json.JSONDecoder()
    pos = content.index("[") + 1
    rows = []
    while True:
        while pos < len(content) and content[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(content):
            raise ValueError(f"{source}: the JSON array is not closed")
        if content[pos] == "]":
            break
        where = f"{source}:{_line_of(content, pos)}"
        try:
            task, pos = decoder.raw_decode(content, pos)
        except json.JSONDecodeError as e:
            raise ValueError(f"{source}:{e.lineno}: not JSON ({e.msg})") from None
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise ValueError(f"{where}: a Label Studio task is an object with 'data': {{'text': ...}}")
        text = _text(task["data"].get("text"), where)
        done = [
            a for a in task.get("annotations") or [] if isinstance(a, dict) and not a.get("was_cancelled")
        ]
        entities, relations = [], []
        for item in done[0].get("result") or [] if done else []:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "labels":
                value = item.get("value") or {}
                labels = value.get("labels") or []
                if len(labels) != 1:
                    raise ValueError(f"{where}: a labelled span needs exactly one label, got {labels!r:.80}")
                entities.append((item.get("id"), value.get("start"), value.get("end"), labels[0]))
            elif kind == "relation":
                labels = item.get("labels") or []
                if len(labels) != 1:
                    raise ValueError(
                        f"{where}: relation {item.get('from_id')}->{item.get('to_id')} needs exactly one label "
                        f"(its relation type), got {labels!r:.80}"
                    )
                relations.append((item.get("from_id"), item.get("to_id"), labels[0]))
        rows.append(_checked(text, entities, relations, where))
    return rows


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: the text is missing or empty")
    return value


def _checked(text: str, entities: Iterable[tuple], relations: Iterable[tuple], where: str) -> AnnotatedText:
    mentions: list[Mention] = []
    ids: set[Any] = set()
    for eid, start, end, label in entities:
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end))
        if not ints or not 0 <= start < end <= len(text):
            raise ValueError(
                f"{where}: entity {eid!r} ({label!r}) has offsets [{start}, {end}) outside the text of "
                f"{len(text)} characters (offsets are characters, end exclusive)"
            )
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"{where}: entity {eid!r} has no label (got {label!r})")
        if eid is not None and eid in ids:
            raise ValueError(f"{where}: entity id {eid!r} is used twice")
        ids.add(eid)
        mentions.append(Mention(eid, start, end, label.strip()))
    by_label = sorted(mentions, key=lambda m: (m.label, m.start, m.end))
    for a, b in zip(by_label, by_label[1:]):
        if a.label == b.label and b.start < a.end:
            raise ValueError(
                f"{where}: entities {a.id!r} [{a.start}, {a.end}) {text[a.start : a.end]!r} and {b.id!r} "
                f"[{b.start}, {b.end}) {text[b.start : b.end]!r} of label {a.label!r} overlap"
            )
    links = []
    for from_id, to_id, kind in relations:
        for end_id in (from_id, to_id):
            if end_id is None or end_id not in ids:
                raise ValueError(
                    f"{where}: relation {kind!r} {from_id!r} -> {to_id!r} refers to entity {end_id!r}, which the "
                    "row does not have"
                )
        if not isinstance(kind, str) or not kind.strip():
            raise ValueError(f"{where}: relation {from_id!r} -> {to_id!r} has no type (got {kind!r})")
        links.append(Relation(from_id, to_id, kind.strip()))
    return AnnotatedText(text, sorted(mentions, key=lambda m: (m.start, m.end)), links, where)


def _draw(seed: int, key: str) -> bytes:
    return hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=8).digest()


def prompt_examples(
    rows: Sequence[AnnotatedText], negative_ratio: int = 3, seed: int = 0
) -> list[PromptExample]:
    """UIE prompt examples of `rows` (see the module docstring): entity, relation and negative prompts."""
    labels = sorted({m.label for row in rows for m in row.entities})
    # the relation types seen with each subject label: the relation prompts a subject of that label may get
    relation_types: dict[str, set[str]] = {}
    for row in rows:
        by_id = {m.id: m for m in row.entities}
        for r in row.relations:
            relation_types.setdefault(by_id[r.from_id].label, set()).add(r.type)
    out: list[PromptExample] = []
    for row in rows:
        text = row.text
        by_id = {m.id: m for m in row.entities}
        positive: dict[str, set[tuple[int, int]]] = {}
        for m in row.entities:
            positive.setdefault(m.label, set()).add((m.start, m.end))
        subjects: dict[tuple[int, int], Mention] = {}
        for r in row.relations:
            subject, target = by_id[r.from_id], by_id[r.to_id]
            subjects[(subject.start, subject.end)] = subject
            prompt = relation_prompt(text[subject.start : subject.end], r.type)
            positive.setdefault(prompt, set()).add((target.start, target.end))
        negative = [label for label in labels if label not in positive]
        for m in row.entities:  # relation types of the label this subject lacks
            for kind in sorted(relation_types.get(m.label, ())):
                prompt = relation_prompt(text[m.start : m.end], kind)
                if prompt not in positive and prompt not in negative:
                    negative.append(prompt)
        negative.sort(key=lambda p: _draw(seed, f"{text}\0{p}"))
        for prompt, spans in positive.items():
            out.append(PromptExample(prompt, text, tuple(sorted(spans))))
        keep = max(1, len(positive)) * negative_ratio
        out += [PromptExample(p, text) for p in negative[:keep]]
    return out


__all__ = [
    "AnnotatedText",
    "Mention",
    "PromptExample",
    "Relation",
    "detect_annotation_format",
    "prompt_examples",
    "read_annotations",
    "read_prompt_examples",
    "write_prompt_examples",
]
