"""ONNX export and the onnxruntime Taskflow backend (issue #39 items 1-2): parity with torch on every exported head
of the shipped models (200+ texts), batch invariance, and bad input / bad directories giving the torch backend's
errors (never a silent NaN)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from ernie_zoo.cli import main as cli_main
from ernie_zoo.taskflow import Taskflow
from ernie_zoo.taskflow.models import ManifestError, write_manifest
from ernie_zoo.taskflow.onnx import OnnxExportError, export_onnx, read_spec
from ernie_zoo.utils import NonFiniteError

DATA = Path(__file__).parent / "data"
ZOO = Path(__file__).parents[1] / "ernie_zoo" / "zoo"
# (task, shipped model, options): every encoder head the zoo ships
HEADS = [
    (
        "sentiment_analysis",
        "ernie-zoo-mini-sentiment",
        {},
    ),  # sequence classification + sentiment-lexicon bits
    ("ner", "ernie-zoo-mini-ner", {"precision": "fp32"}),  # ensemble of CRF taggers + entity lexicon
    ("ner", "ernie-zoo-mini-ner-fast", {"precision": "fp32"}),  # one CRF tagger
    ("fill_mask", "ernie-zoo-mini-zh", {}),
    ("feature_extraction", "ernie-zoo-mini-zh", {}),
    ("text_correction", "ernie-zoo-mini-csc", {}),  # n-gram LM fused outside the model
]


def _texts() -> list[str]:
    """250+ texts of many lengths from the test corpora (sentences, reviews, NER sentences; pairs and halves)."""
    base = [line.strip() for line in (DATA / "zh_sentences.txt").read_text(encoding="utf-8").splitlines()]
    for name in ("reviews_pos_sample.txt", "reviews_neg_sample.txt"):
        base += [line.strip() for line in (DATA / name).read_text(encoding="utf-8").splitlines()]
    for line in (DATA / "ner_bmes_test_sample.txt").read_text(encoding="utf-8").splitlines():
        base.append("".join(tok.split("/")[0] for tok in line.split()))
    base = [t for t in base if t]
    texts = base + [a + b for a, b in zip(base, base[1:])] + [a[: max(2, len(a) // 2)] for a in base]
    assert len(texts) >= 200
    return texts


TEXTS = _texts()


def _inputs(task: str) -> list[str]:
    if task == "fill_mask":  # one [MASK] in place of a character of each text
        return [t[: len(t) // 3] + "[MASK]" + t[len(t) // 3 + 1 :] for t in TEXTS if len(t) > 3]
    return TEXTS


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for task, model, _ in HEADS:
        out[task, model] = export_onnx(ZOO / model, root / f"{task}-{model}", task=task)
    return out


def _close(a, b, where, tol=1e-4):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], f"{where}.{k}", tol)
    elif isinstance(a, list) and a and isinstance(a[0], float):
        assert np.abs(np.array(a) - np.array(b)).max() <= tol, where
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]", tol)
    elif isinstance(a, float):
        assert not math.isnan(b) and abs(a - b) <= tol, (where, a, b)
    else:  # labels, entity texts/types/offsets, corrections, candidate tokens: identical
        assert a == b, (where, a, b)


@pytest.mark.slow
@pytest.mark.parametrize("task, model, options", HEADS, ids=[f"{t}-{m}" for t, m, _ in HEADS])
def test_results_match_torch(exported, task, model, options):
    texts = _inputs(task)
    ref = Taskflow(task, model, **options)(texts)
    got = Taskflow(task, task_path=exported[task, model], backend="onnxruntime", **options)(texts)
    # CSC scores are rounded to 4 decimals: one rounding step apart at most
    _close(ref, got, task, tol=2e-4 if task == "text_correction" else 1e-4)
    if task == "ner":
        assert sum(len(r["entities"]) for r in ref) > 50  # the comparison saw entities


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, model, options", HEADS[:3] + HEADS[5:], ids=["senta", "ner", "ner-fast", "csc"]
)
def test_raw_outputs_match_torch(exported, task, model, options):
    """The graph's outputs themselves (logits / emissions, detection logits) against the torch head's, per padded
    batch, within 1e-4; the CRF's Viterbi paths identical."""
    torch_flow = Taskflow(task, model, **options)
    ort_flow = Taskflow(task, task_path=exported[task, model], backend="onnxruntime", **options)
    prepared = torch_flow._task.preprocess(TEXTS)
    chunks = prepared.chunks
    for b in range(0, len(chunks), 32):
        batch = torch_flow._task.pad([c.features for c in chunks[b : b + 32]])
        with torch.inference_mode():
            ref = torch_flow._task.model(**batch)
        got = ort_flow._task.model(**batch)
        valid = batch["attention_mask"].bool()
        for name in ("logits", "detection_logits"):
            r, g = getattr(ref, name, None), getattr(got, name)
            if r is None:
                continue
            if r.dim() >= 2 and r.shape[:2] == valid.shape:  # per token: padded positions are not outputs
                r, g = r[valid], g[valid]
            assert torch.isfinite(g).all() and (r - g).abs().max() <= 1e-4, name
        if getattr(ref, "predictions", None) is not None:
            assert torch.equal(ref.predictions, got.predictions)


@pytest.mark.slow
@pytest.mark.parametrize("task, model, options", HEADS[:2] + HEADS[3:4], ids=["senta", "ner", "fill"])
def test_batch_invariance(exported, task, model, options):
    """A text's result does not depend on the texts batched with it (fp32 graph: 1e-5)."""
    texts = _inputs(task)[:60]
    path = exported[task, model]
    alone = Taskflow(task, task_path=path, backend="onnxruntime", batch_size=1, **options)(texts)
    batched = Taskflow(task, task_path=path, backend="onnxruntime", batch_size=32, **options)(texts)
    _close(alone, batched, task, tol=1e-5)


def test_exported_directory_layout(exported):
    path = exported["ner", "ernie-zoo-mini-ner"]
    spec = read_spec(path)
    assert spec["task"] == "ner" and spec["architecture"] == "ErnieZooEnsembleForTokenClassificationCRF"
    assert spec["inputs"] == ["input_ids", "token_type_ids", "pinyin_ids", "attention_mask", "lexicon_ids"]
    assert spec["crf"] == "crf.safetensors" and (path / "entity_lexicon.txt").is_file()
    assert not (path / "model.safetensors").exists()
    graph = onnx.load(str(path / "model.onnx"))
    onnx.checker.check_model(graph)
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.graph.input]
    assert all(d == ["batch", "length"] for d in dims)  # dynamic batch and length axes
    manifest = json.loads((path / "manifest.json").read_text())["files"]
    assert {"model.onnx", "model.int8.onnx", "onnx.json", "crf.safetensors", "config.json"} <= manifest.keys()
    assert spec["graphs"] == {"fp32": "model.onnx", "int8": "model.int8.onnx"}


def test_bad_input_gives_the_torch_errors(exported):
    senta = Taskflow(
        "sentiment_analysis",
        task_path=exported["sentiment_analysis", "ernie-zoo-mini-sentiment"],
        backend="onnxruntime",
    )
    assert senta(["  ", "太好吃了"])[0] == {"text": "  ", "label": None, "score": None}
    assert senta("") == Taskflow("sentiment_analysis")("")
    for bad in (None, 3, ["ok", None]):
        with pytest.raises(TypeError) as ort_error:
            senta(bad)
        with pytest.raises(TypeError) as torch_error:
            Taskflow("sentiment_analysis")(bad)
        assert str(ort_error.value) == str(torch_error.value)
    fill = Taskflow("fill_mask", task_path=exported["fill_mask", "ernie-zoo-mini-zh"], backend="onnxruntime")
    with pytest.raises(ValueError, match="has no \\[MASK\\]"):
        fill("没有掩码")
    with pytest.raises(ValueError, match="unknown option"):
        Taskflow(
            "fill_mask", task_path=exported["fill_mask", "ernie-zoo-mini-zh"], backend="onnxruntime", topk=2
        )


def test_bad_directories_are_refused(exported, tmp_path):
    with pytest.raises(OnnxExportError, match="ernie-zoo export --onnx"):
        Taskflow("ner", backend="onnxruntime")  # a shipped (torch) model
    with pytest.raises(OnnxExportError, match="no onnx.json"):
        Taskflow("ner", task_path=ZOO / "ernie-zoo-mini-ner", backend="onnxruntime")
    with pytest.raises(OnnxExportError, match="exported for task 'fill_mask'"):
        Taskflow(
            "feature_extraction", task_path=exported["fill_mask", "ernie-zoo-mini-zh"], backend="onnxruntime"
        )
    with pytest.raises(ValueError, match="backend must be one of"):
        Taskflow("ner", backend="tensorrt")
    with pytest.raises(ValueError, match="not 'word_segmentation'"):
        Taskflow("word_segmentation", backend="onnxruntime")
    fp32_only = export_onnx(ZOO / "ernie-zoo-mini-ner-fast", tmp_path / "fp32-only", int8=False)
    assert list(read_spec(fp32_only)["graphs"]) == ["fp32"]
    with pytest.raises(OnnxExportError, match="no int8 graph"):
        Taskflow("ner", task_path=fp32_only, backend="onnxruntime", precision="int8")
    # a file changed after export: refused by its checksum before anything is read
    copy = tmp_path / "tampered"
    export_onnx(ZOO / "ernie-zoo-mini-ner-fast", copy)
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    with pytest.raises(ManifestError, match=r"config\.json has \d+ bytes, the manifest says"):
        Taskflow("ner", task_path=copy, backend="onnxruntime")
    with pytest.raises(OnnxExportError, match="no ONNX export"):
        export_onnx(ZOO / "ernie-zoo-mini-poetry", tmp_path / "poetry")


def test_nan_outputs_raise(tmp_path):
    """A graph that computes NaN (a corrupted weight) raises NonFiniteError naming the input, as torch does."""
    path = export_onnx(ZOO / "ernie-zoo-mini-ner-fast", tmp_path / "nan")
    graph = onnx.load(str(path / "model.onnx"))
    init = next(
        t for t in graph.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 2
    )
    values = onnx.numpy_helper.to_array(init).copy()
    values[:] = np.nan
    init.CopyFrom(onnx.numpy_helper.from_array(values, init.name))
    onnx.save(graph, str(path / "model.onnx"))
    write_manifest(path)
    with pytest.raises(NonFiniteError, match="NaN/infinite outputs for input 0"):
        Taskflow("ner", task_path=path, backend="onnxruntime", precision="fp32")("李明在北京")


def test_cli_export(tmp_path, capsys):
    out = tmp_path / "senta"
    assert cli_main(["export", "--onnx", str(ZOO / "ernie-zoo-mini-sentiment"), str(out)]) == 0
    assert "sentiment_analysis" in capsys.readouterr().out and (out / "model.onnx").is_file()
    assert cli_main(["export", str(ZOO / "ernie-zoo-mini-sentiment"), str(tmp_path / "x")]) != 0
    assert "--onnx" in capsys.readouterr().err


def test_serve_and_taskflow_cli_pass_the_backend(exported, capsys):
    from ernie_zoo.serving.config import ServeConfig

    config = ServeConfig(tasks=["ner", "word_segmentation"], backend="onnxruntime")
    assert config.taskflow_kwargs("ner")["backend"] == "onnxruntime"
    assert "backend" not in ServeConfig(tasks=["ner"]).taskflow_kwargs("ner")
    path = str(exported["ner", "ernie-zoo-mini-ner-fast"])
    argv = [
        "taskflow",
        "ner",
        "--task_path",
        path,
        "--backend",
        "onnxruntime",
        "--no_progress",
        "李明在北京工作",
    ]
    assert cli_main(argv) == 0
    assert '"李明"' in capsys.readouterr().out
