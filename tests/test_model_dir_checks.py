"""Model directories with a bad value, a blank weights file, a malformed tokenizer.json or a link out of the
directory are refused by every loader (Taskflow, load_finetuned, ernie-finetune) with an error naming the file and
the field (issue #36). Each directory is a copy of the shipped sentiment model with one defect."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ernie_zoo.models.directory import check_links, check_model_dir
from ernie_zoo.taskflow.models import ZOO_DIR, clear_model_cache

SENTIMENT = ZOO_DIR / "ernie-zoo-mini-sentiment"


def _copy(target: Path) -> Path:
    target.mkdir(parents=True)
    for f in SENTIMENT.iterdir():
        if f.name != "manifest.json":  # a user directory: no manifest
            shutil.copy(f, target / f.name)
    return target


def _edit_config(directory: Path, **changes) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(changes)
    path.write_text(json.dumps(config), encoding="utf-8")


def _zero_weights(directory: Path) -> None:
    weights = load_file(directory / "model.safetensors")
    save_file({k: torch.zeros_like(v) for k, v in weights.items()}, directory / "model.safetensors")


def _link_out(directory: Path, name: str) -> None:
    outside = directory.parent / f"outside-{directory.name}"
    outside.mkdir()
    shutil.move(directory / name, outside / name)
    (directory / name).symlink_to(outside / name)


def _bad_tokenizer(directory: Path) -> None:
    data = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
    del data["added_tokens"]
    (directory / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")


def _to_dev_zero(directory: Path) -> None:
    (directory / "model.safetensors").unlink()
    (directory / "model.safetensors").symlink_to("/dev/zero")


def _fifo(directory: Path) -> None:
    (directory / "model.safetensors").unlink()
    os.mkfifo(directory / "model.safetensors")


# name: (defect, pattern the error must match: the file, the field or the problem, and the fix)
CASES = {
    "negative layers": (
        lambda d: _edit_config(d, num_hidden_layers=-1),
        r"config\.json: field 'num_hidden_layers' must be a positive integer, got -1; fix the field",
    ),
    "id2label a string": (
        lambda d: _edit_config(d, id2label="neg,pos"),
        r"config\.json: field 'id2label' must be an object mapping label ids to names .*got str",
    ),
    "dropout above 1": (
        lambda d: _edit_config(d, hidden_dropout_prob=1.5),
        r"config\.json: field 'hidden_dropout_prob' must be in \[0, 1\), got 1\.5",
    ),
    "all-zero weights": (
        _zero_weights,
        r"model\.safetensors: every one of its \d+ tensors is all zeros: a blank or wiped weights file",
    ),
    "weights linked out": (
        lambda d: _link_out(d, "model.safetensors"),
        r"model\.safetensors: a symbolic link to .*outside-.*model\.safetensors, outside the model directory",
    ),
    "tokenizer linked out": (
        lambda d: _link_out(d, "tokenizer.json"),
        r"tokenizer\.json: a symbolic link to .*outside-.*tokenizer\.json, outside the model directory .*"
        r"cp --remove-destination",
    ),
    "tokenizer.json of the wrong shape": (
        _bad_tokenizer,
        r"tokenizer\.json: not a tokenizer\.json saved by the tokenizers library \(no 'added_tokens' key\); "
        r"re-save the tokenizer",
    ),
    "weights linked to /dev/zero": (
        _to_dev_zero,
        r"model\.safetensors: a symbolic link to /dev/zero, outside the model directory",
    ),
    "weights a pipe": (_fifo, r"model\.safetensors: not a regular file \(a device, pipe or socket\)"),
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("model_dirs")
    dirs = {}
    for i, (name, (defect, _)) in enumerate(CASES.items()):
        dirs[name] = _copy(root / f"case{i}")
        defect(dirs[name])
    return dirs


@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_model_dir_is_refused_by_every_loader(case, broken):
    from ernie_zoo.finetune.export import load_finetuned
    from ernie_zoo.taskflow import Taskflow

    clear_model_cache()
    pattern = CASES[case][1]
    for load in (load_finetuned, lambda d: Taskflow("sentiment_analysis", task_path=d)):
        with pytest.raises(ValueError, match=pattern):
            load(broken[case])


def test_ernie_finetune_refuses_a_broken_base_model(broken, tmp_path, capsys):
    from ernie_zoo.finetune.cli import main

    rows = [("很好", "pos"), ("太差", "neg")] * 2
    data = tmp_path / "t.jsonl"
    data.write_text(
        "".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows), encoding="utf-8"
    )
    for case in ("negative layers", "all-zero weights", "tokenizer linked out"):
        argv = ["--train_file", str(data), "--model_name_or_path", str(broken[case])]
        assert main([*argv, "--output_dir", str(tmp_path / "out"), "--max_steps", "1"]) == 2
        err = capsys.readouterr().err
        assert "ernie-finetune: error: " in err and str(broken[case]) in err, err
        assert not (tmp_path / "out").exists()


def test_the_hub_cache_layout_may_link_into_its_blobs(tmp_path):
    """transformers' cache keeps files in <repo>/blobs/ and links them from <repo>/snapshots/<rev>/: allowed."""
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for f in SENTIMENT.iterdir():
        if f.name != "manifest.json":
            shutil.copy(f, repo / "blobs" / f"blob-{f.name}")
            (snapshot / f.name).symlink_to(Path("../../blobs") / f"blob-{f.name}")
    check_model_dir(snapshot)
    # a link from the snapshot anywhere else is still refused
    (snapshot / "extra.txt").symlink_to(tmp_path / "elsewhere.txt")
    (tmp_path / "elsewhere.txt").write_text("x")
    with pytest.raises(ValueError, match="extra.txt: a symbolic link to .* outside the model directory"):
        check_links(snapshot)


def test_links_inside_the_directory_are_fine(tmp_path):
    directory = _copy(tmp_path / "m")
    (directory / "sub").mkdir()
    shutil.move(directory / "tokenizer.json", directory / "sub" / "tokenizer.json")
    (directory / "tokenizer.json").symlink_to("sub/tokenizer.json")
    check_model_dir(directory)


def test_a_valid_model_dir_passes_and_only_reads_one_tensor(monkeypatch):
    """The all-zeros check stops at the first tensor that is not all zeros (a real file costs one tensor read)."""
    from safetensors import safe_open

    reads = []
    real = safe_open

    class Counting:
        def __init__(self, *args, **kwargs):
            self.inner = real(*args, **kwargs)

        def __enter__(self):
            self.f = self.inner.__enter__()
            return self

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

        def keys(self):
            return self.f.keys()

        def get_tensor(self, name):
            reads.append(name)
            return self.f.get_tensor(name)

    monkeypatch.setattr("safetensors.safe_open", Counting)
    check_model_dir(SENTIMENT)
    assert len(reads) == 1
