"""Selective activation recompute (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", sec. 5; Megatron-LM's `--recompute-granularity selective`): only the attention core of every layer is
recomputed in backward, for the ERNIE encoders and transformers' ERNIE 4.5 dense and MoE decoders alike.

    hidden ── q/k/v projections (+ RoPE) ──> q, k, v ─┬─ [ QK^T * scale + mask -> softmax -> dropout -> .V ] ─> out
                                                      │   checkpointed: nothing inside is kept for backward;
                                                      │   q, k, v are kept (the checkpoint's inputs) and the
                                                      │   core runs again in backward, dropout with the same RNG
    out ── output projection ── residual, norms, MLP / experts: kept for backward as without recompute

The core is what the attention module hands to transformers' attention interface (`ALL_ATTENTION_FUNCTIONS`), so
the wrapper is registered there as one more implementation, `selective_recompute_<base>` (base: the model's own,
sdpa or eager or a flash kernel), which calls the base function under `torch.utils.checkpoint` (non-reentrant). The
projections, norms and MLP run once, as without recompute. Masks are built as the base implementation builds them
(the same mask function is registered under the new name). The implementation name lives on the in-memory config
only: `config.json` never records it, so a checkpoint saved under selective recompute loads as any other.

What a layer keeps for backward, per Korthikanti's Table 2 (16-bit, t = 1): without recompute s*b*h*(34 + 5*a*s/h)
bytes; with the core recomputed the 5*a*s^2*b bytes of scores, softmax, dropout mask and dropout output go, and
s*b*h*34 stay (q, k and v among them, as the checkpoint's inputs); full recompute (`gradient_checkpointing_enable`,
or the pipeline engine's per-layer checkpoint) keeps the layer input only, 2*s*b*h. With an attention kernel that
never stores the s^2 scores (sdpa's flash / memory-efficient kernels) the two first are about equal, and
selective costs one more core forward for little: it pays where the scores are materialised (eager, masks sdpa's
fused kernels refuse). `parallel.planner.activation_bytes_per_layer` plans with these formulas; bench/recompute.py
measures them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

#: the recompute choices of a pretraining run (`distributed.recompute`) and of the planner
RECOMPUTE = ("none", "selective", "full")
PREFIX = "selective_recompute_"


def _base_core(module: nn.Module, base: str) -> Callable:
    """The attention core `base` names for this attention module: a registered implementation, or "eager", the
    model file's own `eager_attention_forward` (what transformers' attention modules fall back to)."""
    if base != "eager":
        return ALL_ATTENTION_FUNCTIONS[base]
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise TypeError(
            f"selective recompute over eager attention needs {type(module).__module__}.eager_attention_forward "
            f"(the attention core of {type(module).__name__}), which that module does not define"
        )
    return eager


def _selective(base: str) -> Callable:
    def attention(module: nn.Module, query, key, value, attention_mask, **kwargs):
        core = _base_core(module, base)
        if not torch.is_grad_enabled():  # inference: nothing is kept for backward anyway
            return core(module, query, key, value, attention_mask, **kwargs)
        # the RNG state is saved and restored around the rerun, so attention dropout draws the same mask
        return checkpoint(core, module, query, key, value, attention_mask, use_reentrant=False, **kwargs)

    attention.__name__ = attention.__qualname__ = f"{PREFIX}{base}"
    return attention


def _register(base: str) -> str:
    name = f"{PREFIX}{base}"
    if name not in ALL_ATTENTION_FUNCTIONS:
        if base not in ALL_MASK_ATTENTION_FUNCTIONS:
            raise ValueError(
                f"selective recompute wraps an attention implementation whose masks transformers builds; "
                f"{base!r} has none registered (sdpa, eager and the flash kernels do)"
            )
        AttentionInterface.register(name, _selective(base))
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    return name


def selective_recompute_enabled(model: nn.Module) -> bool:
    """Whether `model`'s attention core is recomputed in backward (`enable_selective_recompute`)."""
    return str(model.config._attn_implementation).startswith(PREFIX)


def enable_selective_recompute(model: nn.Module) -> None:
    """Recompute `model`'s attention core in backward from now on (see the module docstring); the model's attention
    implementation stays what it was underneath. Refuses a model that also checkpoints whole layers (full recompute
    already recomputes the core: the two do not stack)."""
    if getattr(model, "is_activation_checkpointing", False):
        raise ValueError(
            "the model already recomputes whole layers (gradient checkpointing, recompute full); selective "
            "recompute is the alternative to it, not an addition"
        )
    if selective_recompute_enabled(model):
        return
    model.set_attn_implementation(_register(model.config._attn_implementation))


def disable_selective_recompute(model: nn.Module) -> None:
    """Back to the attention implementation the model had before `enable_selective_recompute`."""
    if selective_recompute_enabled(model):
        model.set_attn_implementation(model.config._attn_implementation.removeprefix(PREFIX))


def apply_recompute(model: nn.Module, recompute: str) -> None:
    """`recompute` on a whole model: none; selective (the attention core, `enable_selective_recompute`); full (every
    layer, transformers' gradient checkpointing, non-reentrant). Raises ValueError for another choice."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    if recompute == "selective":
        enable_selective_recompute(model)
    elif recompute == "full":
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})


__all__ = [
    "RECOMPUTE",
    "apply_recompute",
    "disable_selective_recompute",
    "enable_selective_recompute",
    "selective_recompute_enabled",
]
