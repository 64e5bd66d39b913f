"""Model size presets as data (the nanoGPT way): name -> architecture overrides of `ErnieZooConfig`.

nano/micro/mini/medium/base/xbase follow ERNIE 3.0's published shapes (Sun et al. 2021; PaddleNLP model
zoo); `10b` and `100b` are ERNIE-style encoders sized for ZeRO-3 + tensor parallelism. Vocabulary 40000 is
ERNIE 3.0's. Exact parameter counts are computed by `count_parameters`, on the meta device, never typed.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # tests and CI
    "tiny": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128),
    # the zoo's shipped models: sized to pretrain on 2 CPU cores and ship in <= 25 MB (fp16)
    "zoo-mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
    # ERNIE 3.0 family
    "nano": dict(num_hidden_layers=4, hidden_size=312, num_attention_heads=12, intermediate_size=1248),
    "micro": dict(num_hidden_layers=4, hidden_size=384, num_attention_heads=12, intermediate_size=1536),
    "mini": dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536),
    "medium": dict(num_hidden_layers=6, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "xbase": dict(num_hidden_layers=20, hidden_size=1024, num_attention_heads=16, intermediate_size=4096),
    # scale-out (GPU clusters; instantiate on the meta device here)
    "1b": dict(num_hidden_layers=24, hidden_size=2048, num_attention_heads=16, intermediate_size=8192),
    "10b": dict(num_hidden_layers=48, hidden_size=4096, num_attention_heads=32, intermediate_size=16384),
    "100b": dict(num_hidden_layers=80, hidden_size=10240, num_attention_heads=80, intermediate_size=40960),
}

DEFAULTS: dict[str, Any] = dict(vocab_size=40000, max_position_embeddings=2048, use_task_id=True)
SMALL_DEFAULTS: dict[str, Any] = dict(max_position_embeddings=512)
SMALL = {"tiny", "zoo-mini", "nano", "micro", "mini", "medium", "base", "xbase"}


def preset_config(name: str, **overrides: Any):
    """An `ErnieZooConfig` for a preset; keyword arguments override any field."""
    from .configuration import ErnieZooConfig

    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    fields = {**DEFAULTS, **(SMALL_DEFAULTS if name in SMALL else {}), **PRESETS[name], **overrides}
    return ErnieZooConfig(**fields)


def count_parameters(config, head: str = "mlm") -> int:
    """Exact parameter count of a model built from `config` on the meta device (no memory is allocated).

    head: "base" (encoder only), "mlm" (encoder + MLM head; decoder weight tied to the word embeddings).
    """
    import torch

    from .modeling import ErnieZooForMaskedLM, ErnieZooModel

    cls = {"base": ErnieZooModel, "mlm": ErnieZooForMaskedLM}[head]
    with torch.device("meta"):
        model = cls(config)
    # parameters() de-duplicates tied weights, so the tied decoder is counted once.
    return sum(p.numel() for p in model.parameters())
