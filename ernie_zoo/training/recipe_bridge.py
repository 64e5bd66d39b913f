"""Planner inputs (`ernie_zoo.parallel.planner`) from an `ernie-pretrain` recipe YAML: the model it builds and
how it runs. It lives in training/ because it reads the recipe schema; the planner itself imports nothing above
parallel/.

Read as plain YAML with the recipe's own model-section dataclass, so the planner also reads the
`distributed` keys of the DeepSpeed backend (`backend`, `deepspeed_config`, `tp_size`, `zero_stage`,
`recompute`) whether or not the installed recipe schema declares them yet.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .engine import build_model_config
from .recipe import ModelArgs, from_dict

#: distributed-section keys the planner understands -> ParallelSettings fields
DISTRIBUTED_KEYS = {"tp_size": "tp", "zero_stage": "zero_stage", "recompute": "recompute"}


def planner_inputs_from_recipe(path: str | os.PathLike) -> tuple[Any, dict[str, Any], list[str]]:
    """(ErnieZooConfig, ParallelSettings keyword arguments, warnings) for the run a recipe describes.

    The settings carry `deepspeed` (the json path) when the recipe names one; the vocabulary is the recipe's
    `model.vocab_size`, else the saved tokenizer's size, else the preset's.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a recipe must be a mapping of keys")
    model_args = from_dict(ModelArgs, data.get("model") or {}, "model.")
    seq_len = int((data.get("data") or {}).get("max_seq_len", 128))
    config = build_model_config(model_args, _vocab_size(model_args, data), seq_len)

    warnings: list[str] = []
    settings: dict[str, Any] = {
        "seq_len": seq_len,
        "micro_batch": int(data.get("micro_batch_size", 32)),
        "grad_accum_steps": int(data.get("grad_accum_steps", 1)),
        "head_fraction": float((data.get("masking") or {}).get("mlm_probability", 0.15)),
    }
    precision = data.get("precision", "fp32")
    if precision != "bf16":
        warnings.append(
            f"the recipe trains in {precision}; the plan assumes bf16 mixed precision (16 bytes/param)"
        )
    dist = data.get("distributed") or {}
    if dist.get("backend", "single") == "single":
        warnings.append(
            "the recipe's distributed.backend is 'single' (one device): the plan shows a sharded layout"
        )
    for key, field in DISTRIBUTED_KEYS.items():
        if dist.get(key) is not None:
            settings[field] = dist[key]
    if dist.get("deepspeed_config"):
        settings["deepspeed"] = dist["deepspeed_config"]
    return config, settings, warnings


def _vocab_size(model_args: Any, data: dict[str, Any]) -> int:
    if model_args.vocab_size is not None:
        return model_args.vocab_size
    tokenizer_path = (data.get("tokenizer") or {}).get("path")
    if tokenizer_path and Path(tokenizer_path).is_dir():
        from ernie_zoo.tokenization import ErnieZooTokenizerFast

        return len(ErnieZooTokenizerFast.from_pretrained(tokenizer_path))
    from ernie_zoo.models.presets import DEFAULTS

    return int(DEFAULTS["vocab_size"])


__all__ = ["DISTRIBUTED_KEYS", "planner_inputs_from_recipe"]
