"""The int8 ONNX graph (ernie_zoo.taskflow.onnx_int8, #39 item 1): each linear layer computed as Taskflow's torch
int8 mode computes it (per-token input scales), so labels and entities equal the torch int8 mode's and a text's
result does not depend on its batch."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from test_onnx import TEXTS, ZOO

from ernie_zoo.models.int8 import RowwiseInt8Linear
from ernie_zoo.taskflow import Taskflow
from ernie_zoo.taskflow.onnx import export_onnx
from ernie_zoo.taskflow.onnx_int8 import quantize_graph


def _export(net: torch.nn.Module, x: torch.Tensor, path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (x,), str(path), input_names=["x"], output_names=["y"],
            dynamic_axes={"x": {0: "b"}}, opset_version=17, dynamo=False,
        )  # fmt: skip


@pytest.mark.parametrize("shape", [(3, 7, 64), (5, 64)], ids=["matmul-3d", "gemm-2d"])
def test_each_linear_layer_equals_the_torch_int8_layer(tmp_path, shape):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.GELU(), torch.nn.Linear(48, 16))
    x = torch.randn(*shape) * 3
    x[0, ..., 5] = 0.0  # a zero column, and below a zero row: scale clamped, output = bias
    x[-1] = 0.0
    _export(net, x, tmp_path / "fp32.onnx")
    assert quantize_graph(tmp_path / "fp32.onnx", tmp_path / "int8.onnx") == 2
    graph = onnx.load(str(tmp_path / "int8.onnx"))
    assert sum(n.op_type == "MatMulInteger" for n in graph.graph.node) == 2
    assert not any(n.op_type in ("MatMul", "Gemm") for n in graph.graph.node)
    got = ort.InferenceSession(str(tmp_path / "int8.onnx")).run(None, {"x": x.numpy()})[0]
    ref = (
        torch.nn.Sequential(RowwiseInt8Linear(net[0]), net[1], RowwiseInt8Linear(net[2]))(x).detach().numpy()
    )
    assert np.abs(got - ref).max() <= 1e-6  # the same integers, the same scales
    assert np.abs(got - net(x).detach().numpy()).max() > 1e-4  # and really int8: not the float result


def test_rows_are_independent_of_their_batch(tmp_path):
    torch.manual_seed(1)
    net = torch.nn.Linear(32, 8)
    x = torch.randn(6, 32)
    _export(net, x, tmp_path / "fp32.onnx")
    quantize_graph(tmp_path / "fp32.onnx", tmp_path / "int8.onnx")
    session = ort.InferenceSession(str(tmp_path / "int8.onnx"))
    batched = session.run(None, {"x": x.numpy()})[0]
    wild = x.clone()
    wild[1:] *= 1000  # neighbours of a very different scale
    alone = [session.run(None, {"x": x[i : i + 1].numpy()})[0][0] for i in range(6)]
    assert np.array_equal(np.stack(alone), batched)
    assert np.array_equal(session.run(None, {"x": wild.numpy()})[0][0], batched[0])


def test_a_graph_without_linear_layers_is_refused(tmp_path):
    _export(torch.nn.GELU(), torch.randn(2, 4), tmp_path / "gelu.onnx")
    with pytest.raises(ValueError, match="no linear layer"):
        quantize_graph(tmp_path / "gelu.onnx", tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, model", [("sentiment_analysis", "ernie-zoo-mini-sentiment"), ("ner", "ernie-zoo-mini-ner")]
)
def test_taskflow_int8_results_equal_the_torch_int8_mode(tmp_path, task, model):
    """Labels / entities on 248 texts identical to torch int8 (measured: 248/248 for both; each differs from fp32 on
    2 texts), and a text's result alone equals its result in a batch."""
    path = export_onnx(ZOO / model, tmp_path / model, task=task)
    ort_int8 = Taskflow(task, task_path=path, backend="onnxruntime", precision="int8")(TEXTS)
    torch_int8 = Taskflow(task, model, precision="int8")(TEXTS)

    def key(result):
        if task == "sentiment_analysis":
            return result["label"]
        return [(e["text"], e["type"], e["start"]) for e in result["entities"]]

    assert [key(r) for r in ort_int8] == [key(r) for r in torch_int8]
    if task == "ner":
        assert sum(len(r["entities"]) for r in ort_int8) > 50
    else:  # scores close to torch int8's: one layer's rounding flips, not a different model
        assert max(abs(a["score"] - b["score"]) for a, b in zip(ort_int8, torch_int8)) < 0.05
    alone = Taskflow(task, task_path=path, backend="onnxruntime", precision="int8", batch_size=1)(TEXTS[:60])
    assert alone == ort_int8[:60]
