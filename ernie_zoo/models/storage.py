"""The storage formats of a model.safetensors and how each is read back to float weights.

A plain file (what `save_pretrained` writes) names no format. A file written by `save_int8_weights` or
`save_q4_0_weights` names its format in its safetensors metadata (`ernie_zoo_weights`) and stores its large matrices
under suffixed keys; `ErnieZooPreTrainedModel.from_pretrained` reads both through `stored_weights_file` and
`load_stored_state_dict` (dequantised to float, then loaded as usual). A file naming a format this version does not
know is refused, never loaded as if it were plain (its matrices would be missing and come out random).

=================  ==============================  ==========================================================
format             module                          matrices
=================  ==============================  ==========================================================
``int8-rowwise``   ``ernie_zoo.models.int8``       int8 rows, one fp32 scale per row (quantised by us)
``q4_0``           ``ernie_zoo.models.q4_0``       4-bit blocks of 32 with an fp16 scale, as a source shipped them
=================  ==============================  ==========================================================
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from . import int8, q4_0

FORMATS: dict[str, Callable[..., dict[str, torch.Tensor]]] = {
    int8.INT8_ROWWISE: int8.dequantize_state_dict,
    q4_0.Q4_0: q4_0.dequantize_state_dict,
}


def stored_weights_file(directory: str | os.PathLike) -> tuple[Path, str] | None:
    """(path, format) of a local directory's model.safetensors if it names a storage format, else None; ValueError
    for a format this version cannot read."""
    path = Path(directory) / int8.WEIGHTS_NAME
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as f:
        fmt = (f.metadata() or {}).get(int8.FORMAT_KEY)
    if fmt is None:
        return None
    if fmt not in FORMATS:
        raise ValueError(
            f"{path}: weights stored as {fmt!r}, which this version of ernie-zoo cannot read (it reads "
            f"{', '.join(sorted(FORMATS))}); upgrade ernie-zoo"
        )
    return path, fmt


def load_stored_state_dict(
    path: str | os.PathLike, fmt: str, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """The float state dict of a file in storage format `fmt` (original keys, matrices in `dtype`)."""
    return FORMATS[fmt](load_file(str(path)), dtype)


__all__ = ["FORMATS", "load_stored_state_dict", "stored_weights_file"]
