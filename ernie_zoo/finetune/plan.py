"""Planner inputs from an `ernie-finetune` recipe (`ernie-zoo plan --recipe`): the encoder it fine-tunes, the
fraction of its parameters that train under the recipe's method, and the batch.

The trainable fraction is counted, not estimated: the task's model is built on the meta device (no memory)
and adapted by the same `apply_method` the run uses, so LoRA's factors, the task head and every module an
adapter method trains in full are counted exactly. Frozen parameters carry no gradient and no optimizer state
(`ernie_zoo.parallel.planner`, `trainable_fraction`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from .args import FINETUNE_KEYS, FinetuneArgs, recipe_schema


def is_finetune_recipe(path: str | os.PathLike) -> bool:
    """Whether the YAML at `path` is an ernie-finetune recipe (by its keys: `args.recipe_schema`)."""
    return recipe_schema(path) is FinetuneArgs


def _base_config(args) -> Any:
    """The encoder config the run would build (a pretrained directory's, or the preset's), without reading data."""
    from ernie_zoo.models import ErnieZooConfig
    from ernie_zoo.models.presets import preset_config

    m = args.model
    if m.model_name_or_path is not None:
        if not Path(m.model_name_or_path).is_dir():
            raise ValueError(
                f"recipe key 'model.model_name_or_path' = {m.model_name_or_path!r}: the plan reads local "
                "directories and shipped models only"
            )
        config = ErnieZooConfig.from_pretrained(m.model_name_or_path)
        for key, value in m.config_overrides.items():
            setattr(config, key, value)
        return config
    vocab = m.vocab_size
    if m.tokenizer is not None and Path(m.tokenizer).is_dir():
        from ernie_zoo.tokenization import load_tokenizer

        vocab = len(load_tokenizer(m.tokenizer))
    return preset_config(m.preset, vocab_size=vocab, **m.config_overrides)


def _head_fraction(args, config) -> float:
    """The task head's logits as a fraction of an MLM head's (seq x vocab per sequence): the planner's output
    layer term. Classification heads have a handful of labels; generation has the full vocabulary."""
    if args.task == "generation":
        return 1.0
    labels = len(args.data.labels or args.data.entity_types or ()) or 2
    if args.task == "token_classification":
        labels = 2 * labels + 1  # B-/I- per type + O
        return min(1.0, labels / config.vocab_size)
    return min(1.0, labels / (args.data.max_length * config.vocab_size))


def planner_inputs_from_finetune_recipe(path: str | os.PathLike) -> tuple[Any, dict[str, Any], list[str]]:
    """(ErnieZooConfig, ParallelSettings keyword arguments, warnings) for the run an ernie-finetune recipe
    describes. The settings hold `batch_size` (examples per micro batch over all data-parallel ranks: the
    caller, who knows the cluster, turns it into the per-GPU micro batch) and `deepspeed` (the json path)
    when the recipe names one."""
    import torch

    from .args import build_args
    from .methods import apply_method
    from .objectives import make_objective

    args = build_args(path).resolved()
    if make_objective(args).decoder:
        raise ValueError(
            f"{path}: recipe key 'task' = {args.task!r} fine-tunes an ERNIE 4.5 decoder, which this planner (ErnieZoo "
            "encoders) does not plan yet"
        )
    config = _base_config(args)
    t, d = args.train, args.distributed
    total_steps = t.max_steps or 1000  # AdaLoRA's budget schedule needs a number; it does not change counts
    with torch.device("meta"):
        model = make_objective(args).model_class()(config)
        _, info = apply_method(model, args.method, args.task, total_steps)
    settings: dict[str, Any] = {
        "seq_len": args.data.max_length,
        "batch_size": t.batch_size,
        "grad_accum_steps": t.grad_accum,
        "recompute": "none",  # ernie-finetune keeps activations
        "trainable_fraction": info.trainable / info.total,
        "head_fraction": _head_fraction(args, config),
    }
    if d.zero_stage is not None:
        settings["zero_stage"] = d.zero_stage
    if d.tp_size is not None:
        settings["tp"] = d.tp_size  # AutoTP (ernie-finetune splits LoRA factors with their layers)
    for key in ("offload_optimizer", "offload_param"):
        if getattr(d, key) is not None:
            settings[key] = getattr(d, key)
    if d.deepspeed_config:
        settings["deepspeed"] = d.deepspeed_config
    warnings = [
        f"method {info.name}: {info.trainable:,} of {info.total:,} parameters train ({info.fraction:.3%}); "
        "frozen ones have no gradients and no optimizer state in the plan",
        "ernie-finetune trains in fp32; the plan assumes bf16 mixed precision (16 bytes per trainable "
        "parameter, 2 per frozen one); fp32 needs 16 and 4",
        _build_memory_note(args, 4 * info.total / 2**30),
    ]
    if d.backend == "single":
        warnings.append(
            "the recipe's distributed.backend is 'single' (one device): the plan shows a sharded layout"
        )
    return config, settings, warnings


def _build_memory_note(args: Any, whole_gib: float) -> str:
    """What building the model takes outside the GPUs' plan: under ZeRO-3 nothing whole (the model is built
    partitioned), under stages 0-2 the whole fp32 model on every rank; either way rank 0 builds it whole once
    more after training, to score and export it as one process."""
    from ernie_zoo.parallel.deepspeed_backend import recipe_zero_stage

    after = f"after training rank 0 builds it whole ({whole_gib:.1f} GiB of host memory, fp32) to score and export it"
    stage = recipe_zero_stage(args)
    if stage == 3:
        return (
            "ernie-finetune builds the model already partitioned under ZeRO-3 (each rank holds 1/N of it, "
            f"from_pretrained loading each tensor into its partition); {after}"
        )
    return (
        f"ernie-finetune under ZeRO stage {stage} builds the model whole on every rank: each rank needs "
        f"{whole_gib:.1f} GiB of host memory for it (fp32); {after}"
    )


def micro_batch_for(batch_size: int, dp: int) -> tuple[int, str | None]:
    """(per-GPU micro batch, a note or None) for `batch_size` examples split over `dp` data-parallel ranks: the
    planner needs equal shares, the run gives the first ranks one more row when dp does not divide it."""
    micro = max(1, math.ceil(batch_size / dp))
    note = None
    if micro * dp != batch_size:
        note = (
            f"train.batch_size {batch_size} over {dp} data-parallel ranks: planned as {micro} per GPU "
            f"({micro * dp} per micro batch)"
        )
    return micro, note


__all__ = ["FINETUNE_KEYS", "is_finetune_recipe", "micro_batch_for", "planner_inputs_from_finetune_recipe"]
