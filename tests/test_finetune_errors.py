"""`ernie-finetune` on bad data: one clear line naming the problem (the file and line where there is one), exit
status 2, no traceback, and nothing left on disk -- the recipe, the model sources and every data file are
checked before output_dir is created, and a failure after that removes only what the run created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ernie_zoo.finetune.cli import main as cli_main
from ernie_zoo.training.supervised import SupervisedTraining

NER = Path(__file__).parent / "data" / "finetune" / "ner_bmes.txt"
ROWS = [("很好", "pos"), ("太差", "neg"), ("不错", "pos"), ("糟糕", "neg")]
GOOD = "".join(json.dumps({"text": t, "label": lab}, ensure_ascii=False) + "\n" for t, lab in ROWS)
SMALL = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}
QUICK = ["--max_steps", "2", "--vocab_size", "200", "--num_threads", "1", "--progress", "false"]
QUICK += ["--tensorboard", "false", "--config_overrides", json.dumps(SMALL)]

# name: (files to write {name: text or bytes}, arguments ({d} is the data directory), what the error must say)
CASES = {
    "missing file": ({}, ["--train_file", "{d}/nope.jsonl"], "{d}/nope.jsonl does not exist"),
    "empty file": ({"e.jsonl": ""}, ["--train_file", "{d}/e.jsonl"], "{d}/e.jsonl is empty"),
    "directory": ({}, ["--train_file", "{d}", "--file_format", "jsonl"], "{d} is a directory"),
    "directory, no format": ({}, ["--train_file", "{d}"], "data file {d} is a directory"),
    "missing file without extension": ({}, ["--train_file", "{d}/nope"], "data file {d}/nope does not exist"),
    "lone surrogate": (
        {"s.jsonl": GOOD + '{"text": "\\ud800好", "label": "pos"}\n'},
        ["--train_file", "{d}/s.jsonl"],
        "{d}/s.jsonl:5: a lone surrogate escape \\ud800 (half of a UTF-16 pair, not a character)",
    ),
    "line over the limit": (
        {
            "long.jsonl": GOOD
            + json.dumps({"text": "好" * 100, "label": "pos"}, ensure_ascii=False)
            + "\n"
            + GOOD
        },
        ["--train_file", "{d}/long.jsonl", "--max_line_bytes", "200"],
        "{d}/long.jsonl:5: a line longer than 200 bytes (the limit data.max_line_bytes); split the text",
    ),
    "tagged line over the limit": (
        {"long.bmes": "我 O\n们 O\n" + "好" * 100 + " O\n"},
        ["--task", "token_classification", "--train_file", "{d}/long.bmes", "--max_line_bytes", "200"],
        "{d}/long.bmes:3: a line longer than 200 bytes",
    ),
    "csv header only": ({"h.csv": "text,label\n"}, ["--train_file", "{d}/h.csv"], "has a header but no rows"),
    "broken jsonl line": (
        {"b.jsonl": GOOD + '{"text": "差", "label": \n'},
        ["--train_file", "{d}/b.jsonl"],
        "{d}/b.jsonl:5: not valid JSON (Expecting value at column 24)",
    ),
    "jsonl row with a key twice": (  # json.loads kept the last "label" and dropped the other without a word
        {"d.jsonl": GOOD + '{"text": "好", "label": "pos", "label": "neg"}\n'},
        ["--train_file", "{d}/d.jsonl"],
        "{d}/d.jsonl:5: the key 'label' appears twice in one JSON object",
    ),
    "json array item with a key twice": (
        {"d.json": json.dumps([{"text": "好", "label": "pos"}] * 3)[:-1] + ', {"text": "差", "text": "好"}]'},
        ["--train_file", "{d}/d.json"],
        "{d}/d.json: the key 'text' appears twice in one JSON object",
    ),
    "jsonl line not an object": (
        {"a.jsonl": GOOD + "[1, 2]\n"},
        ["--train_file", "{d}/a.jsonl"],
        "{d}/a.jsonl:5: expected a JSON object per line, got an array",
    ),
    "binary bmes": (
        {"bin.bmes": "我 O\n".encode() + bytes(range(128, 256))},
        ["--task", "token_classification", "--train_file", "{d}/bin.bmes"],
        "{d}/bin.bmes:2: not UTF-8 text (byte 0x80 at byte 1 of the line)",
    ),
    "NUL bytes": (
        {"nul.bmes": "我 O\n们 O\n\0\0\0\0"},
        ["--task", "token_classification", "--train_file", "{d}/nul.bmes"],
        "{d}/nul.bmes:3: a NUL byte",
    ),
    "GBK csv": (
        {"g.csv": "text,label\n很好,pos\n".encode() + "太差,neg\n".encode("gbk")},
        ["--train_file", "{d}/g.csv"],
        "{d}/g.csv:3: not UTF-8 text",
    ),
    "ragged csv": (
        {"r.csv": "text,label\n好,pos\n差,neg,extra,more\n"},
        ["--train_file", "{d}/r.csv"],
        "could not read {d}/r.csv as csv: ParserError: Error tokenizing data. C error: Expected 2 fields in line 3",
    ),
    "unknown extension": ({"x.xyz": "abc\n"}, ["--train_file", "{d}/x.xyz"], "cannot tell the format of"),
    "missing column": (
        {"m.jsonl": '{"text": "好"}\n{"text": "差"}\n'},
        ["--train_file", "{d}/m.jsonl"],
        "{d}/m.jsonl: missing column(s) ['label']",
    ),
    "one label": (
        {"o.jsonl": '{"text": "好", "label": "a"}\n{"text": "差", "label": "a"}\n'},
        ["--train_file", "{d}/o.jsonl"],
        "need at least 2 distinct labels",
    ),
    "unknown dev label": (
        {"t.jsonl": GOOD, "dev.jsonl": '{"text": "好", "label": "zzz"}\n'},
        ["--train_file", "{d}/t.jsonl", "--dev_file", "{d}/dev.jsonl"],
        "{d}/dev.jsonl example 1: unknown label 'zzz'",
    ),
    "missing dev file": (
        {"t.jsonl": GOOD},
        ["--train_file", "{d}/t.jsonl", "--dev_file", "{d}/nodev.jsonl"],
        "{d}/nodev.jsonl does not exist",
    ),
    "empty text": (
        {"et.jsonl": '{"text": "", "label": "a"}\n{"text": "x", "label": "b"}\n'},
        ["--train_file", "{d}/et.jsonl"],
        "{d}/et.jsonl row 1: empty 'text'",
    ),
    "tagged file for classification": ({}, ["--train_file", str(NER)], "are for token_classification"),
    "invalid tag": (
        {"bt.bmes": "我 B-PER\n们 Q-PER\n"},
        ["--task", "token_classification", "--train_file", "{d}/bt.bmes"],
        "{d}/bt.bmes: invalid tag 'Q-PER'",
    ),
    "no entities": (
        {"ne.bmes": "我 O\n们 O\n"},
        ["--task", "token_classification", "--train_file", "{d}/ne.bmes"],
        "{d}/ne.bmes: no entities found",
    ),
    "entity outside its text": (
        {"so.jsonl": '{"text": "我们", "entities": [{"start": 0, "end": 5, "type": "PER"}]}\n'},
        ["--task", "token_classification", "--train_file", "{d}/so.jsonl"],
        "{d}/so.jsonl row 1: entity",
    ),
    "missing lexicon": (
        {},
        ["--task", "token_classification", "--use_crf", "true", "--train_file", str(NER)]
        + ["--lexicon", "{d}/nolex.txt"],
        "data.lexicon: no such file: {d}/nolex.txt",
    ),
    "untyped lexicon": (
        {"lex.txt": "北京\n上海\n"},
        ["--task", "token_classification", "--use_crf", "true", "--train_file", str(NER)]
        + ["--lexicon", "{d}/lex.txt"],
        "data.lexicon: {d}/lex.txt gives its words no entity types",
    ),
    "missing teacher": (
        {"t.jsonl": GOOD},
        ["--train_file", "{d}/t.jsonl", "--distill_from", '["{d}/no-teacher"]'],
        "{d}/no-teacher",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_data_is_one_clear_line_and_leaves_no_output_dir(case, tmp_path, capsys):
    files, argv, needle = CASES[case]
    data = tmp_path / "data"
    data.mkdir()
    for name, content in files.items():
        (data / name).write_bytes(content.encode() if isinstance(content, str) else content)
    out = tmp_path / "runs" / "out"  # its parent does not exist either: nothing may be created
    argv = [a.replace("{d}", str(data)) for a in argv]
    assert cli_main([*argv, "--output_dir", str(out), *QUICK]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("ernie-finetune:")]
    assert len(errors) == 1 and errors[0].startswith("ernie-finetune: error: "), err
    assert needle.replace("{d}", str(data)) in errors[0]
    assert "Traceback" not in err and "DatasetGenerationError" not in err
    assert not (tmp_path / "runs").exists()


def _fail_in_training(monkeypatch):
    def fail(self):
        raise ValueError("simulated failure before the first checkpoint")

    monkeypatch.setattr(SupervisedTraining, "train", fail)


def test_a_failure_after_creating_output_dir_removes_what_the_run_created(tmp_path, monkeypatch, capsys):
    (tmp_path / "t.jsonl").write_text(GOOD, encoding="utf-8")
    argv = ["--train_file", str(tmp_path / "t.jsonl"), *QUICK]
    _fail_in_training(monkeypatch)
    out = tmp_path / "runs" / "out"
    assert cli_main([*argv, "--output_dir", str(out)]) == 2
    assert "simulated failure" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # the directories this run made, base_model/ and all
    # a directory that was there stays, as it was
    (tmp_path / "mine").mkdir()
    assert cli_main([*argv, "--output_dir", str(tmp_path / "mine")]) == 2
    assert list((tmp_path / "mine").iterdir()) == []
    # with --overwrite the old contents are gone by design; what the run wrote goes too
    (tmp_path / "mine" / "old.txt").write_text("x")
    assert cli_main([*argv, "--output_dir", str(tmp_path / "mine"), "--overwrite", "true"]) == 2
    assert list((tmp_path / "mine").iterdir()) == []
    monkeypatch.undo()
    # and the next run is not refused as "not empty"
    assert cli_main([*argv, "--output_dir", str(out)]) == 0
    assert (out / "eval_results.json").is_file()


def test_lines_are_read_with_a_bound():
    """A line over the limit is refused after max_line_bytes + 2 bytes of it are read: a 1 GB line is never loaded
    (the tokenizer's worker pool aborted the process on one). /dev/zero is one endless line."""
    from ernie_zoo.data.labelled import read_bounded_lines

    class Endless:
        read = 0

        def readline(self, size=-1):
            assert size > 0, "an unbounded readline would load the whole line"
            self.read += size
            return b"x" * size

    stream = Endless()
    with pytest.raises(ValueError, match=r"^f\.jsonl:1: a line longer than 1000 bytes"):
        read_bounded_lines(stream, 1000, "f.jsonl")
    assert stream.read <= 1002
    with (
        open("/dev/zero", "rb") as f,
        pytest.raises(ValueError, match=r"^/dev/zero:1: a line longer than 4096"),
    ):
        read_bounded_lines(f, 4096, "/dev/zero")
    # lines at the limit pass, whatever their end of line; line numbers count every line
    import io

    ok = b"a" * 10 + b"\r\n" + b"b" * 10 + b"\n" + b"c" * 10
    assert read_bounded_lines(io.BytesIO(ok), 10, "x") == ok
    with pytest.raises(ValueError, match=r"^x:3: a line longer than 9 bytes"):
        read_bounded_lines(io.BytesIO(b"a\r\nb\n" + b"c" * 10), 9, "x")


def test_max_line_bytes_is_checked():
    from ernie_zoo.finetune.args import build_args

    with pytest.raises(ValueError, match="recipe key 'data.max_line_bytes' = 0: must be >= 1"):
        build_args(None, {"train_file": "x.jsonl", "max_line_bytes": 0})


def _interrupt(tmp_path, out, wait_for: str, extra: list[str]):
    """Start ernie-finetune in a subprocess, send SIGINT once `wait_for` (a glob under out) exists."""
    import os
    import signal
    import subprocess
    import sys
    import time

    data = tmp_path / "t.jsonl"
    data.write_text(GOOD * 20, encoding="utf-8")
    argv = ["--train_file", str(data), "--output_dir", str(out), "--max_steps", "100000", *QUICK[2:], *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ernie_zoo.finetune.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        # A shell that runs the tests in the background ignores SIGINT, and its children inherit that (Python then
        # installs no KeyboardInterrupt handler): give the run the default disposition a terminal's Ctrl-C meets.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 240
    while not list(out.parent.glob(f"{out.name}/{wait_for}")):
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, f"{wait_for} never appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


@pytest.mark.slow
def test_ctrl_c_before_the_first_checkpoint_leaves_nothing(tmp_path):
    """SIGINT once finetune_args.yaml is written (training under way, no checkpoint yet): the new output directory
    and the parent it made are gone; a directory that existed stays, empty as it was."""
    out = tmp_path / "runs" / "out"
    code, err = _interrupt(tmp_path, out, "finetune_args.yaml", ["--eval_every", "100000"])
    assert code == 130 and "ernie-finetune: interrupted" in err, err
    assert not (tmp_path / "runs").exists(), sorted(p.name for p in (tmp_path / "runs").rglob("*"))
    mine = tmp_path / "mine"
    mine.mkdir()
    code, err = _interrupt(tmp_path, mine, "finetune_args.yaml", ["--eval_every", "100000"])
    assert code == 130, err
    assert list(mine.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_after_a_checkpoint_keeps_it_for_resume(tmp_path):
    from ernie_zoo.training.checkpoint import latest_valid_checkpoint
    from ernie_zoo.training.supervised import CHECKPOINT_FILES

    out = tmp_path / "out"
    code, err = _interrupt(tmp_path, out, "checkpoints/checkpoint-*", ["--eval_every", "1"])
    assert code == 130, err
    assert "run the same command again to resume from it" in err
    assert latest_valid_checkpoint(out / "checkpoints", CHECKPOINT_FILES) is not None
    assert (out / "finetune_args.yaml").is_file()
