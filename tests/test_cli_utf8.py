"""A command-line argument that is not valid UTF-8 (issue #50): every console script says which argument and that
it is not valid UTF-8, exit 2 as argparse errors do, instead of "'utf-8' codec can't encode characters ...:
surrogates not allowed" from deep inside the parser.

Python hands such bytes to the program as lone surrogates (PEP 383: b"\\xff" -> "\\udcff"); the in-process cases
pass that form, the subprocess case the raw bytes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ernie_zoo.cli import main as zoo_main
from ernie_zoo.finetune.cli import console_main as finetune_main
from ernie_zoo.training.pretrain import main as pretrain_main

BAD = os.fsdecode(b"\xff\xfe")  # "\udcff\udcfe"


@pytest.mark.parametrize(
    "main, argv, named",
    [
        (zoo_main, ["taskflow", "text_generation", BAD], "argument 2 is not valid UTF-8: b'\\xff\\xfe'"),
        (zoo_main, ["taskflow", "ner", "--task_path", "ab" + BAD], "argument 3 (after --task_path)"),
        (zoo_main, ["export", "--onnx", "m", "--task=" + BAD], "the value of --task is not valid UTF-8"),
        (pretrain_main, ["--output_dir", BAD], "argument 2 (after --output_dir) is not valid UTF-8"),
        (finetune_main, ["--output_dir=" + BAD], "the value of --output_dir is not valid UTF-8"),
    ],
    ids=["taskflow-text", "taskflow-option", "export-eq", "pretrain", "finetune"],
)
def test_invalid_utf8_argument_is_named(main, argv, named, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert named in err and "surrogates" not in err and len(err.strip().splitlines()) == 1


def test_invalid_utf8_bytes_from_a_shell(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-m", "ernie_zoo.cli", "taskflow", "text_generation", b"\xff\xfe"],
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert b"argument 2 is not valid UTF-8: b'\\xff\\xfe' (undecodable byte at position 0)" in proc.stderr
