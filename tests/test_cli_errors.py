"""CLI misuse: every error of `ernie-zoo`, `ernie-pretrain` and `ernie-finetune` is one line on stderr naming the
problem, with a non-zero exit and no traceback (unless `--debug`).

Most cases run the console scripts in this process (`main(argv)`, as the entry points do); the closed-pipe case
runs a real subprocess. Broken model directories are copies of the shipped sentiment model with one file damaged.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ernie_zoo.cli import main as zoo_main
from ernie_zoo.finetune.cli import console_main as finetune_main
from ernie_zoo.taskflow.models import ZOO_DIR
from ernie_zoo.training.pretrain import main as pretrain_main

SENTIMENT = ZOO_DIR / "ernie-zoo-mini-sentiment"
MAINS = {"ernie-zoo": zoo_main, "ernie-pretrain": pretrain_main, "ernie-finetune": finetune_main}


def _copy_model(target: Path) -> Path:
    target.mkdir()
    for f in SENTIMENT.iterdir():
        if f.name != "manifest.json":  # a user directory: no manifest
            shutil.copy(f, target / f.name)
    return target


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict[str, Path]:
    """Model directories with one defect each, plus data files with bad bytes."""
    root = tmp_path_factory.mktemp("broken")
    dirs: dict[str, Path] = {}

    dirs["nan"] = _copy_model(root / "nan")
    weights = load_file(dirs["nan"] / "model.safetensors")
    name = next(k for k, v in weights.items() if v.is_floating_point() and v.numel() > 100)
    weights[name] = weights[name].clone()
    weights[name].view(-1)[7] = float("nan")  # what a few flipped bytes of a float16 look like
    save_file(weights, dirs["nan"] / "model.safetensors", metadata={"format": "pt"})

    dirs["truncated"] = _copy_model(root / "truncated")
    data = (dirs["truncated"] / "model.safetensors").read_bytes()
    (dirs["truncated"] / "model.safetensors").write_bytes(data[: len(data) // 3])

    dirs["bad_config"] = _copy_model(root / "bad_config")
    (dirs["bad_config"] / "config.json").write_text('{"model_type": "ernie_zoo",', encoding="utf-8")

    dirs["pickle"] = _copy_model(root / "pickle")
    (dirs["pickle"] / "model.safetensors").unlink()

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {root / 'PWNED'}",))

    torch.save({"x": Evil()}, dirs["pickle"] / "pytorch_model.bin")

    (root / "latin1.txt").write_bytes("好的\n".encode() + b"caf\xe9\n")
    (root / "bad.jsonl").write_text('{"text": "好"}\n{"text": \n', encoding="utf-8")
    (root / "no_text.jsonl").write_text('{"text": "好"}\n{"title": "x"}\n', encoding="utf-8")
    (root / "a_file").write_text("x", encoding="utf-8")
    (root / "outdir").mkdir()
    (root / "bad_recipe.yaml").write_text("model:\n  no_such_key: 1\n", encoding="utf-8")
    dirs["root"] = root
    return dirs


def _run(prog: str, argv: list[str], capsys, monkeypatch, stdin: bytes | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    capsys.readouterr()
    try:
        code = MAINS[prog](argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


# (id, program, argv (ROOT/NAME: paths in the `broken` fixture), stdin, exit code, fragment of the message)
CASES = [
    ("no-subcommand", "ernie-zoo", [], None, 2, "required: command"),
    ("unknown-subcommand", "ernie-zoo", ["bogus"], None, 2, "invalid choice: 'bogus'"),
    ("usage-of-unknown-task", "ernie-zoo", ["taskflow", "bogus", "--usage"], None, 1, "unknown task 'bogus'"),
    ("unknown-task", "ernie-zoo", ["taskflow", "bogus", "你好"], None, 2, "unknown task 'bogus'"),
    ("no-task", "ernie-zoo", ["taskflow"], None, 2, "give a TASK"),
    (
        "unknown-flag",
        "ernie-zoo",
        ["taskflow", "ner", "--bogus-flag", "x"],
        None,
        2,
        "unknown option '--bogus_flag'; valid options: --input",
    ),
    (
        "missing-task-path",
        "ernie-zoo",
        ["taskflow", "sentiment", "--task-path", "ROOT/none", "好"],
        None,
        2,
        "is not a directory",
    ),
    (
        "missing-input",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "--input", "ROOT/none.txt"],
        None,
        2,
        "is not a file",
    ),
    (
        "text-and-input",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "好", "--input", "ROOT/a_file"],
        None,
        2,
        "not both",
    ),
    (
        "output-is-directory",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "-o", "ROOT/outdir", "好"],
        None,
        2,
        "is a directory",
    ),
    (
        "output-under-a-file",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "-o", "ROOT/a_file/out.jsonl", "好"],
        None,
        2,
        "is not a directory",
    ),
    (
        "stdin-not-utf8",
        "ernie-zoo",
        ["taskflow", "word_segmentation"],
        "好的\n坏".encode() + b"\xff\n",
        1,
        "<stdin>:2: not UTF-8 text (byte 0xff",
    ),
    (
        "input-not-utf8",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "--input", "ROOT/latin1.txt"],
        None,
        1,
        "latin1.txt:2: not UTF-8 text (byte 0xe9",
    ),
    (
        "jsonl-broken-line",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "-i", "ROOT/bad.jsonl"],
        None,
        1,
        "bad.jsonl:2: not valid JSON",
    ),
    (
        "jsonl-no-text",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "-i", "ROOT/no_text.jsonl"],
        None,
        1,
        "no_text.jsonl:2: expected a JSON string or an object",
    ),
    (
        "option-without-value",
        "ernie-zoo",
        ["taskflow", "fill_mask", "-O", "top_k", "我[MASK]你"],
        None,
        2,
        "-O expects KEY=VALUE",
    ),
    (
        "unknown-option",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "-O", "bogus=1", "好"],
        None,
        2,
        "unknown option(s) 'bogus'",
    ),
    (
        "option-wrong-type",
        "ernie-zoo",
        ["taskflow", "fill_mask", "-O", 'top_k="x"', "我[MASK]你"],
        None,
        2,
        "option 'top_k' of task 'fill_mask' must be int",
    ),
    (
        "batch-size-zero",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "--batch-size", "0", "好"],
        None,
        2,
        "batch_size must be >= 1",
    ),
    (
        "batch-size-not-int",
        "ernie-zoo",
        ["taskflow", "ner", "--batch-size", "many", "好"],
        None,
        2,
        "Expected a <class 'int'>. Got value: many",
    ),
    (
        "max-seq-len-tiny",
        "ernie-zoo",
        ["taskflow", "word_segmentation", "--max-seq-len", "4", "好"],
        None,
        2,
        "max_seq_len must be >= 8",
    ),
    (
        "fp16-on-cpu",
        "ernie-zoo",
        ["taskflow", "sentiment", "--precision", "fp16", "--device", "cpu", "好"],
        None,
        2,
        "precision='fp16' needs a GPU",
    ),
    ("bad-device", "ernie-zoo", ["taskflow", "sentiment", "--device", "tpu", "好"], None, 2, "device"),
    (
        "user-dict-wrong-task",
        "ernie-zoo",
        ["taskflow", "sentiment", "--user-dict", "ROOT/a_file", "好"],
        None,
        2,
        "user_dict is only used by",
    ),
    (
        "nan-weights",
        "ernie-zoo",
        ["taskflow", "sentiment", "--task-path", "ROOT/nan", "好"],
        None,
        2,
        "NaN/infinite value(s)",
    ),
    (
        "truncated-safetensors",
        "ernie-zoo",
        ["taskflow", "sentiment", "--task-path", "ROOT/truncated", "好"],
        None,
        2,
        "the weights file is corrupt or truncated",
    ),
    (
        "invalid-config-json",
        "ernie-zoo",
        ["taskflow", "sentiment", "--task-path", "ROOT/bad_config", "好"],
        None,
        2,
        "config.json is not a valid JSON file",
    ),
    (
        "pickled-weights",
        "ernie-zoo",
        ["taskflow", "sentiment", "--task-path", "ROOT/pickle", "好"],
        None,
        2,
        "refused to load pickled weights",
    ),
    (
        "info-unknown-flag",
        "ernie-zoo",
        ["info", "--bogus"],
        None,
        2,
        "unknown option '--bogus'; valid options",
    ),
    ("plan-no-model", "ernie-zoo", ["plan"], None, 2, "give exactly one of --recipe or --preset"),
    ("convert-bad-head", "ernie-zoo", ["convert", "a", "b", "--head", "nope"], None, 2, "head"),
    ("pretrain-missing-recipe", "ernie-pretrain", ["ROOT/none.yaml"], None, 2, "none.yaml"),
    ("pretrain-unknown-key", "ernie-pretrain", ["ROOT/bad_recipe.yaml"], None, 2, "no_such_key"),
    ("finetune-missing-recipe", "ernie-finetune", ["ROOT/none.yaml"], None, 2, "none.yaml"),
    (
        "finetune-merge-usage",
        "ernie-finetune",
        ["merge", "only-one"],
        None,
        2,
        "ernie-finetune merge: error: the following arguments are required: output_dir",
    ),
]
assert len(CASES) >= 25


@pytest.mark.parametrize(
    "prog, argv, stdin, code, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cli_error_is_one_line(prog, argv, stdin, code, fragment, broken, capsys, monkeypatch):
    argv = [a.replace("ROOT", str(broken["root"])) for a in argv]
    got, out, err = _run(prog, argv, capsys, monkeypatch, stdin)
    assert got == code, (got, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, err  # one line says what is wrong (progress bars may precede it)
    assert fragment in lines[0], lines[0]
    assert not (broken["root"] / "PWNED").exists()  # the pickle was never run


def test_unexpected_exception_is_one_line_and_debug_shows_it(capsys, monkeypatch):
    from ernie_zoo.commands import info

    def boom(args, argv):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(info, "run", boom)
    code, _, err = _run("ernie-zoo", ["info"], capsys, monkeypatch)
    assert code == 1
    assert err.strip() == "ernie-zoo: error: something broke (run with --debug for the traceback)"
    with pytest.raises(RuntimeError, match="something"):
        zoo_main(["--debug", "info"])
    monkeypatch.setenv("ERNIE_ZOO_DEBUG", "1")
    with pytest.raises(RuntimeError):
        zoo_main(["info"])


def test_output_error_leaves_no_file_and_loads_no_model(broken, capsys, monkeypatch):
    """--output is checked before the model loads: a bad path costs nothing and writes nothing."""
    import ernie_zoo.taskflow.models as models

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before --output was checked")

    monkeypatch.setattr(models, "load_model", no_load)
    code, _, err = _run(
        "ernie-zoo",
        ["taskflow", "sentiment", "-o", str(broken["root"] / "outdir"), "好"],
        capsys,
        monkeypatch,
    )
    assert code == 2 and "is a directory" in err
    assert list((broken["root"] / "outdir").iterdir()) == []


def test_stdin_error_after_good_lines_writes_no_output_file(broken, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out.jsonl"
    stdin = "好的\n".encode() * 3 + b"\xc3\x28\n"
    code, _, err = _run(
        "ernie-zoo",
        ["taskflow", "word_segmentation", "-o", str(out), "--no-progress"],
        capsys,
        monkeypatch,
        stdin,
    )
    assert code == 1 and "<stdin>:4: not UTF-8 text (byte 0xc3" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []  # the temporary file is gone too


def test_utf8_stdin_with_bom_works(capsys, monkeypatch):
    code, out, _ = _run(
        "ernie-zoo",
        ["taskflow", "word_segmentation", "--no-progress"],
        capsys,
        monkeypatch,
        "\ufeff我们周末去长城玩\n".encode(),
    )
    assert code == 0
    assert json.loads(out)["words"] == ["我们", "周末", "去", "长城", "玩"]


def test_closed_pipe_ends_quietly(tmp_path):
    """`ernie-zoo taskflow ... | head -1`: the reader closes the pipe early; no BrokenPipeError traceback."""
    texts = tmp_path / "texts.txt"
    texts.write_text("我们周末去长城玩\n" * 20_000, encoding="utf-8")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ernie_zoo.cli",
            "taskflow",
            "word_segmentation",
            "-i",
            str(texts),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=300)
    assert json.loads(first)["words"] == ["我们", "周末", "去", "长城", "玩"]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 141


def test_non_finite_weights_are_refused_by_every_loader(broken):
    from ernie_zoo.finetune.export import load_finetuned
    from ernie_zoo.taskflow import Taskflow
    from ernie_zoo.utils import NonFiniteError

    for load in (load_finetuned, lambda d: Taskflow("sentiment_analysis", task_path=d)):
        with pytest.raises(NonFiniteError, match=r"nan: weight '.+' holds 1 NaN/infinite value\(s\)"):
            load(broken["nan"])


def test_pickle_refusal_is_our_advice_not_torchs(broken, capsys, monkeypatch):
    """torch's message advises re-running with weights_only=False (running the file's code); ours says that
    ernie-zoo loads safetensors only and how to convert, with the trust caveat."""
    code, _, err = _run(
        "ernie-zoo",
        ["taskflow", "sentiment", "--task-path", str(broken["pickle"]), "好"],
        capsys,
        monkeypatch,
    )
    assert code == 2
    assert "weights_only" not in err and "two options" not in err, err
    assert "ernie-zoo loads safetensors only" in err and "safetensors.torch.save_file" in err, err
    assert not (broken["root"] / "PWNED").exists()
