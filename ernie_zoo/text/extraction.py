"""Schemas of information extraction (PaddleNLP UIE's three forms) and the prompts a span extractor reads.

A schema names what to extract:

    ["时间", "选手", "赛事名称"]                      entity types
    {"人物": ["出生地", "毕业院校"]}                  a subject type and its relations
    {"人物": [{"毕业院校": ["所在城市"]}]}            deeper: each relation's object has relations of its own
    "人物"                                           one type

A list may mix names and dicts (`["时间", {"人物": ["毕业院校"]}]`); a dict's value is a name, a list, a dict or
None (no relations). `parse_schema` turns any of them into a tuple of `SchemaNode` trees and refuses, with a message
naming the place: an empty schema, a name that is not a non-empty string, a name twice among its siblings, a schema
that contains itself (a Python list or dict reachable from itself) and one of more than `MAX_SCHEMA_NODES` names
(each name is at least one forward pass per text chunk).

Prompts: a root type is its own prompt ("人物"); a relation of a found subject is "<subject>的<relation>"
("李明的毕业院校"), as UIE words it. Fine-tuning data (`ernie_zoo.data.annotations`) and Taskflow build prompts with
the same `relation_prompt`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: the most type and relation names one schema may hold
MAX_SCHEMA_NODES = 1000
#: the longest name, in characters (a prompt takes room from the text in every chunk)
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class SchemaNode:
    """One name of a schema: a root entity type, or a relation whose subject is the parent's finding."""

    name: str
    children: tuple[SchemaNode, ...] = ()

    def to_json(self) -> Any:
        return {self.name: [c.to_json() for c in self.children]} if self.children else self.name


def relation_prompt(subject: str, relation: str) -> str:
    """The prompt asking for `relation` of the found `subject`: "李明的毕业院校"."""
    return f"{subject}的{relation}"


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(
            f"schema {where}: a type or relation name must be a string, got {type(value).__name__} {value!r:.40}"
        )
    name = value.strip()
    if not name:
        raise ValueError(f"schema {where}: a type or relation name must not be empty")
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"schema {where}: name {name[:20]!r}... is longer than {MAX_NAME_CHARS} characters")
    return name


def parse_schema(schema: Any) -> tuple[SchemaNode, ...]:
    """The trees of `schema` (see the module docstring); ValueError naming the problem and where it is."""
    count = 0

    def nodes(value: Any, where: str, path: tuple[int, ...]) -> list[SchemaNode]:
        nonlocal count
        if isinstance(value, (list, tuple, dict)):
            if id(value) in path:
                raise ValueError(f"schema {where}: the schema contains itself (a cycle)")
            path = (*path, id(value))
        if value is None:
            return []
        if isinstance(value, str):
            items: list[tuple[str, Any]] = [(_name(value, where), None)]
        elif isinstance(value, dict):
            items = [(_name(k, f"{where}: key {k!r:.40}"), v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            out: list[SchemaNode] = []
            for i, item in enumerate(value):
                if not isinstance(item, (str, dict)):
                    raise ValueError(
                        f"schema {where}[{i}]: items are names or {{name: relations}} dicts, got "
                        f"{type(item).__name__} {item!r:.40}"
                    )
                out += nodes(item, f"{where}[{i}]", path)
            _no_duplicates(out, where)
            return out
        else:
            raise ValueError(
                f"schema {where}: expected a name, a list or a dict, got {type(value).__name__} {value!r:.40}"
            )
        out = []
        for name, children in items:
            count += 1
            if count > MAX_SCHEMA_NODES:
                raise ValueError(
                    f"the schema has more than {MAX_SCHEMA_NODES} type and relation names; each is a forward "
                    "pass per text chunk: split it into several schemas"
                )
            out.append(SchemaNode(name, tuple(nodes(children, f"{where}.{name}", path))))
        _no_duplicates(out, where)
        return out

    if isinstance(schema, (list, tuple, dict, str)) and not schema:
        raise ValueError(
            'the schema is empty; give entity types, e.g. ["人物", "地点"], or {"人物": ["毕业院校"]}'
        )
    if schema is None:
        raise ValueError('no schema: give entity types, e.g. ["人物", "地点"], or {"人物": ["毕业院校"]}')
    return tuple(nodes(schema, "root", ()))


def _no_duplicates(found: list[SchemaNode], where: str) -> None:
    seen: set[str] = set()
    for node in found:
        if node.name in seen:
            raise ValueError(f"schema {where}: {node.name!r} appears twice among its siblings")
        seen.add(node.name)


def schema_from_json(text: str) -> Any:
    """A schema given as text (the command line's --schema): JSON, or a bare name."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if text.lstrip()[:1] in '[{"':
            raise ValueError(f"--schema is not valid JSON: {text!r:.80}") from None
        return text


__all__ = [
    "MAX_NAME_CHARS",
    "MAX_SCHEMA_NODES",
    "SchemaNode",
    "parse_schema",
    "relation_prompt",
    "schema_from_json",
]
