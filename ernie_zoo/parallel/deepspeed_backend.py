"""DeepSpeed's side of `parallel/`: the config, the process-group start and the ZeRO checkpoint names.

The DeepSpeed json supplies ZeRO and communication settings; the recipe supplies everything it already owns
(micro batch, accumulation steps, precision, gradient clipping), and those are written over the json's values
(`build_config` / `make_config`) -- DeepSpeed's own default would clip gradients at 1.0 unless told otherwise.
Tensor parallelism uses the TP plan of `tp_plan.py` as DeepSpeed AutoTP `partition_config` layer specs, so
DTensor TP and DeepSpeed TP split exactly the same weights.

Offload (the recipe's `distributed.offload_optimizer` / `offload_param` / `nvme_path`, written over the json's
`zero_optimization.offload_optimizer` / `offload_param`): ZeRO-Offload (Ren et al. 2021) keeps the fp32 master
weights, gradients and Adam moments in host memory (or NVMe files) and steps them with DeepSpeed's CPU Adam
(`offloads_optimizer`: the engines then build `training.core.adamw(..., cpu_adam=True)`); ZeRO-Infinity
(Rajbhandari et al. 2021) also keeps each rank's ZeRO-3 parameter partition there. `make_config` refuses what
DeepSpeed would refuse later or silently ignore (`check_offload`).

The engines that train with it live in the training core, which imports this module and never the other way
round: `ernie_zoo.training.deepspeed_engine` (the DeepSpeed engine of fine-tuning and, with the pretraining
parts, of `ernie-pretrain`; the ZeRO-3 model builder; the pickle-free ZeRO partition checkpoints).
`ernie_zoo.parallel.consolidate` reads those checkpoints (`ZERO_DIR`, `WRAPPER_PREFIX`) without any ranks.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .distributed import TORCH_EXTENSIONS_DIR, init_from_env
from .tp_plan import deepspeed_partition_config

logger = logging.getLogger(__name__)

WRAPPER_PREFIX = "mlm."
ZERO_DIR = "zero"

#: Used when neither the recipe nor the caller names a DeepSpeed json: ZeRO-3, communication overlapped on GPUs.
DEFAULT_CONFIG: dict[str, Any] = {
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
    "steps_per_print": 1_000_000,
    "wall_clock_breakdown": False,
}

# Keys the recipe owns; a json that sets them differently is overridden (and logged).
_RECIPE_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")


def load_config(source: str | os.PathLike | dict[str, Any] | None) -> dict[str, Any]:
    """A DeepSpeed config dict from a json path, a dict (copied) or None (the built-in ZeRO-3 default)."""
    if source is None:
        return copy.deepcopy(DEFAULT_CONFIG)
    if isinstance(source, dict):
        return copy.deepcopy(source)
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"DeepSpeed config {path} not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"DeepSpeed config {path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"DeepSpeed config {path} must be a JSON object")
    return data


def build_config(
    recipe: Any,
    base: str | os.PathLike | dict[str, Any] | None = None,
    *,
    tp_size: int | None = None,
    zero_stage: int | None = None,
    tp_plan: dict[str, str] | None = None,
    on_cuda: bool | None = None,
) -> dict[str, Any]:
    """The DeepSpeed config for a pretraining recipe: `make_config` with the recipe's micro batch, accumulation
    steps, gradient clipping, precision and offload keys."""
    return make_config(
        base,
        micro_batch_size=recipe.micro_batch_size,
        grad_accum_steps=recipe.grad_accum_steps,
        grad_clip=recipe.optim.grad_clip,
        precision=recipe.precision,
        tp_size=tp_size,
        zero_stage=zero_stage,
        tp_plan=tp_plan,
        on_cuda=on_cuda,
        **offload_kwargs(recipe),
    )


def offload_kwargs(recipe: Any) -> dict[str, Any]:
    """The `make_config` offload arguments of a recipe's `distributed` section (None where it leaves the json's)."""
    dist_args = getattr(recipe, "distributed", None)
    return {key: getattr(dist_args, key, None) for key in ("offload_optimizer", "offload_param", "nvme_path")}


def make_config(
    base: str | os.PathLike | dict[str, Any] | None = None,
    *,
    micro_batch_size: int,
    grad_accum_steps: int,
    grad_clip: float | None,
    precision: str = "fp32",
    tp_size: int | None = None,
    zero_stage: int | None = None,
    tp_plan: dict[str, str] | None = None,
    on_cuda: bool | None = None,
    offload_optimizer: str | None = None,
    offload_param: str | None = None,
    nvme_path: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """`base` (a json path, a dict, or None: `DEFAULT_CONFIG`) with the run's batch, precision and clipping
    written in; `grad_clip` None or 0 is written as 0.0 (no clipping), never left to DeepSpeed's default.

    `tp_size` (default: the json's `tensor_parallel.autotp_size`, else 1) > 1 adds AutoTP layer specs from
    `tp_plan` (keys as paths in the module DeepSpeed wraps). `zero_stage` overrides the json's stage.
    `offload_optimizer` / `offload_param` ("none", "cpu", "nvme"; None: the json's) replace the json's
    `zero_optimization.offload_*` devices (the json's other settings of those sections are kept); "nvme" swaps
    to `nvme_path`. Pinned host buffers on CUDA only.
    """
    cfg = load_config(base)
    for section in ("optimizer", "scheduler"):
        if section in cfg:
            raise ValueError(
                f"DeepSpeed config sets {section!r}; the recipe's optim section owns the optimizer and LR "
                "schedule, so remove it from the json"
            )
    on_cuda = torch.cuda.is_available() if on_cuda is None else on_cuda
    wanted = {
        "train_micro_batch_size_per_gpu": int(micro_batch_size),
        "gradient_accumulation_steps": int(grad_accum_steps),
        # Always explicit: DeepSpeed would otherwise apply its own default clipping.
        "gradient_clipping": float(grad_clip or 0.0),
    }
    for key in _RECIPE_KEYS:
        if key in cfg and cfg[key] != wanted[key]:
            logger.info("DeepSpeed %s: the recipe's %r replaces the json's %r", key, wanted[key], cfg[key])
    cfg.pop("train_batch_size", None)
    cfg.update(wanted)

    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"recipe key 'precision' = {precision!r}: must be fp32, bf16 or fp16")
    if precision == "fp16" and not on_cuda:
        raise ValueError("recipe key 'precision' = 'fp16' needs CUDA; use fp32 or bf16 on CPU")
    json_precision = (
        "bf16"
        if cfg.get("bf16", {}).get("enabled")
        else "fp16"
        if cfg.get("fp16", {}).get("enabled")
        else "fp32"
    )
    if json_precision != precision:
        logger.info("DeepSpeed precision: the recipe's %s replaces the json's %s", precision, json_precision)
    cfg.pop("bf16", None)
    cfg.pop("fp16", None)
    if precision != "fp32":
        cfg[precision] = {"enabled": True}

    zero = cfg.setdefault("zero_optimization", {})
    if zero_stage is not None:
        zero["stage"] = int(zero_stage)
    if zero.get("stage", 0) not in (0, 1, 2, 3):
        raise ValueError(f"zero_optimization.stage must be 0-3, got {zero.get('stage')!r}")
    if not on_cuda and zero.get("overlap_comm"):
        zero["overlap_comm"] = False  # no CUDA streams to overlap on; gloo runs collectives synchronously
    for key, device in (("offload_optimizer", offload_optimizer), ("offload_param", offload_param)):
        if device is None:
            continue
        if device not in OFFLOAD_DEVICES:
            raise ValueError(f"distributed.{key} = {device!r}: must be one of {', '.join(OFFLOAD_DEVICES)}")
        if device == "none":
            zero.pop(key, None)
            continue
        # the json may tune the section (buffer_count, buffer_size, max_in_cpu, ...); the recipe picks the device
        section = {**(zero.get(key) or {}), "device": device}
        section["pin_memory"] = bool(on_cuda) and section.get("pin_memory", True)  # pinned pages need CUDA
        if device == "nvme":
            if not nvme_path:
                raise ValueError(
                    f"distributed.{key} = 'nvme' needs distributed.nvme_path (a local NVMe directory)"
                )
            section["nvme_path"] = str(Path(nvme_path).expanduser())
        zero[key] = section
    check_offload(zero)

    tp = tp_size if tp_size is not None else int((cfg.get("tensor_parallel") or {}).get("autotp_size") or 1)
    if tp < 1:
        raise ValueError(f"tp_size must be >= 1, got {tp}")
    if tp > 1:
        section = dict(cfg.get("tensor_parallel") or {})
        section["autotp_size"] = tp
        if tp_plan is not None:
            section["partition_config"] = deepspeed_partition_config(tp_plan)
        cfg["tensor_parallel"] = section
    else:
        cfg.pop("tensor_parallel", None)
    return cfg


def check_offload(zero: dict[str, Any]) -> None:
    """Raise ValueError for a `zero_optimization` section whose offload DeepSpeed cannot run: optimizer offload
    needs ZeRO stage 1-3 (stage 0 has no ZeRO optimizer to move), to NVMe stage 3; parameter offload needs
    stage 3 (stages 1-2 ignore it: every rank keeps the whole model); nvme needs a path."""
    stage = int(zero.get("stage", 0))
    opt = (zero.get("offload_optimizer") or {}).get("device", "none")
    param = (zero.get("offload_param") or {}).get("device", "none")
    where = "set distributed.zero_stage (or the json's zero_optimization.stage)"
    if opt not in OFFLOAD_DEVICES or param not in OFFLOAD_DEVICES:
        raise ValueError(
            f"zero_optimization offload devices must be {', '.join(OFFLOAD_DEVICES)}: {opt!r}, {param!r}"
        )
    if opt != "none" and stage == 0:
        raise ValueError(f"distributed.offload_optimizer = {opt!r} needs ZeRO stage 1-3, not 0: {where}")
    if opt == "nvme" and stage != 3:
        raise ValueError(
            f"distributed.offload_optimizer = 'nvme' needs ZeRO stage 3, not {stage} (cpu works with 1-2)"
        )
    if param != "none" and stage != 3:
        raise ValueError(
            f"distributed.offload_param = {param!r} needs ZeRO stage 3, not {stage}: {where} to 3"
        )
    for key, device in (("offload_optimizer", opt), ("offload_param", param)):
        if device == "nvme" and not zero[key].get("nvme_path"):
            raise ValueError(f"zero_optimization.{key} device nvme needs nvme_path (distributed.nvme_path)")


def offloads_optimizer(ds_config: dict[str, Any]) -> bool:
    """Whether DeepSpeed steps this config's optimizer on the CPU (ZeRO-Offload to cpu or nvme): it then needs
    DeepSpeed's CPU Adam, not torch's AdamW."""
    offload = (ds_config.get("zero_optimization") or {}).get("offload_optimizer") or {}
    return offload.get("device", "none") in ("cpu", "nvme")


def recipe_offloads_optimizer(recipe: Any, config: str | os.PathLike | dict[str, Any] | None = None) -> bool:
    """Whether a recipe's run offloads its optimizer: `distributed.offload_optimizer`, else its json's."""
    device = getattr(getattr(recipe, "distributed", None), "offload_optimizer", None)
    if device is not None:
        return device in ("cpu", "nvme")
    return offloads_optimizer(load_config(config if config is not None else recipe_config(recipe)))


def check_nvme_runtime(ds_config: dict[str, Any]) -> None:
    """Before ranks start on an nvme offload: DeepSpeed's async_io op must build here (it needs libaio), and
    every nvme_path must be a writable directory (created if missing)."""
    zero = ds_config.get("zero_optimization") or {}
    paths = [
        zero[key]["nvme_path"]
        for key in ("offload_optimizer", "offload_param")
        if (zero.get(key) or {}).get("device") == "nvme"
    ]
    if not paths:
        return
    from deepspeed.ops.op_builder import AsyncIOBuilder

    if not AsyncIOBuilder().is_compatible(verbose=False):
        raise RuntimeError(
            "offload to nvme needs DeepSpeed's async_io op, which cannot be built here: install libaio "
            "(apt-get install libaio-dev) or offload to cpu"
        )
    for path in paths:
        Path(path).mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(f"distributed.nvme_path {path} is not writable")


@contextlib.contextmanager
def autotp_looks_inside(modules: list[torch.nn.Module]) -> Iterator[None]:
    """While open, `modules` have no `weight` / `bias` attributes, so that DeepSpeed AutoTP splits the Linear
    layers inside them by the partition config. AutoTP takes any module with a 2-D `weight` for a Linear layer
    and never looks inside it; peft's LoRA layers show their base layer's weight as a property, so AutoTP would
    skip them whole. Each module's class is swapped for a subclass without the two properties, and back."""
    swapped = []
    try:
        for module in modules:
            swapped.append((module, type(module)))
            module.__class__ = _without_weight(type(module))
        yield
    finally:
        for module, cls in swapped:
            module.__class__ = cls


@functools.cache
def _without_weight(cls: type) -> type:
    def missing(self):
        raise AttributeError(f"{cls.__name__} hides its weight from AutoTP")

    return type(cls.__name__, (cls,), {"weight": property(missing), "bias": property(missing)})


def init_deepspeed_distributed(timeout_s: float | None = None) -> tuple[int, int, int]:
    """Start torch.distributed from the launcher's environment and DeepSpeed on it; (rank, world, local rank).
    timeout_s: the collective timeout (`init_from_env`; the recipe's `distributed.timeout_s`)."""
    import deepspeed

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(TORCH_EXTENSIONS_DIR))
    rank, world, local_rank = init_from_env(timeout_s=timeout_s)
    deepspeed.init_distributed(dist_backend=torch.distributed.get_backend())
    return rank, world, local_rank


def recipe_zero_stage(recipe: Any, config: str | os.PathLike | dict[str, Any] | None = None) -> int:
    """The ZeRO stage a recipe runs with: `distributed.zero_stage`, else its DeepSpeed json's (default: 3)."""
    stage = getattr(getattr(recipe, "distributed", None), "zero_stage", None)
    if stage is not None:
        return int(stage)
    cfg = load_config(config if config is not None else recipe_config(recipe))
    return int(cfg.get("zero_optimization", {}).get("stage", 0))


def recipe_config(recipe: Any) -> str | None:
    return getattr(getattr(recipe, "distributed", None), "deepspeed_config", None)


__all__ = [
    "DEFAULT_CONFIG",
    "WRAPPER_PREFIX",
    "ZERO_DIR",
    "autotp_looks_inside",
    "build_config",
    "check_nvme_runtime",
    "check_offload",
    "init_deepspeed_distributed",
    "load_config",
    "make_config",
    "offload_kwargs",
    "offloads_optimizer",
    "recipe_config",
    "recipe_offloads_optimizer",
    "recipe_zero_stage",
]
