"""Int8 weight storage: a model.safetensors whose large matrices are stored as int8 rows with one scale each.

    w (R, C) float  ->  q = round(w / s) (R, C) int8,  s = max|w[r]| / 127 per row (R,) float32
    load:              w ≈ q * s[:, None], in the model's compute dtype

A matrix is stored this way when it is 2-D, floating point and holds at least `min_elements` values (the
embeddings and the linear layers of an encoder); every other tensor (biases, LayerNorm, CRF transitions, small
heads) keeps its dtype. The rounding error of a row is at most s/2, half a step of 1/254 of the row's largest
value; the file is about half the size of fp16.

The file marks itself in its safetensors metadata (`ernie_zoo_weights: int8-rowwise`) and names each stored
matrix `<key>.int8` with its scales in `<key>.int8_scale`, so a loader that does not know the format finds the
original keys missing and fails loudly instead of loading integers as weights. `ErnieZooPreTrainedModel
.from_pretrained` reads such a directory (it dequantises, then loads as usual); the computation is the float
model's.

Int8 *compute* on CPU (Taskflow's `precision="int8"`) is `quantize_linear_int8(model)`: every `nn.Linear`
becomes a `RowwiseInt8Linear`, whose products run in int8 on fbgemm (about 6x the fp32 speed of a 256 x 1024
layer on one core of this machine). Its weights are int8 with one scale per output row; its *inputs* are
quantised with one scale per row (per token) as well:

    s_r = max|x[r]|,  y[r] = s_r · int8_linear(x[r] / s_r) + b

torch's `quantize_dynamic` instead takes one scale for the whole (batch x tokens, features) input, so a text's
result depends on the other texts of its batch (and on how far the batch is padded): a long or unusual neighbour
coarsens everyone's quantisation. fbgemm derives the input's scale from the tensor's min and max, so each call
appends two constant rows (all +1 and all -1) that pin them: every row, scaled into [-1, 1], is then quantised
with the same fixed step, and its integer product is exact: a layer's output for a row depends on that row
alone. The float parts around the layers (attention over the padded keys) still round differently, by ~1e-7, at
another padded width, and the next layer's input quantisation can turn that into a whole rounding step (whole-model
scores moved by up to ~1e-3; 0.15 and changed entities in 3 of 1,000 MSRA sentences with `quantize_dynamic`), so
Taskflow batches only texts of one padded width in int8 (`EncoderTask.batches`): a text's scores are then the same
bits alone and in any batch.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

WEIGHTS_NAME = "model.safetensors"
FORMAT_KEY = "ernie_zoo_weights"
INT8_ROWWISE = "int8-rowwise"
QUANT_SUFFIX = ".int8"
SCALE_SUFFIX = ".int8_scale"
MIN_ELEMENTS = 4096


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 values, float32 per-row scales) of a 2-D tensor; an all-zero row gets scale 1 (and stays zero)."""
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(f"row-wise int8 needs a 2-D float tensor, got {weight.dim()}-D {weight.dtype}")
    w = weight.detach().float()
    scale = w.abs().amax(dim=1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if q.dtype != torch.int8 or q.dim() != 2 or scale.shape != (q.shape[0],):
        raise ValueError(
            f"int8 weights need an int8 (R, C) tensor and R scales, got {q.dtype} {tuple(q.shape)} and scales "
            f"{tuple(scale.shape)}"
        )
    return (q.float() * scale.float()[:, None]).to(dtype)


def quantize_state_dict(
    state_dict: dict[str, torch.Tensor],
    min_elements: int = MIN_ELEMENTS,
    other_dtype: torch.dtype | None = None,
) -> dict[str, torch.Tensor]:
    """The tensors of an int8 file: each large 2-D float matrix as `<key>.int8` + `<key>.int8_scale`, the rest
    as they are (contiguous copies), their floating-point ones cast to `other_dtype` if given."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        if key.endswith((QUANT_SUFFIX, SCALE_SUFFIX)):
            raise ValueError(f"state dict key {key!r} ends with a suffix the int8 format reserves")
        if tensor.dim() == 2 and tensor.is_floating_point() and tensor.numel() >= min_elements:
            out[key + QUANT_SUFFIX], out[key + SCALE_SUFFIX] = quantize_rows(tensor)
        elif other_dtype is not None and tensor.is_floating_point():
            out[key] = tensor.detach().to(other_dtype).contiguous()
        else:
            out[key] = tensor.detach().contiguous().clone()
    return out


def dequantize_pairs(
    tensors: dict[str, torch.Tensor],
    dequantize,
    *,
    quant_suffix: str,
    scale_suffix: str,
    label: str,
    dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Original keys from a stored state dict whose matrices are `<key><quant_suffix>` + `<key><scale_suffix>` pairs
    (`dequantize(values, scales, dtype)` rebuilds each); other tensors pass through. A half of a pair without the
    other is an error naming it (`label`: the format, for the message). Shared by the int8 and Q4_0 formats."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        if key.endswith(scale_suffix):
            if key[: -len(scale_suffix)] + quant_suffix not in tensors:
                raise ValueError(f"{label} weights: {key!r} has no matching {quant_suffix!r} tensor")
            continue
        if key.endswith(quant_suffix):
            base = key[: -len(quant_suffix)]
            scales = tensors.get(base + scale_suffix)
            if scales is None:
                raise ValueError(f"{label} weights: {key!r} has no scales ({base + scale_suffix!r})")
            out[base] = dequantize(tensor, scales, dtype)
        else:
            out[key] = tensor
    return out


def dequantize_state_dict(
    tensors: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """The inverse of `quantize_state_dict` (up to rounding): original keys, stored matrices in `dtype`."""
    return dequantize_pairs(
        tensors,
        dequantize_rows,
        quant_suffix=QUANT_SUFFIX,
        scale_suffix=SCALE_SUFFIX,
        label="int8",
        dtype=dtype,
    )


def _scaled_rows(x: torch.Tensor, pins: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the rows of `x` divided by their max |value|, with the two pin rows appended; the (n, 1) scales)."""
    rows = x.reshape(-1, x.shape[-1]).float()
    n = rows.shape[0]
    # max |x| per row as two reductions (no |x| temporary): ~40% faster than rows.abs().amax(1)
    scale = torch.maximum(rows.amax(dim=1, keepdim=True), rows.amin(dim=1, keepdim=True).neg_()).clamp_min_(
        1e-30
    )
    scaled = torch.empty(n + 2, rows.shape[1])
    torch.div(rows, scale, out=scaled[:n])
    scaled[n:] = pins
    return scaled, scale


class RowwiseInt8Linear(nn.Module):
    """An `nn.Linear` computed in int8 with per-row input scales (see the module docstring); CPU only."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()
        scale = (weight.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
        # quantized tensors are deprecated in favour of torchao, which this stack does not ship
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            q = torch.quantize_per_channel(
                weight, scale, torch.zeros_like(scale, dtype=torch.long), axis=0, dtype=torch.qint8
            )
            self._packed = torch.ops.quantized.linear_prepack(q, None)
        bias = linear.bias.detach().float() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)
        pins = torch.ones(2, self.in_features)
        pins[1] = -1.0
        self.register_buffer("pins", pins, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        scaled, scale = _scaled_rows(x, self.pins)
        y = torch.ops.quantized.linear_dynamic(scaled, self._packed, True)[: scale.shape[0]]
        # in place on the fresh product: half the time of an out-of-place addcmul
        y = torch.addcmul(self.bias, y, scale, out=y) if self.bias is not None else y.mul_(scale)
        return y.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )


def quantize_linear_int8(model: nn.Module) -> nn.Module:
    """`model` with every `nn.Linear` replaced, in place, by a `RowwiseInt8Linear` (inference only, CPU)."""
    for name, child in list(model.named_children()):
        if type(child) is nn.Linear:
            setattr(model, name, RowwiseInt8Linear(child))
        else:
            quantize_linear_int8(child)
    return model


def int8_weights_file(directory: str | os.PathLike) -> Path | None:
    """The model.safetensors of a local directory if it is stored in the int8 format, else None."""
    path = Path(directory) / WEIGHTS_NAME
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    return path if meta.get(FORMAT_KEY) == INT8_ROWWISE else None


def load_int8_state_dict(
    path: str | os.PathLike, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    return dequantize_state_dict(load_file(str(path)), dtype)


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numel() > 0 and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def save_int8_weights(
    model: nn.Module,
    directory: str | os.PathLike,
    min_elements: int = MIN_ELEMENTS,
    other_dtype: torch.dtype | None = torch.float16,
) -> Path:
    """Write `model`'s weights to `directory`/model.safetensors in the int8 format, replacing the file
    `save_pretrained` wrote (atomically: a temporary file renamed into place). Returns the path. The matrices are
    quantised from the model's own values (keep it in fp32); the other float tensors are stored in `other_dtype`
    (default fp16, None keeps their dtype).

    Tied parameters (one tensor under several keys) are stored once when the model ties them again on load (its
    `all_tied_weights_keys`, as transformers' `save_pretrained` drops them: a masked-LM head's decoder tied to the
    word embeddings); any other tensor shared between keys is refused: the format stores every key on its own.
    """
    state = model.state_dict()
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if target in state and source in state and _same_storage(state[target], state[source]):
            del state[target]
    seen: dict[int, str] = {}
    for key, tensor in state.items():
        ptr = tensor.untyped_storage().data_ptr() if tensor.numel() else None
        if ptr is not None and ptr in seen and tensor.dim() == 2:
            raise ValueError(f"int8 weights: {key!r} shares its storage with {seen[ptr]!r} (tied weights)")
        if ptr is not None:
            seen[ptr] = key
    tensors = quantize_state_dict(state, min_elements, other_dtype)
    path = Path(directory) / WEIGHTS_NAME
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        save_file(tensors, str(tmp), metadata={"format": "pt", FORMAT_KEY: INT8_ROWWISE})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


__all__ = [
    "INT8_ROWWISE",
    "RowwiseInt8Linear",
    "dequantize_pairs",
    "dequantize_rows",
    "dequantize_state_dict",
    "int8_weights_file",
    "load_int8_state_dict",
    "quantize_linear_int8",
    "quantize_rows",
    "quantize_state_dict",
    "save_int8_weights",
]
