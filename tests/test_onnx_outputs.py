"""`ernie-zoo export --onnx` never destroys what it did not write, exports only the task the head serves, and a
graph that does not match its `onnx.json` is refused when loaded, naming the file (issue #50).

Exports are of the shipped NER tagger and sentiment classifier (about 2 s each)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ernie_zoo.cli import main as cli_main
from ernie_zoo.taskflow import Taskflow
from ernie_zoo.taskflow.models import write_manifest
from ernie_zoo.taskflow.onnx import OnnxExportError, export_onnx, read_spec

ZOO = Path(__file__).parents[1] / "ernie_zoo" / "zoo"
NER = ZOO / "ernie-zoo-mini-ner-fast"
SENTA = ZOO / "ernie-zoo-mini-sentiment"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    return {"ner": export_onnx(NER, root / "ner"), "senta": export_onnx(SENTA, root / "senta", int8=False)}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_directory_holding_other_files_is_refused_unless_overwrite(tmp_path, capsys):
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "notes.txt").write_text("my notes", encoding="utf-8")
    (victim / "sub" / "data.csv").write_text("a,b", encoding="utf-8")
    assert cli_main(["export", "--onnx", str(SENTA), str(victim), "--int8", "false"]) == 1
    err = capsys.readouterr().err
    assert "is not empty and holds no earlier export (notes.txt, sub/)" in err and "--overwrite" in err
    assert (victim / "notes.txt").read_text(encoding="utf-8") == "my notes"
    assert (victim / "sub" / "data.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim"]  # nothing half-written beside it
    # --overwrite: the user said to replace it
    assert cli_main(["export", "--onnx", str(SENTA), str(victim), "--int8", "false", "--overwrite"]) == 0
    assert not (victim / "notes.txt").exists() and read_spec(victim)["task"] == "sentiment_analysis"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim"]


def test_an_earlier_export_or_an_empty_directory_is_replaced(exported, tmp_path):
    again = _copy(exported["senta"], tmp_path / "again")
    assert export_onnx(SENTA, again, int8=False) == again and read_spec(again)["task"] == "sentiment_analysis"
    (tmp_path / "empty").mkdir()
    assert read_spec(export_onnx(SENTA, tmp_path / "empty", int8=False))["graphs"] == {"fp32": "model.onnx"}
    # a file a user added to an earlier export makes it no longer only an export
    (again / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(OnnxExportError, match=r"holds no earlier export \(.*notes\.txt"):
        export_onnx(SENTA, again, int8=False)
    assert (again / "notes.txt").is_file()


def test_a_file_is_never_replaced_by_a_directory(tmp_path, capsys):
    target = tmp_path / "out.onnx"
    target.write_bytes(b"a user's file")
    for extra in ([], ["--overwrite"]):
        assert cli_main(["export", "--onnx", str(SENTA), str(target), "--int8", "false", *extra]) == 1
        assert "is a file, not a directory" in capsys.readouterr().err
        assert target.read_bytes() == b"a user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]


def test_a_task_the_head_does_not_serve_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(["export", "--onnx", str(SENTA), str(out), "--task", "ner"]) == 1
    err = capsys.readouterr().err
    assert (
        "ErnieZooForSequenceClassification head, which serves 'sentiment_analysis', not --task 'ner'" in err
    )
    assert not out.exists()
    with pytest.raises(OnnxExportError, match="serves 'ner', not --task 'fill_mask'"):
        export_onnx(NER, out, task="fill_mask")
    # a masked LM exports for fill_mask and for feature_extraction (its encoder's hidden states)
    spec = read_spec(export_onnx(ZOO / "ernie-zoo-mini-zh", out, task="feature_extraction", int8=False))
    assert spec["task"] == "feature_extraction" and spec["output_shapes"]["last_hidden_state"][:2] == [
        "batch",
        "length",
    ]


def test_a_graph_that_does_not_match_onnx_json_is_refused(exported, tmp_path):
    # a sentiment graph (logits (batch, 2)) copied into a NER export (logits (batch, length, 13)): same names
    swapped = _copy(exported["ner"], tmp_path / "swapped")
    shutil.copyfile(exported["senta"] / "model.onnx", swapped / "model.onnx")
    write_manifest(swapped)
    with pytest.raises(
        OnnxExportError, match=r"swapped/model\.onnx does not match .*output 'logits' has shape"
    ):
        Taskflow("ner", task_path=swapped, backend="onnxruntime", precision="fp32")("李明在北京工作")


def test_a_truncated_graph_is_refused_naming_the_file(exported, tmp_path):
    broken = _copy(exported["ner"], tmp_path / "truncated")
    data = (broken / "model.int8.onnx").read_bytes()
    (broken / "model.int8.onnx").write_bytes(data[: len(data) // 2])
    write_manifest(broken)  # the manifest agrees: the file itself is broken
    with pytest.raises(OnnxExportError, match=r"truncated/model\.int8\.onnx: not a loadable ONNX graph"):
        Taskflow("ner", task_path=broken, backend="onnxruntime", precision="int8")("李明在北京工作")
    # the fp32 graph of the same directory still runs
    assert Taskflow("ner", task_path=broken, backend="onnxruntime", precision="fp32")("李明在北京工作")


def test_atomic_directory_never_replaces_a_file(tmp_path):
    from ernie_zoo.utils import atomic_directory

    target = tmp_path / "out"
    target.write_text("a user's file", encoding="utf-8")
    with pytest.raises(FileExistsError, match="is a file, not a directory"):
        with atomic_directory(target) as tmp:
            (tmp / "x").write_text("x", encoding="utf-8")
    assert target.read_text(encoding="utf-8") == "a user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
