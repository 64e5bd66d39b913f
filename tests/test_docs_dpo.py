"""docs/decoders.md's "Fine-tune ERNIE 4.5 with DPO" runs as written: every `ernie-finetune` command of its bash
blocks (in order, with `outputs/` in a temporary directory), then its Python block; checked besides: the DPO run
logged rising reward margins and the chat model answers a conversation."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SECTION = "## Fine-tune ERNIE 4.5 with DPO"


def _blocks(language: str) -> list[str]:
    text = (ROOT / "docs/decoders.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(rf"```{language}\n(.*?)```", text[start:end], re.S)


def test_the_section_has_its_commands():
    commands = [line for block in _blocks("bash") for line in block.splitlines() if line.strip()]
    assert len(commands) == 2 and all(c.startswith("ernie-finetune ") for c in commands)
    assert "--task instruction" in commands[0] and "--task preference" in commands[1]
    assert "--preset ernie4.5-tiny" in commands[0] and "--model_name_or_path outputs/chat-sft" in commands[1]
    assert len(_blocks("python")) == 1


@pytest.mark.slow
def test_the_dpo_walkthrough_runs_as_written(tmp_path):
    for block in _blocks("bash"):
        for line in block.splitlines():
            if not line.strip():
                continue
            argv = shlex.split(line.replace("outputs/", f"{tmp_path}/"))
            assert argv[0] == "ernie-finetune"
            cmd = [sys.executable, "-m", "ernie_zoo.finetune.cli", *argv[1:], "--progress", "false"]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(
        next((tmp_path / "chat-dpo/checkpoints").glob("checkpoint-*/trainer_state.json")).read_text()
    )
    margins = [m["rewards/margins"] for m in state["state"]["train_metrics"]]
    assert margins[0] == pytest.approx(0.0, abs=1e-6) and margins[-1] > 1.0
    assert (tmp_path / "chat-dpo/adapter/adapter_model.safetensors").is_file()
    code = _blocks("python")[0].replace('"outputs/', f'"{tmp_path}/')
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = done.stdout.strip().splitlines()
    assert first.startswith("{'text': [{'role': 'system'") and "'generated': [" in first
    assert second.startswith("[{'text': '高的反义词是什么？'") and second.count("'generated'") == 2
