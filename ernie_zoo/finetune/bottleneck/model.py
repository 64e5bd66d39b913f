"""`BottleneckModel`: inject bottleneck adapters into a model, train only them (and the task head), save and
load them by path, the way peft does for its own methods (`adapter_config.json` + `adapter_model.safetensors`).

    model = BottleneckModel(base, BottleneckConfig(mode="pfeiffer", modules_to_save=["classifier"]))
    ... train ...
    model.save_pretrained("adapter_dir")
    model = BottleneckModel.from_pretrained(fresh_base, "adapter_dir")

Bottleneck adapters are non-linear, so unlike LoRA they cannot be merged into the base weights.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .config import WEIGHTS_NAME, BottleneckConfig
from .layer import BottleneckLayer

logger = logging.getLogger(__name__)


def _save_file_atomic(tensors: dict[str, torch.Tensor], path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.contiguous().cpu() for k, v in tensors.items()}, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _matches_save(module_name: str, modules_to_save: list[str]) -> bool:
    """True if `module_name` is, or lies inside, a module whose name ends with one of `modules_to_save`."""
    parts = module_name.split(".")
    prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(p == m or p.endswith("." + m) for p in prefixes for m in modules_to_save)


class BottleneckModel(nn.Module):
    """A model with bottleneck adapters injected; everything else is frozen except `modules_to_save`."""

    def __init__(self, model: nn.Module, config: BottleneckConfig):
        super().__init__()
        self.base_model = model
        self.peft_config = config
        pattern = re.compile(config.target_regex)
        targets = [name for name, module in model.named_modules() if pattern.fullmatch(name)]
        if not targets:
            raise ValueError(
                f"bottleneck target {config.target_regex!r} matches no module of {type(model).__name__}"
            )
        for p in model.parameters():
            p.requires_grad_(False)
        for name in targets:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            base_layer = getattr(parent, child)
            if isinstance(base_layer, BottleneckLayer):
                raise ValueError(f"{name} already has a bottleneck adapter")
            setattr(
                parent,
                child,
                BottleneckLayer(base_layer, config.width(base_layer.out_features), config.non_linearity),
            )
        self.targets = targets
        saved = config.modules_to_save or []
        for name, p in model.named_parameters():
            if ".adapter." in name or (saved and _matches_save(name.rsplit(".", 1)[0], saved)):
                p.requires_grad_(True)
        if saved and not any(_matches_save(n.rsplit(".", 1)[0], saved) for n, _ in model.named_parameters()):
            raise ValueError(f"modules_to_save {saved} match no module of {type(model).__name__}")

    def forward(self, *args: Any, **kwargs: Any):
        return self.base_model(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.base_model, name)

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """What is saved: adapter weights and the modules_to_save, keyed by their names in the base model."""
        return {n: p.detach().contiguous() for n, p in self.base_model.named_parameters() if p.requires_grad}

    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        trainable = sum(p.numel() for p in self.base_model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in self.base_model.parameters())
        return trainable, total

    def save_pretrained(self, directory: str | Path) -> None:
        """Write adapter_config.json + adapter_model.safetensors (atomically, file by file)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.peft_config.save_pretrained(directory)
        _save_file_atomic(self.adapter_state_dict(), directory / WEIGHTS_NAME)

    @classmethod
    def from_pretrained(
        cls, model: nn.Module, directory: str | Path, is_trainable: bool = False
    ) -> BottleneckModel:
        """Inject the adapter saved in `directory` into `model` and load its weights (strictly)."""
        directory = Path(directory)
        config = BottleneckConfig.from_pretrained(directory)
        wrapped = cls(model, config)
        weights_path = directory / WEIGHTS_NAME
        if not weights_path.is_file():
            raise ValueError(f"{directory} has no {WEIGHTS_NAME}")
        state = load_file(str(weights_path))
        expected = wrapped.adapter_state_dict()
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        if missing or unexpected:
            raise ValueError(
                f"adapter {directory} does not fit this model: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
        params = dict(wrapped.base_model.named_parameters())
        with torch.no_grad():
            for name, value in state.items():
                if params[name].shape != value.shape:
                    raise ValueError(
                        f"adapter weight {name} has shape {tuple(value.shape)}, "
                        f"the model expects {tuple(params[name].shape)}"
                    )
                params[name].copy_(value)
        if not is_trainable:
            for p in wrapped.parameters():
                p.requires_grad_(False)
        return wrapped

    def unload(self) -> nn.Module:
        """Remove the adapters and return the base model (modules_to_save keep their trained weights)."""
        for name in self.targets:
            parent_name, _, child = name.rpartition(".")
            parent = self.base_model.get_submodule(parent_name) if parent_name else self.base_model
            setattr(parent, child, getattr(parent, child).base_layer)
        return self.base_model
