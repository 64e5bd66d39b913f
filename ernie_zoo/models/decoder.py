"""ERNIE 4.5 decoders (Baidu 2025, "ERNIE 4.5 Technical Report"): transformers' own dense and MoE causal LMs,
registered in the project's registry as they are, so a `baidu/ERNIE-4.5-0.3B-PT`-format directory (config.json
with `architectures: ["Ernie4_5ForCausalLM"]`, safetensors) loads unchanged, with plain
`AutoModelForCausalLM.from_pretrained` and without trust_remote_code. Nothing here re-implements a layer.

    dense  Ernie4_5ForCausalLM:      embed -> L x [RMSNorm, GQA attention (RoPE), RMSNorm, SwiGLU MLP] -> RMSNorm -> lm_head
    MoE    Ernie4_5_MoeForCausalLM:  the same, with the MLP of layers moe_layer_start_index..end (every
           moe_layer_interval-th) replaced by a router over moe_num_experts SwiGLU experts, top moe_k per token,
           plus moe_num_shared_experts always-on experts

Presets (0.3B, 21B-A3B, 300B-A47B shapes and smaller/larger ones) are in `presets.DECODER_PRESETS`. The
pinyin/radical/stroke character features are an encoder option only (docs/decoders.md).
"""

from __future__ import annotations

from typing import Any

from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM, Ernie4_5Config, Ernie4_5ForCausalLM
from transformers.models.ernie4_5_moe.modeling_ernie4_5_moe import Ernie4_5_MoeSparseMoeBlock

from .registry import register

register("text-generation", what="an ERNIE 4.5 dense decoder")(Ernie4_5ForCausalLM)
register("text-generation", what="an ERNIE 4.5 MoE decoder")(Ernie4_5_MoeForCausalLM)

DECODER_CLASSES: dict[type, type] = {
    Ernie4_5Config: Ernie4_5ForCausalLM,
    Ernie4_5_MoeConfig: Ernie4_5_MoeForCausalLM,
}


def is_decoder_config(config: Any) -> bool:
    """Whether `config` is an ERNIE 4.5 decoder's (dense or MoE)."""
    return type(config) in DECODER_CLASSES


def is_moe(config: Any) -> bool:
    return isinstance(config, Ernie4_5_MoeConfig)


def decoder_config(moe: bool = False, **fields: Any):
    """transformers' `Ernie4_5_MoeConfig` (moe) or `Ernie4_5Config` with `fields` over its defaults."""
    return (Ernie4_5_MoeConfig if moe else Ernie4_5Config)(**fields)


def build_decoder(config: Any, device: str | None = None):
    """The causal LM of `config`, random weights; device "meta" allocates nothing (any size)."""
    import torch

    cls = DECODER_CLASSES.get(type(config))
    if cls is None:
        raise TypeError(f"not an ERNIE 4.5 decoder config: {type(config).__name__}")
    if device is None:
        return cls(config)
    with torch.device(device):
        return cls(config)


def moe_blocks(model) -> list[Ernie4_5_MoeSparseMoeBlock]:
    """The sparse MoE blocks of `model`, in layer order (none for a dense model)."""
    return [m for m in model.modules() if isinstance(m, Ernie4_5_MoeSparseMoeBlock)]


def decoder_counts(model) -> dict[str, int]:
    """Exact counts of a decoder (a meta-device one costs nothing), tied weights once:

    total     every parameter
    experts   the routed experts' parameters (what expert parallelism splits)
    active    what one token uses: every parameter except the routed experts it is not sent to, i.e.
              total - experts + experts x top_k / num_experts (router, shared experts, attention, embeddings
              and lm_head all count as active)
    moe_layers  layers with a sparse MoE block
    """
    total = sum(p.numel() for p in model.parameters())
    experts = active_experts = 0
    blocks = moe_blocks(model)
    for block in blocks:
        n = sum(p.numel() for p in block.experts.parameters())
        if n % block.num_experts:
            raise AssertionError(
                f"expert parameters {n} do not split evenly over {block.num_experts} experts"
            )
        experts += n
        active_experts += n // block.num_experts * block.top_k
    return {
        "total": total,
        "experts": experts,
        "active": total - experts + active_experts,
        "moe_layers": len(blocks),
    }


__all__ = [
    "DECODER_CLASSES",
    "build_decoder",
    "decoder_config",
    "decoder_counts",
    "is_decoder_config",
    "is_moe",
    "moe_blocks",
]
