"""`ernie-zoo info`: the size presets with their exact (meta-device) parameter counts."""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass
class Args:
    """Show the size presets (encoders, then ERNIE 4.5 decoders) and their exact parameter counts."""

    preset: list[str] | None = None
    """Only these presets (--preset tiny ernie4.5-0.3b, or repeated); null: all."""


def run(args: Args, argv: list[str]) -> int:
    from ernie_zoo.models.presets import (
        DECODER_PRESETS,
        PRESETS,
        count_parameters,
        parameter_counts,
        preset_config,
    )

    names = args.preset or [*PRESETS, *DECODER_PRESETS]
    unknown = [n for n in names if n not in PRESETS and n not in DECODER_PRESETS]
    if unknown:
        known = [*PRESETS, *DECODER_PRESETS]
        print(f"ernie-zoo info: error: unknown preset(s) {unknown}; choose from {known}", file=sys.stderr)
        return 2
    encoders = [n for n in names if n in PRESETS]
    decoders = [n for n in names if n in DECODER_PRESETS]
    if encoders:
        print(
            f"{'preset':<8} {'layers':>6} {'hidden':>6} {'heads':>5} {'ffn':>6} {'vocab':>6} {'parameters':>16}"
        )
    for name in encoders:
        cfg = preset_config(name)
        n = count_parameters(cfg)
        print(
            f"{name:<8} {cfg.num_hidden_layers:>6} {cfg.hidden_size:>6} {cfg.num_attention_heads:>5} "
            f"{cfg.intermediate_size:>6} {cfg.vocab_size:>6} {n:>16,}"
        )
    if decoders:
        if encoders:
            print()
        # experts: routed experts x their FFN, top-k per token, + shared experts; active: parameters one token uses
        print(
            f"{'decoder':<18} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>3} {'ffn':>6} "
            f"{'experts':>18} {'vocab':>7} {'parameters':>16} {'active/token':>16}"
        )
    for name in decoders:
        cfg = preset_config(name)
        counts = parameter_counts(cfg)
        experts = "-"
        if counts["moe_layers"]:
            experts = f"{cfg.moe_num_experts}x{cfg.moe_intermediate_size} top-{cfg.moe_k}"
            experts += f" +{cfg.moe_num_shared_experts}" if cfg.moe_num_shared_experts else ""
        print(
            f"{name:<18} {cfg.num_hidden_layers:>6} {cfg.hidden_size:>6} {cfg.num_attention_heads:>5} "
            f"{cfg.num_key_value_heads:>3} {cfg.intermediate_size:>6} {experts:>18} {cfg.vocab_size:>7} "
            f"{counts['total']:>16,} {counts['active']:>16,}"
        )
    return 0
