"""One logical training state, whatever the layout that wrote it: checkpoints with `torch.distributed.checkpoint`
(DCP) that resume on another layout (PP 2 x TP 2 saved, PP 1 x TP 1 x DP 4 resumed; one process reads them too).

    checkpoint-<step>/dcp/
        shard-00001-model-00001-of-00001.safetensors   rank 0's pieces  ┐ each piece: a key below with its offsets
        shard-00002-model-00001-of-00001.safetensors   rank 1's pieces  ├ in the whole tensor (DCP's sharding info,
        ...                                                             ┘ in the safetensors header)

Keys, the same for every layout (the model's own names and full shapes):

    model.<name>              every parameter and buffer of the model (tied copies once, as save_pretrained)
    optim.<name>.exp_avg      AdamW's moments of parameter <name>, shaped as it
    optim.<name>.exp_avg_sq
    optim.<name>.step         its step count (0-d)

A rank writes what it holds: a pipeline stage its layers, a TP rank its DTensor shards (DCP writes the piece with
its offsets), a ZeRO-1 rank the moments of its share; what several ranks hold (data-parallel replicas, the tied word
embeddings on the first and the last stage) is written once (DCP's de-duplication). Reading asks for the keys of
the reader's own layout, in its shapes and placements, and DCP reads each piece from whichever files overlap it:
that is the resharding. Storage is DCP's Hugging Face safetensors writer and reader (`save_distributed`): no pickle
anywhere; the metadata is rebuilt from the files' headers. The step, LR schedule, RNG and data position are the
training loop's (`training.checkpoint`, JSON).

Asynchronous save (`save(..., asynchronous=True)`): DCP copies the state into CPU memory, returns, and writes in a
background thread whose collectives run on a process group of their own (`checkpoint_group`), so the training
step's collectives never interleave with the writer's. The returned future completes on every rank once every
rank's pieces are written: DCP's last step gathers each rank's write results on rank 0 and answers all.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

DCP_DIR = "dcp"
MODEL_PREFIX = "model."
OPTIM_PREFIX = "optim."
#: AdamW's per-parameter state, as torch.optim.AdamW keeps it
ADAMW_FIELDS = ("exp_avg", "exp_avg_sq", "step")


def _dist_on() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _single_process_quietly() -> contextlib.AbstractContextManager:
    """DCP in one process warns that it assumes one process on every call: that is the intent here."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    return stack


def checkpoint_group() -> Any:
    """A gloo process group over every rank for the checkpoint writer's collectives (None without a process
    group). Every rank must call it, in the same order as its other `new_group` calls."""
    import torch.distributed as dist

    return dist.new_group(backend="gloo") if _dist_on() else None


def model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`model.<name>` -> the model's tensors as it holds them (DTensor shards stay DTensors), tied copies once."""
    from ernie_zoo.utils import tied_names

    tied = tied_names(model)
    return {MODEL_PREFIX + k: v for k, v in model.state_dict().items() if k not in tied}


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """`optim.<name>.<field>` -> AdamW's state of each parameter the optimizer steps (ZeRO-1: this rank's share),
    created as AdamW would create it when a parameter has none yet (before the first step, and as the tensors a
    load fills in)."""
    from torch.optim.optimizer import _get_scalar_dtype

    names = {id(p): n for n, p in model.named_parameters()}
    out: dict[str, torch.Tensor] = {}
    for group in optimizer.param_groups:
        fused = bool(group.get("fused"))
        for p in group["params"]:
            state = optimizer.state[p]
            if not state:
                state["step"] = torch.zeros(
                    (), dtype=_get_scalar_dtype(is_fused=fused), device=p.device if fused else "cpu"
                )
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            unknown = set(state) - set(ADAMW_FIELDS)
            if unknown:
                raise ValueError(
                    f"optimizer state of {names[id(p)]} has {sorted(unknown)}: the logical checkpoint holds "
                    f"AdamW's {', '.join(ADAMW_FIELDS)} only (amsgrad and other optimizers are not supported)"
                )
            for field in ADAMW_FIELDS:
                out[f"{OPTIM_PREFIX}{names[id(p)]}.{field}"] = state[field]
    return out


def saved_shapes(directory: str | os.PathLike) -> dict[str, tuple[list[int], torch.dtype]]:
    """key -> (full shape, dtype) of every tensor a logical checkpoint holds, read from its files' headers."""
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    path = Path(directory) / DCP_DIR
    if not path.is_dir():
        raise ValueError(f"{directory} has no {DCP_DIR}/: not a logical (resharding) checkpoint")
    meta = HuggingFaceStorageReader(str(path)).read_metadata()
    return {k: (list(v.size), v.properties.dtype) for k, v in meta.state_dict_metadata.items()}


def save(
    state: dict[str, torch.Tensor],
    directory: str | os.PathLike,
    *,
    process_group: Any = None,
    asynchronous: bool = False,
) -> Future | None:
    """Write `state` (every rank its own; the keys above) into `directory/dcp`. Every rank calls it with the
    same `process_group` (`checkpoint_group()`; None: the default group). `asynchronous`: return once the state
    is copied to CPU memory, with a future that completes when every rank's pieces are written; else return None
    after that."""
    import torch.distributed.checkpoint as dcp

    path = Path(directory) / DCP_DIR
    path.mkdir(parents=True, exist_ok=True)
    writer = dcp.HuggingFaceStorageWriter(str(path), save_distributed=True)
    kwargs = {"storage_writer": writer, "process_group": process_group, "no_dist": not _dist_on()}
    with _single_process_quietly():
        if asynchronous:
            return dcp.async_save(state, **kwargs)
        dcp.save(state, **kwargs)
    return None


def load(state: dict[str, torch.Tensor], directory: str | os.PathLike, *, process_group: Any = None) -> None:
    """Fill `state` (this rank's tensors in its own layout: plain, or DTensors) in place from `directory/dcp`,
    whatever layout wrote it. Raises ValueError naming the keys the checkpoint lacks or holds in another shape."""
    import torch.distributed.checkpoint as dcp

    saved = saved_shapes(directory)
    missing = sorted(k for k in state if k not in saved)
    if missing:
        raise ValueError(
            f"{directory} does not hold {len(missing)} tensor(s) this run needs, e.g. {missing[:4]}: was it "
            "written for another model or optimizer?"
        )
    wrong = [
        f"{k}: saved {saved[k][0]}, here {list(v.shape)}"
        for k, v in state.items()
        if saved[k][0] != list(v.shape)
    ]
    if wrong:
        raise ValueError(
            f"{directory} holds tensors of other shapes than this model's ({'; '.join(wrong[:4])})"
        )
    reader = dcp.HuggingFaceStorageReader(str(Path(directory) / DCP_DIR))
    with _single_process_quietly():
        dcp.load(state, storage_reader=reader, process_group=process_group, no_dist=not _dist_on())


def read_full(directory: str | os.PathLike, prefix: str = MODEL_PREFIX) -> dict[str, torch.Tensor]:
    """{name: whole tensor} of the keys under `prefix` (the model's by default, the prefix removed), on the CPU,
    read by this process alone (no collective: rank 0 joins model.safetensors this way while the others train)."""
    import torch.distributed.checkpoint as dcp

    shapes = {k: v for k, v in saved_shapes(directory).items() if k.startswith(prefix)}
    state = {k: torch.empty(shape, dtype=dtype) for k, (shape, dtype) in shapes.items()}
    reader = dcp.HuggingFaceStorageReader(str(Path(directory) / DCP_DIR))
    with _single_process_quietly():
        dcp.load(state, storage_reader=reader, no_dist=True)
    return {k[len(prefix) :]: v for k, v in state.items()}


__all__ = [
    "ADAMW_FIELDS",
    "DCP_DIR",
    "checkpoint_group",
    "load",
    "model_state",
    "optimizer_state",
    "read_full",
    "save",
    "saved_shapes",
]
