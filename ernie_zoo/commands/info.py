"""`ernie-zoo info`: the size presets with their exact (meta-device) parameter counts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Args:
    """Show the size presets and their exact parameter counts."""

    preset: list[str] | None = None
    """Only these presets (--preset tiny base, or repeated); null: all."""


def run(args: Args, argv: list[str]) -> int:
    from ernie_zoo.models.presets import PRESETS, count_parameters, preset_config

    names = args.preset or list(PRESETS)
    print(
        f"{'preset':<8} {'layers':>6} {'hidden':>6} {'heads':>5} {'ffn':>6} {'vocab':>6} {'parameters':>16}"
    )
    for name in names:
        cfg = preset_config(name)
        n = count_parameters(cfg)
        print(
            f"{name:<8} {cfg.num_hidden_layers:>6} {cfg.hidden_size:>6} {cfg.num_attention_heads:>5} "
            f"{cfg.intermediate_size:>6} {cfg.vocab_size:>6} {n:>16,}"
        )
    return 0
