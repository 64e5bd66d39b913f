"""The `python -m` tools on the typed-dataclass command line (`recipe_cli.command_main`, issue #40 item 4): the
documented flags parse into their `Args` (lists as `--flag a b`, kebab-case), missing required keys and bad
values are one-line errors naming the flag, `--help` lists every field."""

from __future__ import annotations

from pathlib import Path

import pytest


def _capture(monkeypatch, module):
    seen = {}

    def run(args, argv):
        seen["args"] = args
        return 0

    monkeypatch.setattr(module, "run", run)
    return seen


def test_spelling_data_flags(monkeypatch, capsys):
    from ernie_zoo.data import spelling

    seen = _capture(monkeypatch, spelling)
    argv = ["--corpus", "a.txt", "b.txt", "--tokenizer", "tok", "--out", "out", "--train", "100", "--dev", "10",
            "--max-per-corpus", "50", "--train-error-counts", "0.5", "0.5"]  # fmt: skip
    assert spelling.main(argv) == 0
    args = seen["args"]
    assert args.corpus == [Path("a.txt"), Path("b.txt")] and args.tokenizer == "tok" and args.out == Path("out")
    assert (args.train, args.dev, args.max_per_corpus, args.train_error_counts) == (100, 10, 50, [0.5, 0.5])
    assert spelling.main(["--tokenizer", "tok"]) == 2
    assert "--corpus is required" in capsys.readouterr().err
    assert spelling.main(["--corpus", "a.txt", "--tokenizer", "tok", "--train", "0"]) == 2
    assert "--train must be >= 1" in capsys.readouterr().err
    assert spelling.main(["--help"]) == 0
    usage = capsys.readouterr().out
    assert all(f"--{k}" in usage for k in ("corpus", "tokenizer", "train_error_counts"))


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--baseline", "--out", "r.json"], {"baseline": True, "out": Path("r.json"), "model": None}),
        (["--model", "m", "--csc-data", "d", "--dev-samples", "5"], {"model": Path("m"), "csc_data": Path("d"),
                                                                      "dev_samples": 5, "baseline": False}),
        (["--attach-lm", "m", "--fusion", "f.json"], {"attach_lm": Path("m"), "fusion": Path("f.json")}),
    ],
)  # fmt: skip
def test_correction_evaluation_flags(monkeypatch, argv, expected):
    from ernie_zoo.evaluation import correction

    seen = _capture(monkeypatch, correction)
    assert correction.main(argv) == 0
    assert {k: getattr(seen["args"], k) for k in expected} == expected


def test_correction_evaluation_needs_something_to_do(capsys):
    from ernie_zoo.evaluation import correction

    assert correction.main([]) == 2
    assert "give --model DIR, --baseline, --attach-lm DIR" in capsys.readouterr().err
