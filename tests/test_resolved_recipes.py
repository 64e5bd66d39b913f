"""Every committed recipe's resolved config (what `--print_config` prints), recorded once
(tests/data/resolved_recipes.json, written by scripts/record_resolved_recipes.py) and recomputed here: rewriting a
recipe (slimming it, reordering keys, new comments) or a reader of recipes must not change the run it describes.

If a change is meant to alter a recipe's run, re-record with `python scripts/record_resolved_recipes.py` and say
why in the commit message.
"""

from __future__ import annotations

import json

from conftest import assert_as_recorded, load_recorder


def _recorder():
    return load_recorder("record_resolved_recipes")


def test_resolved_recipes_unchanged():
    assert_as_recorded(_recorder(), "resolved recipes", context=3)


def test_every_recipe_is_recorded_with_both_schemas_covered():
    recorder = _recorder()
    recorded = json.loads(recorder.OUTPUT.read_text(encoding="utf-8"))
    paths = {p.relative_to(recorder.REPO).as_posix() for p in recorder.recipe_paths()}
    assert set(recorded) == paths
    assert {entry["schema"] for entry in recorded.values()} == {"PretrainRecipe", "FinetuneArgs"}
