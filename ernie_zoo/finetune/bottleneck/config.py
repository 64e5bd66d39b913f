"""`BottleneckConfig`: the saved description of a bottleneck adapter (peft's shape: a dataclass that is
written as `adapter_config.json` next to `adapter_model.safetensors`)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PEFT_TYPE = "BOTTLENECK"

# Where the adapters go in an ERNIE/BERT layer (module names end with these, the layer index before them):
#   Houlsby et al. 2019: after the attention output projection and after the FFN output projection;
#   Pfeiffer et al. 2021 (AdapterFusion): after the FFN output projection only.
# Each adapter sits after the projection and before the residual add + LayerNorm of that sub-layer.
MODE_TARGETS = {
    "houlsby": r"(.*\.)?layer\.\d+\.(attention\.output|output)\.dense",
    "pfeiffer": r"(.*\.)?layer\.\d+\.output\.dense",
}
NON_LINEARITIES = ("relu", "gelu", "silu", "tanh")


@dataclass
class BottleneckConfig:
    """Bottleneck adapter settings.

    mode: "houlsby" (after attention and FFN outputs) or "pfeiffer" (after the FFN output only).
    reduction_factor: bottleneck width = hidden_size // reduction_factor (at least 1).
    bottleneck_size: explicit bottleneck width; overrides reduction_factor.
    non_linearity: activation between the down and up projections.
    target_modules: regex (full match on module names) overriding the mode's placement.
    modules_to_save: modules trained fully and stored with the adapter (the task head).
    """

    mode: str = "houlsby"
    reduction_factor: int = 16
    bottleneck_size: int | None = None
    non_linearity: str = "relu"
    target_modules: str | None = None
    modules_to_save: list[str] | None = None
    task_type: str | None = None
    base_model_name_or_path: str | None = None
    peft_type: str = PEFT_TYPE

    def __post_init__(self) -> None:
        if self.mode not in MODE_TARGETS:
            raise ValueError(f"bottleneck mode must be one of {sorted(MODE_TARGETS)}, got {self.mode!r}")
        if self.non_linearity not in NON_LINEARITIES:
            raise ValueError(f"non_linearity must be one of {NON_LINEARITIES}, got {self.non_linearity!r}")
        if self.reduction_factor < 1:
            raise ValueError(f"reduction_factor must be >= 1, got {self.reduction_factor}")
        if self.bottleneck_size is not None and self.bottleneck_size < 1:
            raise ValueError(f"bottleneck_size must be >= 1, got {self.bottleneck_size}")
        if self.peft_type != PEFT_TYPE:
            raise ValueError(f"not a bottleneck adapter config: peft_type {self.peft_type!r}")

    @property
    def target_regex(self) -> str:
        return self.target_modules or MODE_TARGETS[self.mode]

    def width(self, hidden_size: int) -> int:
        return self.bottleneck_size or max(1, hidden_size // self.reduction_factor)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save_pretrained(self, directory: str | Path) -> None:
        from ernie_zoo.utils import atomic_write_text

        atomic_write_text(
            Path(directory) / CONFIG_NAME, json.dumps(self.to_dict(), indent=2, ensure_ascii=False)
        )

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> BottleneckConfig:
        path = Path(directory) / CONFIG_NAME
        if not path.is_file():
            raise ValueError(f"{directory} has no {CONFIG_NAME}")
        data = json.loads(path.read_text(encoding="utf-8"))
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown bottleneck config keys {unknown}")
        return cls(**data)
