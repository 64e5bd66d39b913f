"""Bottleneck adapters (Houlsby et al. 2019; Pfeiffer et al. 2021) in peft's shape: config, layer, model.

Written here because the `adapters` library pins an older transformers; the files it saves
(`adapter_config.json` with `peft_type: BOTTLENECK`, `adapter_model.safetensors`) follow peft's layout.
"""

from .config import CONFIG_NAME, MODE_TARGETS, WEIGHTS_NAME, BottleneckConfig
from .layer import BottleneckAdapter, BottleneckLayer
from .model import BottleneckModel

__all__ = [
    "BottleneckAdapter",
    "BottleneckConfig",
    "BottleneckLayer",
    "BottleneckModel",
    "CONFIG_NAME",
    "MODE_TARGETS",
    "WEIGHTS_NAME",
]
