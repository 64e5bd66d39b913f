"""Which engine trains, per `distributed.backend`: the one place a backend is chosen, for pretraining
(`engine_for_recipe`, `build_model_for`) and for fine-tuning (`make_engine`, `task_deepspeed_config`,
`zero3_build_context`).

    single     one process, one device: `engine.PlainEngine`
    deepspeed  DeepSpeed ZeRO 0-3 (+ AutoTP) over the launched ranks: `deepspeed_engine.DeepSpeedEngine`; under
               ZeRO-3 the model is built already partitioned
    pipeline   pipeline stages (x TP x ZeRO-1 data parallelism): `pipeline_engine.PipelineEngine` (pretraining
               only; it builds its stages' optimizer from the recipe; a MoE decoder's stages with
               distributed.ep_size); a MoE decoder at pp_size 1 (any distributed.ep_size): expert parallelism x
               TP x data parallelism, `expert_engine.ExpertParallelEngine`

`make_engine` builds the single and deepspeed engines from explicit parts (model, optimizer, schedule, clipping,
precision, objective); fine-tuning calls it with its own. `engine_for_recipe` builds a pretraining recipe's
parts (its AdamW + warm-up/decay schedule, precision, `torch_compile`, DeepSpeed config and recompute, the
objective `objective.PretrainObjective`) and hands them to `make_engine`. What every engine provides (the one
contract) is written in `engine`'s docstring.

The engines import nothing from here, and a backend's heavy imports (deepspeed) happen only when it is selected.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
from typing import Any

import torch

from ernie_zoo.models.recompute import RECOMPUTE, apply_recompute

from .build import build_pretraining_model, compile_layers, init_weights_from, optimizer_and_schedule
from .engine import PlainEngine
from .objective import PretrainObjective
from .recipe import BACKENDS, PretrainRecipe

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


def make_engine(
    backend: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    *,
    max_grad_norm: float,
    device: torch.device,
    precision: str = "fp32",
    objective: torch.nn.Module | None = None,
    ds_config: dict[str, Any] | None = None,
    fixed_accumulation: bool = False,
    batch_size: int | None = None,
    n_train: int = 0,
) -> PlainEngine:
    """The engine of `backend` over these parts: one process (`PlainEngine`: `precision`, `objective`), or
    DeepSpeed ZeRO (+ AutoTP) with `ds_config` over the launched ranks (`DeepSpeedEngine`: `objective`,
    `fixed_accumulation`; its precision and clipping are the config's). `batch_size` (fine-tuning): each
    data-parallel group reads its contiguous share of every batch of that many examples (of `n_train` per
    epoch), checked to leave every group at least one."""
    if backend == "single":
        return PlainEngine(
            model, optimizer, scheduler, max_grad_norm, device, precision=precision, objective=objective
        )
    if backend != "deepspeed" or ds_config is None:
        raise ValueError(
            f"make_engine builds the single and deepspeed (with its config) engines, not {backend!r}; the pipeline "
            "engine is built from a pretraining recipe (engine_for_recipe)"
        )
    import torch.distributed as dist

    from .deepspeed_engine import DeepSpeedEngine

    if batch_size is not None:
        dp = dist.get_world_size() // int((ds_config.get("tensor_parallel") or {}).get("autotp_size") or 1)
        last = n_train % batch_size
        if batch_size < dp or 0 < last < dp:
            raise ValueError(
                f"recipe key 'train.batch_size' = {batch_size}: with {n_train} training examples an epoch's last "
                f"batch has {last or batch_size} examples, fewer than the {dp} data-parallel ranks that share "
                "every batch; choose a batch size (or data.max_train_samples) that leaves none or at least that "
                "many"
            )
    return DeepSpeedEngine(
        model, optimizer, scheduler, ds_config, objective=objective, fixed_accumulation=fixed_accumulation
    )


def engine_for_recipe(
    recipe: PretrainRecipe,
    model: torch.nn.Module,
    device: torch.device | None = None,
    *,
    backend: str | None = None,
    config: str | os.PathLike | dict[str, Any] | None = None,
    tp_size: int | None = None,
    zero_stage: int | None = None,
    recompute: str | None = None,
) -> Any:
    """The pretraining engine of `backend` (default `recipe.distributed.backend`), with the recipe's parts: AdamW + warm-up/decay
    schedule (`build.optimizer_and_schedule`), clipping, precision, the objective (`objective.PretrainObjective`).

    single: `model` moved to `device`, its encoder layers compiled under `torch_compile` (`build.compile_layers`),
    a fused AdamW. deepspeed (`device` unused: each rank takes its LOCAL_RANK GPU, or the CPU without CUDA): the
    DeepSpeed config `parallel.deepspeed_backend.build_config` makes of the json `config` (default
    `distributed.deepspeed_config`), `tp_size` and `zero_stage` (default: the recipe's `distributed` keys);
    `recompute` (default `distributed.recompute`, `models.recompute.apply_recompute`): "full" recomputes every layer
    in backward (non-reentrant activation checkpointing), "selective" only every layer's attention core; an offloaded optimizer steps as DeepSpeed's CPU Adam. pipeline: `PipelineEngine`,
    which keeps this rank's stages and builds their optimizer itself.
    """
    backend = backend or recipe.distributed.backend
    if backend not in BACKENDS:
        raise ValueError(f"recipe key 'distributed.backend' = {backend!r}: one of {sorted(BACKENDS)}")
    if backend == "pipeline":
        from ernie_zoo.models.decoder import is_moe

        if recipe.distributed.pp_size == 1 and (recipe.distributed.ep_size > 1 or is_moe(model.config)):
            from .expert_engine import ExpertParallelEngine

            return ExpertParallelEngine(recipe, model, device)
        from .pipeline_engine import PipelineEngine

        return PipelineEngine(recipe, model, device)
    objective = PretrainObjective(
        model,
        recipe.sparse_last_layer,
        recipe.masking.polarity_weight,
        keep_details=backend == "single",  # the loss's parts are logged by one-process runs
    )
    if backend == "single":
        model = model.to(device)
        if recipe.torch_compile:
            compile_layers(model)
        # fused: one kernel per step over all parameters (CPU and CUDA); what HF Trainer uses by default too
        optimizer, scheduler = optimizer_and_schedule(recipe, model, fused=device.type in ("cpu", "cuda"))
        return make_engine(
            "single",
            model,
            optimizer,
            scheduler,
            max_grad_norm=recipe.optim.grad_clip or 0.0,
            device=device,
            precision=recipe.precision,
            objective=objective,
        )
    from ernie_zoo.parallel.deepspeed_backend import (
        build_config,
        check_nvme_runtime,
        offloads_optimizer,
        recipe_config,
    )

    d = recipe.distributed
    recompute = recompute if recompute is not None else d.recompute
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    ds_config = build_config(
        recipe,
        config if config is not None else recipe_config(recipe),
        tp_size=tp_size if tp_size is not None else d.tp_size,
        zero_stage=zero_stage if zero_stage is not None else d.zero_stage,
    )
    check_nvme_runtime(ds_config)
    apply_recompute(model, recompute)
    # ZeRO-Offload steps the optimizer on the host: DeepSpeed takes only its own CPU Adam there
    optimizer, scheduler = optimizer_and_schedule(recipe, model, cpu_adam=offloads_optimizer(ds_config))
    return make_engine(
        "deepspeed",
        model,
        optimizer,
        scheduler,
        max_grad_norm=float(ds_config["gradient_clipping"]),
        device=device,
        objective=objective,
        ds_config=ds_config,
        fixed_accumulation=True,
    )


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


__all__ = [
    "MODEL_BUILDERS",
    "build_model_for",
    "engine_for_recipe",
    "make_engine",
    "task_deepspeed_config",
    "zero3_build_context",
]
