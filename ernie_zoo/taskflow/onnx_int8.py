"""The int8 ONNX graph: the fp32 graph with every linear layer computed as Taskflow's torch int8 mode computes it.

ONNX Runtime's own dynamic quantisation (`DynamicQuantizeLinear`) takes one input scale for the whole tensor, so a
text's scores would depend on the texts batched with it. This graph quantises each row (token) of a linear
layer's input with its own scale, as `ernie_zoo.models.int8.RowwiseInt8Linear` does, and mirrors that layer's
arithmetic step by step:

    s   = max(|x[r]|, 1e-30)                              per row, in float
    u   = clip(round(x[r] / s / (2/127)) + 64, 0, 255)    uint8: fbgemm's step for the pinned range [-1, 1]
                                                          with reduce_range; 1.0 -> 128, as fbgemm gives it
    acc = MatMulInteger(u, Wq, a_zero_point=64)           exact int32; Wq int8 per output column, zero point 0
    y   = acc * (2/127 * w_scale) * s + b                 w_scale = max|W[:, n]| / 127 (the torch layer's rows)

so its outputs are the torch int8 mode's up to float rounding (~1e-6; tested), and a row's product depends on
that row alone: the graph's outputs do not depend on the batch beyond what the torch mode's do (Taskflow batches
only texts of one padded width in int8, on either backend). Linear layers are found as `MatMul` or `Gemm` nodes
whose weight is a 2-D float initializer (the exporter's `nn.Linear`); attention's activation products stay
float, as they do in torch.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["quantize_graph"]

_X_STEP = np.float32(2.0 / 127.0)  # fbgemm's input scale for the pinned range [-1, 1], reduce_range (7 bits)
_X_ZERO = 64  # its zero point: round(63.5) to even


def _weight_int8(w_kn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 (K, N), float32 (N,) scales) of a (K, N) weight, one scale per output column, as torch's
    `quantize_per_channel` on the (N, K) matrix with scale max|row| / 127 (clamped at 1e-12)."""
    w = w_kn.astype(np.float32)
    scale = np.maximum(np.abs(w).max(axis=0).astype(np.float64) / 127.0, 1e-12)
    q = np.clip(np.rint(w / scale[None, :]), -128, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def quantize_graph(src: str | os.PathLike, dst: str | os.PathLike) -> int:
    """Write the int8 version of the fp32 graph `src` to `dst`; returns how many linear layers were quantised."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    new_nodes, new_inits, done = [], [], {}
    count = 0

    def const(name: str, value: np.ndarray) -> str:
        new_inits.append(numpy_helper.from_array(value, name))
        return name

    eps = const("int8_eps", np.array(1e-30, dtype=np.float32))
    step = const("int8_x_step", np.array(_X_STEP, dtype=np.float32))
    zero = const("int8_x_zero", np.array(_X_ZERO, dtype=np.uint8))
    lo = const("int8_lo", np.array(0.0, dtype=np.float32))
    hi = const("int8_hi", np.array(255.0, dtype=np.float32))
    zero_f = const("int8_zero_f", np.array(float(_X_ZERO), dtype=np.float32))

    def weight_of(node) -> tuple[np.ndarray, str] | None:
        if node.op_type == "MatMul" and node.input[1] in inits:
            w = numpy_helper.to_array(inits[node.input[1]])
            return (w, node.input[1]) if w.ndim == 2 and w.dtype == np.float32 else None
        if node.op_type == "Gemm" and node.input[1] in inits:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
                return None
            w = numpy_helper.to_array(inits[node.input[1]])
            if w.ndim != 2 or w.dtype != np.float32:
                return None
            return (w.T if attrs.get("transB", 0) else w), node.input[1] + (
                "_T" if attrs.get("transB", 0) else ""
            )
        return None

    for node in graph.node:
        found = weight_of(node)
        if found is None:
            new_nodes.append(node)
            continue
        w_kn, key = found
        if key not in done:
            q, scale = _weight_int8(w_kn)
            done[key] = (
                const(f"{key}_int8", q),
                const(f"{key}_out_scale", (scale * _X_STEP).astype(np.float32)),
            )
        wq, out_scale = done[key]
        p = f"int8_{count}"
        x = node.input[0]
        out = node.output[0]
        new_nodes += [
            helper.make_node("Abs", [x], [f"{p}_abs"]),
            helper.make_node("ReduceMax", [f"{p}_abs"], [f"{p}_max"], axes=[-1], keepdims=1),
            helper.make_node("Max", [f"{p}_max", eps], [f"{p}_s"]),
            helper.make_node("Div", [x, f"{p}_s"], [f"{p}_unit"]),
            helper.make_node("Div", [f"{p}_unit", step], [f"{p}_steps"]),
            helper.make_node("Round", [f"{p}_steps"], [f"{p}_round"]),
            helper.make_node("Add", [f"{p}_round", zero_f], [f"{p}_shift"]),
            helper.make_node("Clip", [f"{p}_shift", lo, hi], [f"{p}_clip"]),
            helper.make_node("Cast", [f"{p}_clip"], [f"{p}_u8"], to=TensorProto.UINT8),
            helper.make_node("MatMulInteger", [f"{p}_u8", wq, zero], [f"{p}_acc"]),
            helper.make_node("Cast", [f"{p}_acc"], [f"{p}_accf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"{p}_accf", out_scale], [f"{p}_y0"]),
        ]
        if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]:
            new_nodes += [
                helper.make_node("Mul", [f"{p}_y0", f"{p}_s"], [f"{p}_y1"]),
                helper.make_node("Add", [f"{p}_y1", node.input[2]], [out]),
            ]
        else:
            new_nodes.append(helper.make_node("Mul", [f"{p}_y0", f"{p}_s"], [out]))
        count += 1
    if not count:
        raise ValueError(f"{src}: no linear layer (MatMul/Gemm with a 2-D float weight) found to quantise")
    used = {i for n in new_nodes for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.node[:]
    graph.node.extend(new_nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + [t for t in new_inits if t.name in used])
    onnx.checker.check_model(model)
    onnx.save(model, str(Path(dst)))
    return count
