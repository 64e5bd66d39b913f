"""`ernie-zoo taskflow`: texts as arguments, .txt / .jsonl files, stdin, --output (atomic), --option, errors."""

from __future__ import annotations

import io
import json
import sys

import pytest
from test_taskflow_models import FixtureModels, fixture_models, no_network  # noqa: F401  (autouse fixture)

from ernie_zoo.cli import main
from ernie_zoo.commands.taskflow import KILL_ENV


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> FixtureModels:
    return fixture_models(tmp_path_factory)


def run_cli(argv, capsys, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()  # drop what building the fixture models printed
    code = main(["taskflow", *argv])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.strip()], err


def test_texts_as_arguments(capsys):
    code, rows, _ = run_cli(
        ["word_segmentation", "银行行长在会上发表了重要讲话", "我们周末去长城玩", "--no-progress"], capsys
    )
    assert code == 0
    assert rows == [
        {
            "text": "银行行长在会上发表了重要讲话",
            "words": ["银行行长", "在", "会上", "发表", "了", "重要讲话"],
        },
        {"text": "我们周末去长城玩", "words": ["我们", "周末", "去", "长城", "玩"]},
    ]


def test_txt_and_jsonl_input_with_output_file(models, tmp_path, capsys):
    txt = tmp_path / "reviews.txt"
    txt.write_text("这家酒店非常好\n\n快递太慢了，非常失望\n", encoding="utf-8")
    out = tmp_path / "sub" / "out.jsonl"
    code, rows, err = run_cli(
        ["sentiment_analysis", "--task-path", str(models.sentiment), "-i", str(txt), "-o", str(out)], capsys
    )
    assert code == 0 and rows == []
    results = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["text"], r["label"]) for r in results] == [
        ("这家酒店非常好", "positive"),
        ("快递太慢了，非常失望", "negative"),
    ]
    assert "2/2" in err  # the progress bar
    assert not list(out.parent.glob(".taskflow-*"))  # no temporary file left behind

    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"text": "张伟在上海工作", "id": 1}\n"李娜在北京上学"\n', encoding="utf-8")
    code, rows, _ = run_cli(
        ["ner", "--task-path", str(models.ner), "--input", str(jsonl), "--no-progress"], capsys
    )
    assert code == 0
    assert [[e["text"] for e in r["entities"]] for r in rows] == [["张伟", "上海"], ["李娜", "北京"]]


def test_stdin_and_options(models, capsys, monkeypatch):
    code, rows, _ = run_cli(
        ["fill_mask", "--task-path", str(models.mlm), "-O", "top_k=2", "--no-progress"],
        capsys,
        stdin="床前明[MASK]光，疑是地上霜。\n",
        monkeypatch=monkeypatch,
    )
    assert (
        code == 0
        and rows[0]["filled"] == "床前明月光，疑是地上霜。"
        and len(rows[0]["masks"][0]["candidates"]) == 2
    )
    code, rows, _ = run_cli(
        ["feature_extraction", "--task-path", str(models.encoder), "--option", "return_numpy=true", "你好"],
        capsys,
    )
    assert code == 0 and len(rows[0]["embedding"]) == 32  # numpy arrays are written as JSON lists
    code, rounded, _ = run_cli(
        [
            "feature_extraction",
            "--task-path",
            str(models.encoder),
            "-O",
            "return_numpy=true",
            "你好",
            "--digits",
            "3",
        ],
        capsys,
    )
    assert code == 0 and rounded[0]["embedding"] == [round(v, 3) for v in rows[0]["embedding"]]
    assert rounded[0]["embedding"] != rows[0]["embedding"]


def test_errors_are_reported_not_raised(models, tmp_path, capsys, monkeypatch):
    from ernie_zoo.taskflow import models as tf_models

    monkeypatch.setattr(tf_models, "ZOO_DIR", tmp_path / "zoo")
    code, _, err = run_cli(["sentiment_analysis", "好"], capsys)
    assert code == 2 and "not installed" in err and "--task-path" in err
    code, _, err = run_cli(["word_segmentation", "-O", "colour=red", "好"], capsys)
    assert code == 2 and "unknown option(s) 'colour'" in err
    code, _, err = run_cli(["word_segmentation", "-O", "novalue", "好"], capsys)
    assert code == 2 and "KEY=VALUE" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": 1}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(["word_segmentation", "-i", str(bad), "-o", str(out), "--no-progress"], capsys)
    assert code == 1 and "bad.jsonl:1" in err and not out.exists() and not list(tmp_path.glob(".taskflow-*"))
    code, _, err = run_cli(
        ["fill_mask", "--task-path", str(models.mlm), "no mask here", "--no-progress"], capsys
    )
    assert code == 1 and "has no [MASK]" in err


def test_usage_and_list(capsys):
    assert main(["taskflow", "ner", "--usage"]) == 0
    assert ">>> ner = Taskflow(" in capsys.readouterr().out
    assert main(["taskflow", "--list"]) == 0
    listing = capsys.readouterr().out
    assert "named_entity_recognition" in listing and "ernie-zoo-mini-poetry" in listing


@pytest.mark.parametrize(
    "argv", [["word_segmentation", "x", "-i", "f.txt"], ["word_segmentation", "-i", "/no/such.txt"]]
)
def test_bad_input_combinations(argv, capsys):
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "error:" in err


@pytest.mark.parametrize("digits", ["-3", "-1", "18", "400"])
def test_digits_out_of_range_is_an_error(digits, capsys):
    """--digits -3 used to round every score to 0.0; now it is a usage error naming the option and its range."""
    code, rows, err = run_cli(["word_segmentation", "好", "--digits", digits, "--no-progress"], capsys)
    assert code == 2 and rows == []
    assert f"--digits must be between 0 and 17, got {digits}" in err


def test_digits_zero_and_seventeen_are_accepted(capsys):
    for digits in ("0", "17"):
        code, rows, _ = run_cli(["word_segmentation", "好", "--digits", digits, "--no-progress"], capsys)
        assert code == 0 and rows == [{"text": "好", "words": ["好"]}]


def test_resume_after_kill_equals_an_uninterrupted_run(tmp_path):
    """A --resume job SIGKILLed halfway, started again, ends with the uninterrupted run's file byte for byte:
    no result duplicated or lost, a partial last line dropped, each row carrying its input line number."""
    import os
    import signal
    import subprocess

    texts = [f"我们周末去长城玩第{i}次" if i % 7 else "" for i in range(1, 401)]  # blank lines are skipped
    src = tmp_path / "big.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"}

    def cli(out, *extra):
        cmd = [sys.executable, "-m", "ernie_zoo.cli", "taskflow", "word_segmentation", "-i", str(src), "-o"]
        return [*cmd, str(out), "--resume", "--batch-size", "1", "--no-progress", *extra]

    whole = tmp_path / "whole.jsonl"
    subprocess.run(cli(whole), env=env, check=True, capture_output=True)
    rows = [json.loads(line) for line in whole.read_text(encoding="utf-8").splitlines()]
    expected = [i for i, t in enumerate(texts, 1) if t]
    assert [r["line"] for r in rows] == expected and rows[0]["text"] == texts[0]

    part = tmp_path / "part.jsonl"
    # the job SIGKILLs itself after its 3rd block of 16 (a hook, so a busy machine cannot let it finish first)
    killed = subprocess.run(cli(part), env={**env, KILL_ENV: "3"}, capture_output=True)
    assert killed.returncode == -signal.SIGKILL
    written = part.read_bytes()
    assert written.count(b"\n") == 48 < len(expected)  # killed halfway
    part.write_bytes(written + '{"text": "半'.encode())  # as if killed mid-line
    subprocess.run(cli(part), env=env, check=True, capture_output=True)
    assert part.read_bytes() == whole.read_bytes()

    other = tmp_path / "other.txt"
    other.write_text("只有一行\n", encoding="utf-8")
    bad = subprocess.run(
        [*cli(part)[:6], str(other), "-o", str(part), "--resume", "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "comes from another input" in bad.stderr
