"""Model size presets as data (the nanoGPT way): name -> architecture overrides of `ErnieZooConfig`.

nano/micro/mini/medium/base/xbase follow ERNIE 3.0's published shapes (Sun et al. 2021; PaddleNLP model
zoo); `10b` and `100b` are ERNIE-style encoders sized for ZeRO-3 + tensor parallelism. Vocabulary 40000 is
ERNIE 3.0's. `DECODER_PRESETS` are ERNIE 4.5 causal LMs (transformers' `Ernie4_5Config`, or `Ernie4_5_MoeConfig`
for a preset that sets `moe_num_experts`; `models/decoder.py`). Exact parameter counts are computed by
`count_parameters` / `parameter_counts`, on the meta device, never typed.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # tests and CI
    "tiny": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128),
    # the zoo's shipped models: sized to pretrain on 2 CPU cores and ship in <= 25 MB (fp16)
    "zoo-mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
    # multilingual-e5-small's shape (intfloat, MIT; models/e5.py): the zoo's pretrained base, BERT-style (no task-type
    # embedding), 512 positions; its character vocabulary (e5.char_vocabulary) is 20,564 tokens
    "e5-small": dict(
        num_hidden_layers=12,
        hidden_size=384,
        num_attention_heads=12,
        intermediate_size=1536,
        use_task_id=False,
        layer_norm_eps=1e-12,
    ),
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

# ERNIE 4.5 decoders over transformers' defaults (vocabulary 103424, RoPE theta 5e5, RMSNorm, SwiGLU, tied
# embeddings). Published shapes are written out in full, so a test can hold them to transformers' defaults, which
# are the published 0.3B and 21B-A3B configs (`Ernie4_5Config()`, `Ernie4_5_MoeConfig()`).
# fmt: off
DECODER_PRESETS: dict[str, dict[str, Any]] = {
    # tests and CI (CPU forward/backward in seconds)
    "ernie4.5-tiny": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, intermediate_size=128, vocab_size=1000),
    "ernie4.5-moe-tiny": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                              intermediate_size=128, vocab_size=1000, moe_num_experts=4, moe_k=2,
                              moe_num_shared_experts=1, moe_intermediate_size=32, moe_layer_start_index=1),
    # CPU-trainable; the zoo's 16,000-character vocabulary (ernie-zoo-mini-zh); 7.3M parameters = 14.6 MB fp16
    "ernie4.5-zoo": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=64, intermediate_size=768, vocab_size=16000, max_position_embeddings=1024),
    # baidu/ERNIE-4.5-0.3B-PT config.json, as transformers' Ernie4_5Config defaults (checkpoint named there)
    "ernie4.5-0.3b": dict(num_hidden_layers=18, hidden_size=1024, num_attention_heads=16, num_key_value_heads=2,
                          head_dim=128, intermediate_size=3072, vocab_size=103424),
    # baidu/ERNIE-4.5-21B-A3B-PT config.json, as transformers' Ernie4_5_MoeConfig defaults (checkpoint named there)
    "ernie4.5-21b-a3b": dict(num_hidden_layers=28, hidden_size=2560, num_attention_heads=20, num_key_value_heads=4,
                             intermediate_size=12288, vocab_size=103424, moe_num_experts=64, moe_k=6,
                             moe_num_shared_experts=2, moe_intermediate_size=1536, moe_layer_start_index=1),
    # baidu/ERNIE-4.5-300B-A47B-PT config.json as published (ERNIE 4.5 model card / technical report): hidden 8192,
    # 54 layers, 64 query / 8 KV heads, dense FFN 28672 in layers 0-2, 64 experts of 3584 from layer 3, top-8, no
    # shared experts, untied lm_head. Written from the published config; NOT checked against the hub from here
    # (offline; transformers ships no 300B reference). Its counts, 299.5B total and 47.9B active, agree with the
    # name, which they would not with shared experts or tied embeddings.
    "ernie4.5-300b-a47b": dict(num_hidden_layers=54, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
                               intermediate_size=28672, vocab_size=103424, moe_num_experts=64, moe_k=8,
                               moe_num_shared_experts=0, moe_intermediate_size=3584, moe_layer_start_index=3,
                               tie_word_embeddings=False),
    # a dense ~100B decoder (ours, not a Baidu model): the encoder `100b`'s 80 x 10240 with 8 KV heads (TP 8
    # splits whole KV heads), SwiGLU FFN 32768, untied lm_head
    "ernie4.5-100b": dict(num_hidden_layers=80, hidden_size=10240, num_attention_heads=80, num_key_value_heads=8,
                          head_dim=128, intermediate_size=32768, vocab_size=103424, tie_word_embeddings=False),
}
# fmt: on

DEFAULTS: dict[str, Any] = dict(vocab_size=40000, max_position_embeddings=2048, use_task_id=True)
SMALL_DEFAULTS: dict[str, Any] = dict(max_position_embeddings=512)
SMALL = {"tiny", "zoo-mini", "e5-small", "nano", "micro", "mini", "medium", "base", "xbase"}


def preset_config(name: str, **overrides: Any):
    """The config of a preset: an `ErnieZooConfig` (encoder presets) or transformers' `Ernie4_5Config` /
    `Ernie4_5_MoeConfig` (`DECODER_PRESETS`); keyword arguments override any field."""
    from .configuration import ErnieZooConfig

    if name in DECODER_PRESETS:
        from .decoder import decoder_config

        fields = {**DECODER_PRESETS[name], **overrides}
        return decoder_config(moe="moe_num_experts" in fields, **fields)
    if name not in PRESETS:
        raise ValueError(
            f"unknown preset {name!r}; choose one of {sorted(PRESETS) + sorted(DECODER_PRESETS)}"
        )
    fields = {**DEFAULTS, **(SMALL_DEFAULTS if name in SMALL else {}), **PRESETS[name], **overrides}
    return ErnieZooConfig(**fields)


def count_parameters(config, head: str = "mlm") -> int:
    """Exact parameter count of a model built from `config` on the meta device (no memory is allocated).

    head: "base" (encoder only), "mlm" (encoder + MLM head; decoder weight tied to the word embeddings). An ERNIE 4.5
    decoder config counts its causal LM (lm_head included, once if tied); `head` does not apply.
    """
    import torch

    from .decoder import build_decoder, is_decoder_config

    if is_decoder_config(config):
        return sum(p.numel() for p in build_decoder(config, "meta").parameters())

    from .modeling import ErnieZooForMaskedLM, ErnieZooModel

    cls = {"base": ErnieZooModel, "mlm": ErnieZooForMaskedLM}[head]
    with torch.device("meta"):
        model = cls(config)
    # parameters() de-duplicates tied weights, so the tied decoder is counted once.
    return sum(p.numel() for p in model.parameters())


def parameter_counts(config) -> dict[str, int]:
    """Exact counts on the meta device: `total`, and `active` per token (= total for dense models; an MoE decoder
    counts top_k of its routed experts), `experts` (routed expert parameters) and `moe_layers`."""
    from .decoder import build_decoder, decoder_counts, is_decoder_config

    if is_decoder_config(config):
        return decoder_counts(build_decoder(config, "meta"))
    total = count_parameters(config)
    return {"total": total, "experts": 0, "active": total, "moe_layers": 0}
