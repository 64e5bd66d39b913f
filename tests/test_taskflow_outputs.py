"""The shipped models' Taskflow outputs, recorded once (tests/data/taskflow_outputs.json, written by
scripts/record_taskflow_outputs.py) and recomputed here: a refactor that changes any output a user sees fails.

If a change is meant to alter outputs, re-record with `python scripts/record_taskflow_outputs.py` and say why in
the commit message.
"""

from __future__ import annotations

import json

from conftest import assert_as_recorded, load_recorder


def _recorder():
    return load_recorder("record_taskflow_outputs")


def test_shipped_taskflow_outputs_byte_identical():
    assert_as_recorded(_recorder(), "Taskflow outputs", context=2)


def test_recorded_outputs_cover_every_shipped_task():
    from ernie_zoo.taskflow import list_tasks

    recorded = json.loads(_recorder().OUTPUT.read_text(encoding="utf-8"))
    tasks = {key.split("/")[0] for key in recorded}
    # the tasks with a shipped model to record
    names = {name for name, info in list_tasks().items() if info["default_model"]}
    assert names <= tasks, f"tasks without recorded outputs: {sorted(names - tasks)}"
    assert {"ner/accurate", "ner/fast"} <= set(recorded)
    for key, outputs in recorded.items():
        assert outputs, f"{key}: no outputs recorded"
