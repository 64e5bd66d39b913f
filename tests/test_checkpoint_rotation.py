"""Checkpoint rotation counts only valid checkpoints and never deletes the newest valid one; a resume whose
checkpoints are all damaged refuses, naming each one, instead of starting again from step 0. Unit tests on
`rotate_checkpoints` / `latest_valid_checkpoint`, then both loops that use them (ernie-pretrain, ernie-finetune).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import pytest

from ernie_zoo.training import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[1]


def _save(root: Path, step: int, files: dict[str, bytes] | None = None) -> Path:
    def write(d: Path) -> None:
        for name, data in (files or {"trainer_state.json": b"{}", "model.safetensors": b"w" * 64}).items():
            (d / name).write_bytes(data)

    return ckpt.save_checkpoint(root, step, write)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _names(paths) -> list[str]:
    return [p.name for p in paths]


def test_damaged_checkpoints_at_higher_steps_do_not_push_a_new_save_out(tmp_path):
    """The issue's case: damaged checkpoint-300/400 of an earlier run; the new save (200) must survive."""
    _save(tmp_path, 100)
    _truncate(_save(tmp_path, 300) / "model.safetensors")
    (_save(tmp_path, 400) / ckpt.MANIFEST).unlink()  # a save that never finished
    _save(tmp_path, 200)
    removed = ckpt.rotate_checkpoints(tmp_path, keep_last=1)
    assert _names(removed) == ["checkpoint-100"]  # older than the kept valid one
    assert _names(ckpt.list_checkpoints(tmp_path)) == ["checkpoint-200", "checkpoint-300", "checkpoint-400"]
    assert ckpt.latest_valid_checkpoint(tmp_path) == tmp_path / "checkpoint-200"


def test_only_valid_checkpoints_are_counted(tmp_path, caplog):
    for step in (10, 20, 30):
        _save(tmp_path, step)
    _truncate(tmp_path / "checkpoint-30" / "model.safetensors")  # damaged after it was saved and counted
    with caplog.at_level(logging.WARNING, logger="ernie_zoo.training.checkpoint"):
        assert ckpt.rotate_checkpoints(tmp_path, keep_last=2) == []  # 10 and 20 are the two valid ones
    assert "checkpoint-30" in caplog.text and "truncated" in caplog.text
    _save(tmp_path, 40)
    assert _names(ckpt.rotate_checkpoints(tmp_path, keep_last=2)) == ["checkpoint-10"]
    assert _names(ckpt.list_checkpoints(tmp_path)) == ["checkpoint-20", "checkpoint-30", "checkpoint-40"]
    # a checkpoint without a file the loop needs does not count either
    _save(tmp_path, 50, {"model.safetensors": b"w"})
    assert ckpt.rotate_checkpoints(tmp_path, keep_last=2, required=("trainer_state.json",)) == []
    assert _names(ckpt.rotate_checkpoints(tmp_path, keep_last=2)) == ["checkpoint-20", "checkpoint-30"]


def test_with_no_valid_checkpoint_nothing_is_deleted(tmp_path):
    for step in (1, 2, 3):
        _truncate(_save(tmp_path, step) / "model.safetensors")
    assert ckpt.rotate_checkpoints(tmp_path, keep_last=1) == []
    assert len(ckpt.list_checkpoints(tmp_path)) == 3


def test_rotation_hashes_only_what_changed(tmp_path, monkeypatch):
    """Rotation runs at every save: files it (or the save) already checked are not hashed again, but a change
    to any of them is seen."""
    for step in (1, 2, 3):
        _save(tmp_path, step)
    import ernie_zoo.utils

    calls = []
    real = (
        ernie_zoo.utils.sha256_file
    )  # what verify_checkpoint's manifest check (utils.verify_manifest) hashes with
    monkeypatch.setattr(ernie_zoo.utils, "sha256_file", lambda p, *a: calls.append(Path(p)) or real(p, *a))
    assert ckpt.rotate_checkpoints(tmp_path, keep_last=3) == []
    assert calls == []  # the saves computed the manifests from these very files
    data = bytearray((tmp_path / "checkpoint-3" / "model.safetensors").read_bytes())
    data[0] ^= 0xFF  # same size, other bytes
    (tmp_path / "checkpoint-3" / "model.safetensors").write_bytes(bytes(data))
    assert _names(ckpt.rotate_checkpoints(tmp_path, keep_last=2)) == []  # only 1 and 2 are valid
    assert {p.parent.name for p in calls} == {"checkpoint-3"}


def test_resume_refuses_when_every_checkpoint_is_damaged(tmp_path):
    _truncate(_save(tmp_path, 5) / "model.safetensors")
    (_save(tmp_path, 10) / ckpt.MANIFEST).unlink()
    assert ckpt.latest_valid_checkpoint(tmp_path) is None  # without start_fresh: the old answer
    with pytest.raises(ValueError) as e:
        ckpt.latest_valid_checkpoint(tmp_path, start_fresh="use another directory")
    message = str(e.value)
    assert "checkpoint-5: model.safetensors has 32 bytes, the manifest says 64 (truncated" in message
    assert "checkpoint-10: no manifest.json (the save did not finish)" in message
    assert "refusing to start again from step 0" in message and message.endswith("use another directory")
    assert ckpt.latest_valid_checkpoint(tmp_path / "empty", start_fresh="x") is None  # nothing to resume


# ------------------------------------------------------------------------------------------- ernie-pretrain
def _pretrain(output_dir: Path, **extra) -> dict:
    from ernie_zoo.recipe_cli import load_recipe
    from ernie_zoo.training.pretrain import pretrain
    from ernie_zoo.training.recipe import PretrainRecipe

    overrides = {
        "output_dir": str(output_dir),
        "data.files": [str(REPO / "tests" / "data" / "zh_sentences.txt")],
        "num_threads": 1,
        "logging.progress_bar": False,
        "logging.tensorboard": False,
        "eval.interval": 0,
        "checkpoint.interval": 2,
        "checkpoint.keep_last": 1,
        **extra,
    }
    return pretrain(
        load_recipe(REPO / "recipes" / "pretrain" / "tiny-cpu.yaml", overrides, cls=PretrainRecipe)
    )


def _damaged_copy(src: Path, step: int, truncate: str | None) -> None:
    """A copy of checkpoint `src` as checkpoint-<step> with the file `truncate` cut in half, or (None) without
    its manifest."""
    dst = src.parent / f"checkpoint-{step}"
    shutil.copytree(src, dst)
    if truncate is not None:
        _truncate(dst / truncate)
    else:
        (dst / ckpt.MANIFEST).unlink()


def test_pretrain_keeps_its_new_checkpoints_and_refuses_all_damaged(tmp_path):
    out = tmp_path / "run"
    _pretrain(out, max_steps=4)
    assert _names(ckpt.list_checkpoints(out)) == ["checkpoint-4"]
    _damaged_copy(out / "checkpoint-4", 100, "model.safetensors")
    _damaged_copy(out / "checkpoint-4", 200, None)
    summary = _pretrain(out, max_steps=8)  # resume: auto skips 200 and 100
    assert summary["resumed_from_step"] == 4 and summary["steps"] == 8
    # before the fix, each new save was the one rotated away: no valid checkpoint was left
    assert ckpt.latest_valid_checkpoint(out) == out / "checkpoint-8"
    assert _names(ckpt.list_checkpoints(out)) == ["checkpoint-8", "checkpoint-100", "checkpoint-200"]

    _truncate(out / "checkpoint-8" / "rng.safetensors")
    with pytest.raises(ValueError) as e:  # before the fix: a silent fresh start from step 0
        _pretrain(out, max_steps=10)
    message = str(e.value)
    for name in ("checkpoint-8: rng.safetensors", "checkpoint-100: model.safetensors", "checkpoint-200: no"):
        assert name in message
    assert "move them out of the way or delete them, or choose another output_dir" in message
    assert _names(ckpt.list_checkpoints(out)) == ["checkpoint-8", "checkpoint-100", "checkpoint-200"]


# ------------------------------------------------------------------------------------------ ernie-finetune
def _finetune_args(tmp_path: Path, out: Path, **train):
    from ernie_zoo.finetune import build_args

    rows = [
        json.loads(line) for line in (REPO / "tests/data/finetune/sentiment.jsonl").read_text().splitlines()
    ]
    random.Random(0).shuffle(rows)
    train_file = tmp_path / "train.jsonl"
    train_file.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[:24]), encoding="utf-8"
    )
    return build_args(
        {
            "task": "sequence_classification",
            "data": {"train_file": str(train_file), "dev_file": str(train_file), "max_length": 24},
            "model": {
                "vocab_size": 300,
                "config_overrides": {
                    "hidden_size": 32,
                    "num_hidden_layers": 1,
                    "num_attention_heads": 2,
                    "intermediate_size": 32,
                },
            },
            "method": {"method": "full"},
            "train": {
                "output_dir": str(out),
                "batch_size": 8,
                "eval_every": 2,
                "patience": 0,
                "tensorboard": False,
                "progress": False,
                "num_threads": 1,
                **train,
            },
        }
    )


def test_finetune_keeps_its_new_checkpoints_and_refuses_all_damaged(tmp_path):
    from ernie_zoo.finetune import run_finetune

    out = tmp_path / "ft"
    run_finetune(_finetune_args(tmp_path, out, max_steps=4))
    ckpts = out / "checkpoints"
    assert _names(ckpt.list_checkpoints(ckpts)) == ["checkpoint-4"]
    _damaged_copy(ckpts / "checkpoint-4", 100, "trainer_state.json")
    assert run_finetune(_finetune_args(tmp_path, out, max_steps=8))["steps"] == 8
    assert ckpt.latest_valid_checkpoint(ckpts) == ckpts / "checkpoint-8"  # before the fix: none left
    assert _names(ckpt.list_checkpoints(ckpts)) == ["checkpoint-8", "checkpoint-100"]

    _truncate(ckpts / "checkpoint-8" / "trainable.safetensors")
    with pytest.raises(ValueError) as e:
        run_finetune(_finetune_args(tmp_path, out, max_steps=10))
    message = str(e.value)
    assert (
        "checkpoint-8: trainable.safetensors" in message and "checkpoint-100: trainer_state.json" in message
    )
    assert "pass --overwrite true" in message
    assert (ckpts / "checkpoint-8").is_dir()  # nothing removed
    # the way out the message names
    assert run_finetune(_finetune_args(tmp_path, out, max_steps=2, overwrite=True))["steps"] == 2
    assert _names(ckpt.list_checkpoints(ckpts)) == ["checkpoint-2"]
