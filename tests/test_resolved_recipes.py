"""Every committed recipe's resolved config (what `--print_config` prints), recorded once
(tests/data/resolved_recipes.json, written by scripts/record_resolved_recipes.py) and recomputed here: rewriting a
recipe (slimming it, reordering keys, new comments) or a reader of recipes must not change the run it describes.

If a change is meant to alter a recipe's run, re-record with `python scripts/record_resolved_recipes.py` and say
why in the commit message.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "record_resolved_recipes.py"


def _recorder():
    spec = importlib.util.spec_from_file_location("record_resolved_recipes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_resolved_recipes_unchanged():
    recorder = _recorder()
    expected = recorder.OUTPUT.read_text(encoding="utf-8")
    actual = recorder.dumps(recorder.record())
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), actual.splitlines(True), "recorded", "now", n=3, lineterm="\n"
            )
        )
        pytest.fail(f"resolved recipes changed ({recorder.OUTPUT.name}):\n{diff[:6000]}")


def test_every_recipe_is_recorded_with_both_schemas_covered():
    recorder = _recorder()
    recorded = json.loads(recorder.OUTPUT.read_text(encoding="utf-8"))
    paths = {p.relative_to(recorder.REPO).as_posix() for p in recorder.recipe_paths()}
    assert set(recorded) == paths
    assert {entry["schema"] for entry in recorded.values()} == {"PretrainRecipe", "FinetuneArgs"}
