"""Rewrite every recipe under recipes/ to the keys whose values differ from its schema's defaults, each under its
help as a comment (what `recipe_to_yaml(..., changed_only=True)` writes); the rest of the resolved config is one
`--print_config` away. Kept from the file as written: its header (the comment lines before the first key: what the
recipe is for, where its numbers came from) and a `# note` after a key's value.

    python scripts/slim_recipes.py            # rewrite the recipes that differ
    python scripts/slim_recipes.py --check    # exit 1 naming each recipe the rewrite would change

Each rewrite must load to the same recipe as the file it replaces (checked here, and for every committed recipe
by tests/test_resolved_recipes.py); tests/test_recipes.py holds the committed files equal to this script's output.
A comment above a key is replaced by the key's help as the schema says it now; one that is not a (possibly older)
help text is an error naming it: move it into the header or after the value it explains.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"

_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>\w+):(?P<value>.*)$")


def _comment(line: str) -> str:
    return line.strip().removeprefix("#").strip()


def _helps(cls: type) -> dict[str, str]:
    """{dotted key or section name: the comment text recipe_to_yaml writes above it}."""
    import dataclasses
    import typing

    from ernie_zoo.recipe_cli import iter_fields

    helps = {key: help for key, _, help in iter_fields(cls)}
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            helps[f.name] = " ".join((tp.__doc__ or "").split())
    return helps


def _is_help(comment: str, help: str) -> bool:
    """Whether a comment above a key is its help, as the schema says it now or as an older schema said it (a
    recipe written before the docstring changed): mostly the same words. Anything else is a note."""
    shorter = comment.rstrip(".").removesuffix(")").split(" (")[0]  # an older, shorter help
    return (
        bool(shorter)
        and help.startswith(shorter)
        or difflib.SequenceMatcher(None, comment, help).ratio() >= 0.5
    )


def split_recipe(text: str, helps: dict[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(header lines as written, {dotted key: the note after its value}, comments that are neither help nor
    header) of a recipe file."""
    lines = text.splitlines()
    first = next(
        (i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), len(lines)
    )
    header = lines[:first]
    block_start = first
    while block_start > 0 and header[block_start - 1].lstrip().startswith("#"):
        block_start -= 1
    found = _KEY.match(lines[first]) if first < len(lines) else None
    first_help = helps.get(found["key"], "") if found else ""
    # The first key's help (maybe an older one) written under the header is not header.
    for k in range(block_start, first):
        below = " ".join(_comment(line) for line in header[k:])
        if len(below) <= 1.3 * len(first_help) + 20 and _is_help(below, first_help):
            header = header[:k]
            break
    while header and not _comment(header[-1]):  # blank lines and bare '#' lines end no header
        header.pop()
    notes: dict[str, str] = {}
    stray: list[str] = []
    section, block = "", []
    for line in lines[first:]:
        if line.lstrip().startswith("#"):
            block.append(_comment(line))
            continue
        if not line.strip():
            if block:
                stray.append(" ".join(block))
            block = []
            continue
        m = _KEY.match(line)
        if m is None:  # a list item or a continuation line
            if block:
                stray.append(" ".join(block))
            block = []
            continue
        value, _, note = m["value"].partition(" #")
        if not m["indent"]:
            section = "" if value.strip() else m["key"]
            key = m["key"]
        else:
            key = f"{section}.{m['key']}"
        if note.strip():
            notes[key] = note.strip()
        if block and not _is_help(" ".join(block), helps.get(key, "")):
            stray.append(" ".join(block))
        block = []
    return header, notes, stray


def slim(path: Path) -> str:
    """The recipe file at `path` rewritten to the keys that differ from its schema's defaults."""
    from ernie_zoo.finetune.args import recipe_schema
    from ernie_zoo.recipe_cli import load_recipe, recipe_to_yaml

    cls = recipe_schema(path)
    text = path.read_text(encoding="utf-8")
    header, notes, stray = split_recipe(text, _helps(cls))
    if stray:
        raise ValueError(f"{path}: comments that are no key's help would be dropped: {stray}")
    recipe = load_recipe(path, cls=cls)
    body = recipe_to_yaml(recipe, changed_only=True, notes=notes)
    out = "\n".join(header) + "\n\n" + body if header else body
    tmp = path.with_name(f".{path.name}.slim")
    tmp.write_text(out, encoding="utf-8")
    try:
        if load_recipe(tmp, cls=cls) != recipe:
            raise ValueError(f"{path}: the slim recipe loads to a different recipe")
    finally:
        tmp.unlink()
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    os.chdir(REPO)  # recipes name repo-relative paths (a DeepSpeed json)
    changed = []
    for path in sorted(RECIPES.rglob("*.yaml")):
        text = slim(path)
        if text != path.read_text(encoding="utf-8"):
            changed.append(path.relative_to(REPO).as_posix())
            if not check:
                path.write_text(text, encoding="utf-8")
    verb = "would change" if check else "rewrote"
    print(f"{verb} {len(changed)} recipe(s)" + "".join(f"\n  {p}" for p in changed))
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
