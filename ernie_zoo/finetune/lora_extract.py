"""A fully fine-tuned model as a LoRA adapter on its base: the difference of each weight matrix, truncated to its
top singular directions (the "LoRA extraction" of model-merging tools), so a full fine-tune ships as a few MB on a
base the package already carries.

    delta = W_tuned - W_base = U S V^T  ->  lora_B = U_r S_r^1/2, lora_A = S_r^1/2 V_r^T, alpha = r (scale 1)

for every Linear of ``targets`` and the word embeddings (peft's embedding LoRA: delta^T = B A); the rest of what
fine-tuning changed rides along whole: every bias (peft ``bias="all"``), the LayerNorms, position and token-type
embeddings, the task head and any other weight it changed (e.g. character-feature tables) (``modules_to_save``). At full rank the adapter computes exactly the tuned model; below
it, the errors it returns say how much of each difference was dropped. The result is a plain peft adapter: peft's
``PeftModel.from_pretrained`` and ``merge_and_unload`` read it as they read a trained one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import nn

logger = logging.getLogger(__name__)

#: modules whose tuned weights the adapter carries whole (small: norms, positions, token types)
WHOLE_MODULES = ("LayerNorm", "position_embeddings", "token_type_embeddings")


def _low_rank(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(B, A, relative Frobenius error) with B @ A the best rank-`rank` approximation of `delta` (out, in)."""
    u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
    r = min(rank, s.numel())
    root = s[:r].sqrt()
    b, a = u[:, :r] * root, root[:, None] * vh[:r]
    total = float(s.square().sum())
    error = float(s[r:].square().sum() / total) ** 0.5 if total > 0 else 0.0
    if r < rank:  # pad with zero directions so every layer has the adapter's rank
        b = torch.cat([b, b.new_zeros(b.shape[0], rank - r)], dim=1)
        a = torch.cat([a, a.new_zeros(rank - r, a.shape[1])], dim=0)
    return b.float(), a.float(), error


def lora_from_difference(
    base: nn.Module,
    tuned: nn.Module,
    rank: int,
    *,
    targets: Sequence[str] = ("query", "key", "value", "dense"),
    embeddings: str | None = "word_embeddings",
    head: Sequence[str] = ("classifier",),
):
    """A peft LoRA model on `base` (changed in place: it becomes the peft model's base) computing `tuned` up to the
    rank-`rank` truncation of each difference (module docstring). `base` and `tuned`: the same architecture (a
    checkpoint fine-tuned from `base`'s weights). Returns (peft model, {module: relative Frobenius error})."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    tuned_sd = tuned.state_dict()
    base_sd = base.state_dict()
    if set(tuned_sd) != set(base_sd):
        diff = sorted(set(tuned_sd) ^ set(base_sd))[:5]
        raise ValueError(
            f"the tuned model and the base differ in their weights ({diff} ...): not one architecture"
        )
    # any other weight fine-tuning changed (e.g. the character-feature tables) is carried whole too
    low_rank = {*targets, *([embeddings] if embeddings else [])}
    modules = dict(base.named_modules())
    whole = [*head, *WHOLE_MODULES]
    for key, value in base_sd.items():
        module, _, leaf = key.rpartition(".")
        last = module.rpartition(".")[2]
        lora_able = isinstance(modules.get(module), (nn.Linear, nn.Embedding)) and last in low_rank
        if leaf == "bias" or (lora_able and leaf == "weight") or torch.equal(value, tuned_sd[key]):
            continue
        if not any(part in whole for part in module.split(".")):
            whole.append(last)
    config = LoraConfig(
        r=rank,
        lora_alpha=rank,
        lora_dropout=0.0,
        target_modules=sorted(low_rank),
        bias="all",
        modules_to_save=whole,
    )
    model = get_peft_model(base, config)
    errors: dict[str, float] = {}
    prefix = "base_model.model."
    with torch.no_grad():
        for name, module in model.named_modules():
            key = name[len(prefix) :] if name.startswith(prefix) else name
            if isinstance(module, LoraLayer):
                w0 = module.base_layer.weight
                delta = tuned_sd[f"{key}.weight"].to(w0.dtype) - w0
                if isinstance(module.base_layer, nn.Embedding):
                    b, a, errors[key] = _low_rank(delta.T, rank)  # (dim, num) = B A
                    module.lora_embedding_B["default"].copy_(b)
                    module.lora_embedding_A["default"].copy_(a)
                else:
                    b, a, errors[key] = _low_rank(delta, rank)
                    module.lora_B["default"].weight.copy_(b)
                    module.lora_A["default"].weight.copy_(a)
            if hasattr(module, "modules_to_save") and "default" in getattr(module, "modules_to_save", {}):
                module.modules_to_save["default"].load_state_dict(
                    {k: tuned_sd[f"{key}.{k}"] for k in module.modules_to_save["default"].state_dict()}
                )
        for name, param in model.named_parameters():
            carried = "modules_to_save" in name or "original_module" in name  # set above
            if name.endswith(".bias") and "lora_" not in name and not carried:
                key = name[len(prefix) :].replace(".base_layer", "")
                param.copy_(tuned_sd[key])
    worst = max(errors.values(), default=0.0)
    logger.info(
        "LoRA r=%d from the difference: %d matrices, worst relative error %.3f", rank, len(errors), worst
    )
    return model, errors


__all__ = ["WHOLE_MODULES", "lora_from_difference"]
