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


# --resume on an output made from something else (#50): each case used to exit 0 with a wrong or mixed file


def _resume(src, out, capsys, *extra):
    return run_cli(["-i", str(src), "-o", str(out), "--resume", "--batch-size", "1", "--no-progress", *extra],
                   capsys)  # fmt: skip


def _write(path, texts):
    path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")


TEXTS = [f"我们周末去长城玩第{i}次" for i in range(1, 41)]  # 40 texts: 2 blocks of 16 and one of 8


def _half_done(tmp_path, capsys, task="word_segmentation", *extra):
    """A --resume output holding the results of the first 2 blocks (32 of 40 lines), as a job killed then leaves."""
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    _write(src, TEXTS[:32])
    code, _, err = _resume(src, out, capsys, task, *extra)
    assert code == 0, err
    _write(src, TEXTS)
    return src, out


def test_resume_refuses_an_edited_input_line(tmp_path, capsys):
    src, out = _half_done(tmp_path, capsys)
    before = out.read_bytes()
    _write(src, [*TEXTS[:4], "这一行改过了", *TEXTS[5:]])
    code, _, err = _resume(src, out, capsys, "word_segmentation")
    assert code == 2
    assert (
        "made from input lines 1-32" in err
        and "differs from" in err
        and "line edited, inserted or removed" in err
    )
    assert f"delete {out} and {out}.meta.json" in err
    assert out.read_bytes() == before  # nothing appended


def test_resume_refuses_a_prepended_line(tmp_path, capsys):
    src, out = _half_done(tmp_path, capsys)
    _write(src, ["新的第一行", *TEXTS])
    code, _, err = _resume(src, out, capsys, "word_segmentation")
    assert code == 2 and "differs from" in err


def test_resume_refuses_removed_lines(tmp_path, capsys):
    src, out = _half_done(tmp_path, capsys)
    _write(src, TEXTS[:20])
    code, _, err = _resume(src, out, capsys, "word_segmentation")
    assert code == 2 and "now ends at line 20" in err


def test_resume_refuses_another_task_or_digits(tmp_path, capsys, models):
    src, out = _half_done(tmp_path, capsys, "sentiment_analysis", "--task-path", str(models.sentiment),
                          "--digits", "6")  # fmt: skip
    before = out.read_bytes()
    code, _, err = _resume(src, out, capsys, "ner", "--task-path", str(models.ner), "--digits", "6")
    assert code == 2
    assert "was made with" in err and "task='sentiment_analysis'" in err and "task='ner'" in err
    assert "Resuming would mix both" in err
    code, _, err = _resume(src, out, capsys, "sentiment_analysis", "--task-path", str(models.sentiment),
                           "--digits", "3")  # fmt: skip
    assert code == 2 and "digits=6" in err and "digits=3" in err and "task=" not in err
    assert out.read_bytes() == before


def test_resume_refuses_another_model(tmp_path, capsys, models):
    src, out = _half_done(tmp_path, capsys, "sentiment_analysis", "--task-path", str(models.sentiment))
    other = tmp_path / "retrained"
    import shutil

    shutil.copytree(models.sentiment, other)
    code, _, err = _resume(src, out, capsys, "sentiment_analysis", "--task-path", str(other))
    assert code == 2 and "model=" in err
    # the same directory retrained in place (same path, other weights) is another model too
    weights = next(other.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    code, _, err = _resume(src, out, capsys, "sentiment_analysis", "--task-path", str(models.sentiment))
    assert code == 0, err  # the original model: resumes
    src2, out2 = tmp_path / "in2.txt", tmp_path / "out2.jsonl"
    _write(src2, TEXTS[:32])
    assert _resume(src2, out2, capsys, "sentiment_analysis", "--task-path", str(other))[0] == 0
    data[-1] ^= 1
    data[-2] ^= 1
    weights.write_bytes(bytes(data))
    code, _, err = _resume(src2, out2, capsys, "sentiment_analysis", "--task-path", str(other))
    assert code == 2 and "model_files=" in err


def test_resume_continues_an_input_that_grew_and_equals_a_fresh_run(tmp_path, capsys):
    src, out = _half_done(tmp_path, capsys)
    code, _, err = _resume(src, out, capsys, "word_segmentation")
    assert code == 0, err
    fresh_src, fresh = tmp_path / "all.txt", tmp_path / "fresh.jsonl"
    _write(fresh_src, TEXTS)
    assert _resume(fresh_src, fresh, capsys, "word_segmentation")[0] == 0
    assert out.read_bytes() == fresh.read_bytes()
    assert [json.loads(r)["line"] for r in out.read_text(encoding="utf-8").splitlines()] == list(range(1, 41))
    # resuming a finished job is a no-op
    assert _resume(src, out, capsys, "word_segmentation")[0] == 0
    assert out.read_bytes() == fresh.read_bytes()


def test_resume_cuts_back_a_half_written_block_and_refuses_an_edited_output(tmp_path, capsys):
    src, out = _half_done(tmp_path, capsys)
    whole = out.read_bytes()
    # past the recorded checkpoint: a block and a line half written when the job was killed
    out.write_bytes(whole + b'{"text": "x", "words": ["x"], "line": 33}\n{"te')
    assert _resume(src, out, capsys, "word_segmentation")[0] == 0
    assert out.read_text(encoding="utf-8").count("\n") == 40
    out.write_bytes(whole.replace("长城".encode(), "故宫".encode(), 1))
    code, _, err = _resume(src, out, capsys, "word_segmentation")
    assert code == 2 and "was changed since it was written" in err


def test_resume_refuses_an_output_without_its_record(tmp_path, capsys):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    _write(src, TEXTS)
    # an older ernie-zoo's output, with no record of what it was made from
    out.write_text('{"text": "a", "words": ["a"], "line": 1}\n', encoding="utf-8")
    code, _, err = _resume(src, out, capsys, "word_segmentation")
    assert code == 2 and "has no out.jsonl.meta.json" in err and "what it was made from" in err
    # a plain -o run replaces the file and drops a stale record, so the record never describes another file
    out.unlink()
    _half_done(tmp_path, capsys)
    assert (tmp_path / "out.jsonl.meta.json").exists()
    assert run_cli(["word_segmentation", "-i", str(src), "-o", str(out), "--no-progress"], capsys)[0] == 0
    assert not (tmp_path / "out.jsonl.meta.json").exists()
