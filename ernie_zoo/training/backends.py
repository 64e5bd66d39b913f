"""Which engine trains, per `distributed.backend`: the one place a backend is chosen, for pretraining (`make_engine`,
`build_model_for`) and for fine-tuning (`make_task_engine`, `task_deepspeed_config`, `zero3_build_context`).

    single     one process, one device: `task_engine.PlainEngine` (fine-tuning, whose models return their own
               loss), `engine.SingleDeviceEngine` (pretraining: the same engine with the pretraining parts)
    deepspeed  DeepSpeed ZeRO 0-3 (+ AutoTP) over the launched ranks: `deepspeed_engine.DeepSpeedTaskEngine`,
               `deepspeed_engine.DeepSpeedEngine` (the same + the pretraining parts); under ZeRO-3 the model is
               built already partitioned
    pipeline   pipeline stages (x TP x ZeRO-1 data parallelism): `pipeline_engine` (pretraining only)

What every engine provides (the one contract) is written in `task_engine`'s docstring.

The engines import nothing from here, and a backend's heavy imports (deepspeed) happen only when it is selected.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from typing import Any

import torch

from .build import build_pretraining_model, init_weights_from
from .engine import SingleDeviceEngine
from .recipe import PretrainRecipe
from .task_engine import PlainEngine

#: distributed.backend -> the engine's constructor `(recipe, model, device)`, or "module:attribute" imported on
#: use (so a backend's heavy imports, e.g. deepspeed, happen only when it is selected).
ENGINES: dict[str, Any] = {
    "single": SingleDeviceEngine,
    "deepspeed": "ernie_zoo.training.deepspeed_engine:engine_factory",
    "pipeline": "ernie_zoo.training.pipeline_engine:engine_factory",
}

#: distributed.backend -> model builder `(config, recipe, tokenizer)` for backends that build the model their
#: own way, so no rank ever holds all of it (ZeRO-3: partitioned at construction; pipeline: on the meta device,
#: the engine allocates its stages only); others use `build.build_pretraining_model`.
MODEL_BUILDERS: dict[str, Any] = {
    "deepspeed": "ernie_zoo.training.deepspeed_engine:model_factory",
    "pipeline": "ernie_zoo.training.pipeline_engine:model_factory",
}


def _resolve(factory: Any) -> Any:
    """A registry entry: the callable itself, or "module:attribute" imported now."""
    if isinstance(factory, str):
        module, _, attribute = factory.partition(":")
        factory = getattr(importlib.import_module(module), attribute)
    return factory


def make_engine(recipe: PretrainRecipe, model: torch.nn.Module, device: torch.device) -> SingleDeviceEngine:
    """The engine of `recipe.distributed.backend`."""
    try:
        factory = ENGINES[recipe.distributed.backend]
    except KeyError:
        raise ValueError(
            f"recipe key 'distributed.backend' = {recipe.distributed.backend!r}: one of {sorted(ENGINES)}"
        ) from None
    return _resolve(factory)(recipe, model, device)


def build_model_for(recipe: PretrainRecipe, config: Any, tokenizer) -> torch.nn.Module:
    """The model the recipe's backend trains (an encoder, or a decoder for a decoder `config`):
    `MODEL_BUILDERS[distributed.backend]` where the backend builds it its own way, else built whole
    (`build.build_pretraining_model`) and initialised from `model.init_from` if given."""
    builder = MODEL_BUILDERS.get(recipe.distributed.backend)
    if builder is not None:
        return _resolve(builder)(config, recipe, tokenizer)
    model = build_pretraining_model(config, tokenizer, recipe.seed)
    if recipe.model.init_from is not None:
        init_weights_from(model, recipe.model.init_from)
    return model


def task_deepspeed_config(
    json_config: Any,
    *,
    tp_size: int | None,
    zero_stage: int | None,
    batch_size: int,
    grad_accum: int,
    max_grad_norm: float,
    offload: dict[str, Any],
) -> dict[str, Any]:
    """The DeepSpeed config of a fine-tuning run on the started process group: the json's ZeRO and communication
    settings with the run's micro batch (`batch_size` over the data-parallel ranks: the ranks over the TP size),
    accumulation, clipping and TP size written over them. The engine trains with it (adding the AutoTP layer specs
    of its model); under ZeRO-3 the model is built by it (`zero3_build_context`). Raises ValueError if the TP size
    does not divide the ranks."""
    import torch.distributed as dist

    from ernie_zoo.parallel.deepspeed_backend import check_nvme_runtime, load_config, make_config

    base = load_config(json_config)
    tp = tp_size or int((base.get("tensor_parallel") or {}).get("autotp_size") or 1)
    world = dist.get_world_size()
    if world % tp:
        raise ValueError(
            f"distributed.tp_size {tp} (null: the DeepSpeed json's autotp_size) does not divide the {world} "
            "launched ranks; every group of tp_size ranks holds one copy of the model"
        )
    config = make_config(
        base,
        micro_batch_size=math.ceil(batch_size / (world // tp)),
        grad_accum_steps=grad_accum,
        grad_clip=max_grad_norm,
        precision="fp32",
        tp_size=tp,
        zero_stage=zero_stage,
        **offload,
    )
    check_nvme_runtime(config)
    return config


def zero3_build_context(ds_config: dict[str, Any] | None) -> contextlib.AbstractContextManager:
    """Where a fine-tuning model is built: under ZeRO-3 (`deepspeed_engine.zero3_building`) already partitioned over
    the ranks, no rank ever holding it whole; otherwise nothing special."""
    if ds_config is None or ds_config["zero_optimization"].get("stage") != 3:
        return contextlib.nullcontext()
    from .deepspeed_engine import zero3_building

    # without the TP section: AutoTP splits the model when the engine starts, and transformers' ZeRO-3 loader
    # refuses to load checkpoints under a TP config
    return zero3_building({k: v for k, v in ds_config.items() if k != "tensor_parallel"})


def make_task_engine(
    backend: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    *,
    max_grad_norm: float,
    device: torch.device,
    ds_config: dict[str, Any] | None = None,
    batch_size: int = 1,
    n_train: int = 0,
) -> PlainEngine:
    """The fine-tuning engine of `backend`: one process (`PlainEngine`), or DeepSpeed ZeRO (+ AutoTP) with
    `ds_config` over the launched ranks, each data-parallel group reading its contiguous share of every batch of
    `batch_size` examples (of `n_train` per epoch)."""
    if backend == "single":
        return PlainEngine(model, optimizer, scheduler, max_grad_norm, device)
    if backend != "deepspeed" or ds_config is None:
        raise ValueError(
            f"fine-tuning runs on the single or deepspeed backend (with its config), not {backend!r}"
        )
    import torch.distributed as dist

    from .deepspeed_engine import DeepSpeedTaskEngine

    dp = dist.get_world_size() // int((ds_config.get("tensor_parallel") or {}).get("autotp_size") or 1)
    last = n_train % batch_size
    if batch_size < dp or 0 < last < dp:
        raise ValueError(
            f"recipe key 'train.batch_size' = {batch_size}: with {n_train} training examples an epoch's last "
            f"batch has {last or batch_size} examples, fewer than the {dp} data-parallel ranks that share "
            "every batch; choose a batch size (or data.max_train_samples) that leaves none or at least that many"
        )
    return DeepSpeedTaskEngine(model, optimizer, scheduler, ds_config)


__all__ = [
    "ENGINES",
    "MODEL_BUILDERS",
    "build_model_for",
    "make_engine",
    "make_task_engine",
    "task_deepspeed_config",
    "zero3_build_context",
]
