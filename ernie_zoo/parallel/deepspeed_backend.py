"""DeepSpeed's side of `parallel/`: the config, the process-group start and the ZeRO checkpoint names.

The DeepSpeed json supplies ZeRO and communication settings; the recipe supplies everything it already owns
(micro batch, accumulation steps, precision, gradient clipping), and those are written over the json's values
(`build_config` / `make_config`) -- DeepSpeed's own default would clip gradients at 1.0 unless told otherwise.
Tensor parallelism uses the TP plan of `tp_plan.py` as DeepSpeed AutoTP `partition_config` layer specs, so
DTensor TP and DeepSpeed TP split exactly the same weights.

The engines that train with it live in the training core, which imports this module and never the other way
round: `ernie_zoo.training.deepspeed_engine` (`DeepSpeedEngine` of `ernie-pretrain`, the ZeRO-3 model builder,
the pickle-free ZeRO partition checkpoints) and `ernie_zoo.training.task_engine` (fine-tuning).
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
    steps, gradient clipping and precision."""
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
    )


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
) -> dict[str, Any]:
    """`base` (a json path, a dict, or None: `DEFAULT_CONFIG`) with the run's batch, precision and clipping
    written in; `grad_clip` None or 0 is written as 0.0 (no clipping), never left to DeepSpeed's default.

    `tp_size` (default: the json's `tensor_parallel.autotp_size`, else 1) > 1 adds AutoTP layer specs from
    `tp_plan` (keys as paths in the module DeepSpeed wraps). `zero_stage` overrides the json's stage.
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
    "init_deepspeed_distributed",
    "load_config",
    "make_config",
    "recipe_config",
    "recipe_zero_stage",
]
