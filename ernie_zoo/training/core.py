"""What every training run shares, pretraining (`ernie-pretrain`) and fine-tuning (`ernie-finetune`) alike:
seeding, AdamW's parameter groups and the learning-rate schedule.

One weight-decay rule for every run (BERT's): **no decay on biases and other 1-D parameters, on LayerNorm
weights, or on anything in the embedding block** -- the word, position and type tables, the pinyin / radical /
stroke tables and their fusion projection (all under `embeddings.`), peft's prompt-encoder embedding. Every other
trainable matrix (attention, feed-forward, heads, LoRA factors outside the embedding block) decays.

One schedule: linear warm-up over `warmup_steps` (the first step gets lr / warmup_steps), then cosine or linear
decay to `min_lr_ratio` x lr at `total_steps`, or constant.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

DECAY_SCHEDULES = ("cosine", "linear", "constant")


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (torch's seeds CUDA too)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def numel(param: torch.Tensor) -> int:
    """Elements of `param` whole, also when ZeRO-3 holds it partitioned (its data then is this rank's shard or
    empty; `ds_numel` counts the whole)."""
    return int(getattr(param, "ds_numel", param.numel()))


def decays(name: str, param: torch.Tensor) -> bool:
    """Whether AdamW decays the parameter `name` (the rule in the module docstring). A ZeRO-3-partitioned
    parameter's data is a flat (or empty) shard: its real shape is `ds_shape`."""
    ndim = len(getattr(param, "ds_shape", param.shape))
    return not (ndim < 2 or "embedding" in name or "LayerNorm" in name or "layer_norm" in name)


def param_groups(
    model: torch.nn.Module,
    weight_decay: float,
    head_modules: tuple[str, ...] = (),
    head_lr: float | None = None,
) -> list[dict[str, Any]]:
    """AdamW groups of the trainable parameters: [decayed (`weight_decay`), not decayed (0.0)], empty groups left
    out. With `head_lr`, the parameters under a module named in `head_modules` (a dotted-name component, so peft's
    `classifier.modules_to_save.default.weight` counts) form two more groups with `"lr": head_lr` (the scheduler
    scales every group's own peak). Raises ValueError when nothing is trainable."""
    heads = set(head_modules) if head_lr is not None else set()
    buckets: dict[tuple[bool, bool], list] = {(h, d): [] for h in (False, True) for d in (True, False)}
    for name, p in model.named_parameters():
        if p.requires_grad:
            buckets[(bool(heads & set(name.split("."))), decays(name, p))].append(p)
    groups = []
    for (head, decay), params in buckets.items():
        if params:
            group = {"params": params, "weight_decay": weight_decay if decay else 0.0}
            if head:
                group["lr"] = head_lr
            groups.append(group)
    if not groups:
        raise ValueError("the model has no trainable parameters")
    return groups


def adamw(
    model: torch.nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    fused: bool = False,
    cpu_adam: bool = False,
    head_modules: tuple[str, ...] = (),
    head_lr: float | None = None,
) -> torch.optim.Optimizer:
    """AdamW over `param_groups(model, weight_decay)`; `fused`: one kernel per step (CPU and CUDA). `cpu_adam`:
    DeepSpeed's `DeepSpeedCPUAdam` in AdamW mode instead (the same update, vectorised C++ on the host), which
    DeepSpeed requires when ZeRO-Offload steps the optimizer on the CPU; its op is JIT-built once into
    TORCH_EXTENSIONS_DIR. `head_modules`, `head_lr`: the task head's own peak learning rate (`param_groups`)."""
    groups = param_groups(model, weight_decay, head_modules, head_lr)
    if cpu_adam:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(groups, lr=lr, betas=tuple(betas), eps=eps, adamw_mode=True)
    kwargs: dict[str, Any] = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, **kwargs)


def lr_lambda(
    warmup_steps: int, total_steps: int, decay: str = "linear", min_lr_ratio: float = 0.0
) -> Callable[[int], float]:
    """Multiplier of the peak learning rate after `s` optimizer steps (for `LambdaLR`): linear warm-up over
    `warmup_steps` (step s gets (s + 1) / warmup_steps), then `decay` (cosine, linear or constant) from 1 to
    `min_lr_ratio` at `total_steps`."""
    if decay not in DECAY_SCHEDULES:
        raise ValueError(f"decay must be one of {DECAY_SCHEDULES}, got {decay!r}")

    def f(s: int) -> float:
        if s < warmup_steps:
            return (s + 1) / warmup_steps
        if decay == "constant":
            return 1.0
        progress = min(1.0, (s - warmup_steps) / max(1, total_steps - warmup_steps))
        shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if decay == "cosine" else 1.0 - progress
        return min_lr_ratio + (1.0 - min_lr_ratio) * shape

    return f


def warmup_decay(optimizer: torch.optim.Optimizer, **schedule: Any) -> torch.optim.lr_scheduler.LambdaLR:
    """`LambdaLR(optimizer, lr_lambda(**schedule))`."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(**schedule))


__all__ = [
    "DECAY_SCHEDULES",
    "adamw",
    "decays",
    "lr_lambda",
    "numel",
    "param_groups",
    "seed_everything",
    "warmup_decay",
]
