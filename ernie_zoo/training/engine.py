"""The pretraining parts of an engine (the contract: `task_engine`): the masked-LM or causal-LM loss
(`pretrain_loss`), the recipe's optimizer, mixed precision and checkpoints of model + optimizer state, and
`SingleDeviceEngine`, the single backend's pretraining engine: `PlainEngine` with those parts. The DeepSpeed one
(`deepspeed_engine.DeepSpeedEngine`) adds the same parts to `DeepSpeedTaskEngine`. Building the model is
`build.py`'s, choosing an engine `backends.py`'s.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from ernie_zoo.models.decoder import is_decoder_config

from .build import (
    MODEL_FILE,
    compile_layers,
    load_model_weights,
    optimizer_and_schedule,
    save_model_weights,
    to_device,
)
from .causal_lm import causal_lm_loss
from .checkpoint import load_json_state, save_json_state
from .mlm import masked_lm_loss
from .recipe import PretrainRecipe
from .task_engine import PlainEngine


def pretrain_loss(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    sparse_last_layer: bool = False,
    polarity_weight: float = 1.0,
    details: dict[str, float] | None = None,
) -> tuple[torch.Tensor, int, int]:
    """(mean loss, predicted tokens, correct predictions) of a collated batch: an ERNIE 4.5 decoder's next-token
    loss on packed rows (`causal_lm_loss`), else the masked-LM loss (`masked_lm_loss`; with a sentiment stage it
    adds `polarity_weight` x the word-polarity loss). `details`, if given, receives the loss's parts."""
    if is_decoder_config(model.config):
        return causal_lm_loss(model, batch, details)
    return masked_lm_loss(model, batch, sparse_last_layer, polarity_weight=polarity_weight, details=details)


class SingleDeviceEngine(PlainEngine):
    """One process, one device: the fine-tuning `PlainEngine` (clip, step, schedule) with the recipe's AdamW +
    warmup/decay schedule, the masked-LM loss, optional autocast and fp16 loss scaling.

    Args:
        recipe: the run's recipe (optim, precision, grad clipping).
        model: the model, on any device; it is moved to `device`.
        device: where to train.
    """

    def __init__(self, recipe: PretrainRecipe, model: torch.nn.Module, device: torch.device):
        if recipe.precision == "fp16" and device.type != "cuda":
            raise ValueError("recipe key 'precision' = 'fp16' needs a CUDA device; use fp32 or bf16 on CPU")
        self.recipe = recipe
        model = model.to(device)
        if getattr(recipe, "torch_compile", False):
            compile_layers(model)
        # fused: one kernel per step over all parameters (CPU and CUDA); what HF Trainer uses by default too
        optimizer, scheduler = optimizer_and_schedule(recipe, model, fused=device.type in ("cpu", "cuda"))
        super().__init__(model, optimizer, scheduler, recipe.optim.grad_clip or 0.0, device)
        self.scaler = torch.amp.GradScaler("cuda") if recipe.precision == "fp16" else None
        self._dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[recipe.precision]

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
        """`pretrain_loss` of a collated batch under `autocast()`; `last_details` holds the loss's parts."""
        details: dict[str, float] = {}
        with self.autocast():
            out = pretrain_loss(
                self.model,
                to_device(batch, self.device),
                self.recipe.sparse_last_layer,
                self.recipe.masking.polarity_weight,
                details,
            )
        self.last_details = details
        return out

    def num_parameters(self) -> int:
        """Parameters of the model (tied weights once)."""
        return sum(p.numel() for p in self.model.parameters())

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass (mixed precision, or nothing in fp32)."""
        if self._dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._dtype)

    def step(self) -> float:
        """`PlainEngine.step` (unscale, clip, update, schedule), then zero the grads; the pre-clip grad norm."""
        norm = super().step()
        self.zero_grad()
        return norm

    def save(self, directory: Path) -> None:
        """Model (config.json + model.safetensors), optimizer, scheduler and loss-scaler state."""
        save_model_weights(self.model, directory)
        self.save_optimizer_state(directory)
        save_json_state(self.scheduler, directory / "scheduler.json", "LR scheduler")
        if self.scaler is not None:
            save_json_state(self.scaler, directory / "scaler.json", "GradScaler")

    def load(self, directory: Path) -> None:
        """Restore what `save` wrote (weights bit for bit)."""
        load_model_weights(self.model, directory / MODEL_FILE)
        self.load_optimizer_state(directory)
        load_json_state(self.scheduler, directory / "scheduler.json")
        if self.scaler is not None:
            load_json_state(self.scaler, directory / "scaler.json")


__all__ = ["SingleDeviceEngine", "pretrain_loss"]
