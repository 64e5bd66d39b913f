"""Model FLOPs and MFU (model FLOPs utilisation), the estimate of nanoGPT's `estimate_mfu` / PaLM appendix B.

Training FLOPs per token = 6 x (matmul weights the token passes through) + the attention term
12 x layers x hidden x seq_len (QK^T and the weighted sum of V, forward 4·H·T per layer, x3 with backward).
Embedding lookups are not matmuls and are left out, as PaLM does. The MLM head (transform + decoder)
is counted only for the tokens it actually runs on: with the masked-only head that is the masked tokens,
so the MFU reports useful model FLOPs, not work a full-vocabulary head would waste on unmasked positions.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

# Dense peak FLOP/s per device by precision (vendor datasheets, no sparsity). fp32 means plain fp32
# matmuls (PyTorch's default: TF32 off).
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
    "L4": {"bf16": 121e12, "fp16": 121e12, "fp32": 30.3e12},
    "A10": {"bf16": 125e12, "fp16": 125e12, "fp32": 31.2e12},
    "V100": {"fp16": 125e12, "fp32": 15.7e12},
}


def body_matmul_params(config) -> int:
    """Matmul weights of the encoder that every token passes through (attention q/k/v/o, FFN, concat fusion)."""
    h, i, n_layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    n = n_layers * (4 * h * h + 2 * h * i)
    if getattr(config, "use_char_features", False) and getattr(config, "feature_fusion", "add") == "concat":
        n_features = sum(
            bool(getattr(config, k, False))
            for k in ("use_pinyin", "use_radical", "use_strokes", "use_stroke_sequence")
        )
        n += (h + n_features * config.char_feature_dim) * h
    return n


def head_matmul_params(config) -> int:
    """Matmul weights of the MLM head (transform dense + vocabulary decoder)."""
    return config.hidden_size * config.hidden_size + config.hidden_size * config.vocab_size


def training_flops(
    config, tokens: int, seq_len: int, head_tokens: int | None = None, sparse_last_layer: bool = False
) -> float:
    """FLOPs of forward + backward over `tokens` tokens in sequences of length `seq_len`, with the MLM head
    applied to `head_tokens` of them (default: all, as a full-vocabulary head does). `sparse_last_layer`: the
    last layer computes keys/values for every token but queries, attention output and FFN for the
    `head_tokens` only (what `masked_lm_loss(..., sparse_last_layer=True)` runs)."""
    head_tokens = tokens if head_tokens is None else head_tokens
    h, n_layers = config.hidden_size, config.num_hidden_layers
    attention_per_layer = 12 * h * seq_len  # per query token, forward + backward
    body = 6 * body_matmul_params(config) + n_layers * attention_per_layer
    flops = body * tokens + 6 * head_matmul_params(config) * head_tokens
    if sparse_last_layer and n_layers > 0:
        layer = 6 * (4 * h * h + 2 * h * config.intermediate_size) + attention_per_layer
        kv = 6 * 2 * h * h
        flops -= (layer - kv) * (tokens - head_tokens)
    return flops


def peak_flops_for(device, precision: str) -> float | None:
    """Peak FLOP/s of `device` (a torch.device or string) at `precision` from `PEAK_FLOPS`; None if unknown
    (CPUs, unlisted GPUs): then set `logging.peak_flops` in the recipe to get an MFU."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    for key, table in PEAK_FLOPS.items():
        if key in name.upper().replace("NVIDIA ", ""):
            return table.get(precision)
    logger.info("no peak FLOP/s known for %r; set logging.peak_flops to report MFU", name)
    return None


def mfu(flops: float, seconds: float, peak_flops: float | None, n_devices: int = 1) -> float | None:
    """Achieved FLOP/s over peak, or None without a peak."""
    if not peak_flops or seconds <= 0:
        return None
    return flops / seconds / (peak_flops * n_devices)


__all__ = [
    "PEAK_FLOPS",
    "body_matmul_params",
    "head_matmul_params",
    "mfu",
    "peak_flops_for",
    "training_flops",
]
