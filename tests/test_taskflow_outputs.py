"""The shipped models' Taskflow outputs, recorded once (tests/data/taskflow_outputs.json, written by
scripts/record_taskflow_outputs.py) and recomputed here: a refactor that changes any output a user sees fails.

If a change is meant to alter outputs, re-record with `python scripts/record_taskflow_outputs.py` and say why in
the commit message.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "record_taskflow_outputs.py"


def _recorder():
    spec = importlib.util.spec_from_file_location("record_taskflow_outputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_taskflow_outputs_byte_identical():
    recorder = _recorder()
    expected = recorder.OUTPUT.read_text(encoding="utf-8")
    actual = recorder.dumps(recorder.record())
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), actual.splitlines(True), "recorded", "now", n=2, lineterm="\n"
            )
        )
        pytest.fail(f"Taskflow outputs changed ({recorder.OUTPUT.name}):\n{diff[:6000]}")


def test_recorded_outputs_cover_every_shipped_task():
    from ernie_zoo.taskflow import list_tasks

    recorded = json.loads(_recorder().OUTPUT.read_text(encoding="utf-8"))
    tasks = {key.split("/")[0] for key in recorded}
    names = set(list_tasks())
    assert names <= tasks, f"tasks without recorded outputs: {sorted(names - tasks)}"
    assert {"ner/accurate", "ner/fast"} <= set(recorded)
    for key, outputs in recorded.items():
        assert outputs, f"{key}: no outputs recorded"
