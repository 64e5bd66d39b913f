"""Planner inputs (`ernie_zoo.parallel.planner`) from an `ernie-pretrain` recipe YAML: the model it builds and
how it runs. It lives in training/ because it reads the recipe schema; the planner itself imports nothing above
parallel/.

The recipe is loaded (and checked) with the schema, and its resolved values are planned, never the file's raw
keys (a recipe leaves out every key at its default): the run's recompute and pipeline stages, and its TP size,
ZeRO stage and offloads where the recipe sets them (null there means the DeepSpeed json's, read by the caller,
else the planner's defaults).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ernie_zoo.parallel.pipeline import stages_per_rank
from ernie_zoo.recipe_cli import load_recipe

from .build import build_model_config
from .causal_lm import decoder_config_for, is_decoder_preset
from .recipe import PretrainRecipe

#: distributed-section keys the planner understands -> ParallelSettings fields
DISTRIBUTED_KEYS = {
    "tp_size": "tp",
    "pp_size": "pp",  # the pipeline backend's stages (distributed.pp_size)
    "ep_size": "ep",  # expert parallelism of a MoE decoder (the pipeline backend at pp_size 1)
    "moe_capacity_factor": "moe_capacity_factor",  # token dropping at a capacity (the expert-parallel engine)
    "zero_stage": "zero_stage",
    "recompute": "recompute",
    "offload_optimizer": "offload_optimizer",
    "offload_param": "offload_param",
}


def planner_inputs_from_recipe(path: str | os.PathLike) -> tuple[Any, dict[str, Any], list[str]]:
    """(model config, ParallelSettings keyword arguments, warnings) for the run a recipe describes.

    The settings carry `deepspeed` (the json path) when the recipe names one; the vocabulary is the recipe's
    `model.vocab_size`, else the saved tokenizer's size, else the preset's. A decoder preset plans the ERNIE 4.5
    causal LM (`causal_lm.decoder_config_for`) with logits at every position; an encoder, at the masked ones.
    """
    recipe = load_recipe(path, cls=PretrainRecipe)
    seq_len = recipe.data.max_seq_len
    decoder = is_decoder_preset(recipe.model.preset)
    if decoder:
        config = decoder_config_for(recipe.model, _tokenizer(recipe), seq_len)
    else:
        config = build_model_config(recipe.model, _vocab_size(recipe), seq_len)

    warnings: list[str] = []
    settings: dict[str, Any] = {
        "seq_len": seq_len,
        "micro_batch": recipe.micro_batch_size,
        "grad_accum_steps": recipe.grad_accum_steps,
        "head_fraction": 1.0 if decoder else recipe.masking.mlm_probability,
    }
    if recipe.precision != "bf16":
        warnings.append(
            f"the recipe trains in {recipe.precision}; the plan assumes bf16 mixed precision (16 bytes/param)"
        )
    dist = recipe.distributed
    if dist.backend == "single":
        warnings.append(
            "the recipe's distributed.backend is 'single' (one device): the plan shows a sharded layout"
        )
    for key, field in DISTRIBUTED_KEYS.items():
        if getattr(dist, key) is not None:
            settings[field] = getattr(dist, key)
    if dist.deepspeed_config:
        settings["deepspeed"] = dist.deepspeed_config
    if dist.backend == "pipeline" and dist.pp_size > 1:  # the pipeline's schedule, planned with its bubble
        interleaved = dist.pp_schedule == "interleaved"
        settings["schedule"] = "1f1b" if interleaved else dist.pp_schedule
        settings["virtual_stages"] = stages_per_rank(dist.pp_schedule, dist.pp_virtual_stages)
    return config, settings, warnings


def _tokenizer(recipe: PretrainRecipe):
    """The recipe's saved tokenizer, if `tokenizer.path` is a directory here; else None."""
    tokenizer_path = recipe.tokenizer.path
    if tokenizer_path and Path(tokenizer_path).is_dir():
        from ernie_zoo.tokenization import ErnieZooTokenizerFast

        return ErnieZooTokenizerFast.from_pretrained(tokenizer_path)
    return None


def _vocab_size(recipe: PretrainRecipe) -> int:
    if recipe.model.vocab_size is not None:
        return recipe.model.vocab_size
    tokenizer = _tokenizer(recipe)
    if tokenizer is not None:
        return len(tokenizer)
    from ernie_zoo.models.presets import DEFAULTS

    return int(DEFAULTS["vocab_size"])


__all__ = ["DISTRIBUTED_KEYS", "planner_inputs_from_recipe"]
