"""The adapter module and the wrapper that puts it after a Linear layer.

    x ─ base Linear ─ h ─┬──────────────────────────────── + ─ out
                         └─ down (H→b) ─ act ─ up (b→H) ───┘

`up` starts at zero, so an injected model computes exactly what the base model did.
"""

from __future__ import annotations

import torch
from torch import nn

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "tanh": nn.Tanh}


class BottleneckAdapter(nn.Module):
    """down-project, non-linearity, up-project: (..., H) -> (..., H)."""

    def __init__(self, hidden_size: int, bottleneck: int, non_linearity: str = "relu"):
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck)
        self.act = _ACTIVATIONS[non_linearity]()
        self.up = nn.Linear(bottleneck, hidden_size)
        nn.init.normal_(self.down.weight, std=1e-2)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.up(self.act(self.down(hidden)))


class BottleneckLayer(nn.Module):
    """`base_layer` (an nn.Linear) followed by a residual bottleneck adapter."""

    def __init__(self, base_layer: nn.Linear, bottleneck: int, non_linearity: str = "relu"):
        super().__init__()
        if not isinstance(base_layer, nn.Linear):
            raise TypeError(f"bottleneck adapters wrap nn.Linear layers, got {type(base_layer).__name__}")
        self.base_layer = base_layer
        self.adapter = BottleneckAdapter(base_layer.out_features, bottleneck, non_linearity).to(
            device=base_layer.weight.device, dtype=base_layer.weight.dtype
        )

    # Code that reads `dense.weight` (weight tying, init, TP plans) still finds the base weights.
    @property
    def weight(self) -> torch.Tensor:
        return self.base_layer.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base_layer.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.base_layer(x)
        return hidden + self.adapter(hidden)
