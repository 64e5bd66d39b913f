"""Record every committed recipe's resolved config (tests/data/resolved_recipes.json), the safety net of recipe
edits: tests/test_resolved_recipes.py recomputes it, so rewriting a recipe (slimming it to the keys that differ
from the defaults, reordering, re-commenting) must leave the run it describes unchanged.

The resolved config is what `--print_config` prints: the recipe parsed and validated by its schema
(`ernie_zoo.training.recipe.PretrainRecipe` for recipes/pretrain/*.yaml and the `pretrain-*.yaml` of zoo/ and
experiments/, `ernie_zoo.finetune.args.FinetuneArgs` for the rest), as plain JSON.

    python scripts/record_resolved_recipes.py          # rewrite the record (say why in the commit message)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
OUTPUT = REPO / "tests" / "data" / "resolved_recipes.json"


def recipe_paths() -> list[Path]:
    """Every YAML recipe under recipes/, sorted."""
    return sorted(RECIPES.rglob("*.yaml"))


def schema_of(path: Path) -> type:
    """The recipe class of a committed recipe, by where it sits (recipes/pretrain/, or named pretrain-*)."""
    from ernie_zoo.finetune.args import FinetuneArgs
    from ernie_zoo.training.recipe import PretrainRecipe

    pretrain = path.parent == RECIPES / "pretrain" or path.name.startswith("pretrain-")
    return PretrainRecipe if pretrain else FinetuneArgs


def resolve(path: Path) -> dict[str, Any]:
    """The recipe at `path` as its schema resolves it (validated), as a plain dict."""
    from ernie_zoo.recipe_cli import load_recipe, to_dict

    cls = schema_of(path)
    return {"schema": cls.__name__, "config": to_dict(load_recipe(path, cls=cls))}


def record() -> dict[str, Any]:
    """{recipe path relative to the repository: {schema, config}}; paths in recipes resolve from the repo root."""
    cwd = Path.cwd()
    os.chdir(REPO)
    try:
        return {path.relative_to(REPO).as_posix(): resolve(path) for path in recipe_paths()}
    finally:
        os.chdir(cwd)


def dumps(recorded: dict[str, Any]) -> str:
    return json.dumps(recorded, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUTPUT.write_text(dumps(record()), encoding="utf-8")
    print(f"{OUTPUT.relative_to(REPO)}: {len(json.loads(OUTPUT.read_text(encoding='utf-8')))} recipes")
