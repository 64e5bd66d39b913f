"""The pretraining engine of the single backend: the masked-LM (or causal-LM) loss, backward, optimizer step,
checkpoint save/load of model + optimizer state. Building the model is `build.py`'s, choosing an engine
`backends.py`'s.

`SingleDeviceEngine` is the reference backend (one process, one device): the fine-tuning `PlainEngine`
(task_engine.py) with the recipe's optimizer, mixed precision and the masked-LM loss. A sharded backend
(DeepSpeed ZeRO-3 + tensor parallelism: `ernie_zoo.training.deepspeed_engine`) implements the same small interface
and is named in `backends.ENGINES` under the recipe's `distributed.backend`:

    model                    the ErnieZooForMaskedLM being trained (train()/eval() are called on it)
    device, rank, dp_rank, dp_world_size, is_main, backend, barrier()
    dp_sum(values)           -> the floats summed over the data-parallel ranks (logged means, eval totals)
    loss(batch)              -> (mean masked-LM loss, masked tokens, correct); moves the batch to the device
                                (optionally `last_details`: the loss's parts, see mlm.masked_lm_loss)
    backward(loss, boundary) one micro batch (the loss already divided by the accumulation steps); boundary: the
                             step's last (the one contract of `loop.TrainLoop` for every engine)
    step() -> grad norm      the optimizer step, LR schedule, zeroing the gradients (zero_grad(): nothing left)
    lr, num_parameters()
    save(dir), load(dir)     model + optimizer + scheduler state into / from a checkpoint directory

The training loop (`loop.TrainLoop`) never touches the optimizer, the loss scaler or `torch.distributed` directly.
"""

from __future__ import annotations

import contextlib
import logging
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
from .checkpoint import load_json_state, load_optimizer_state, save_json_state, save_optimizer_state
from .mlm import masked_lm_loss
from .recipe import PretrainRecipe
from .task_engine import PlainEngine

logger = logging.getLogger(__name__)


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
        """(mean masked-LM loss, masked tokens, correct predictions) of a collated batch; with a sentiment stage
        the loss adds `masking.polarity_weight` x the word-polarity loss, and `last_details` holds the parts."""
        details: dict[str, float] = {}
        if is_decoder_config(self.model.config):  # an ERNIE 4.5 decoder: next-token loss on packed rows
            with self.autocast():
                out = causal_lm_loss(self.model, to_device(batch, self.device), details)
            self.last_details = details
            return out
        with self.autocast():
            out = masked_lm_loss(
                self.model,
                to_device(batch, self.device),
                self.recipe.sparse_last_layer,
                polarity_weight=self.recipe.masking.polarity_weight,
                details=details,
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
        save_optimizer_state(self.optimizer, directory)
        save_json_state(self.scheduler, directory / "scheduler.json", "LR scheduler")
        if self.scaler is not None:
            save_json_state(self.scaler, directory / "scaler.json", "GradScaler")

    def load(self, directory: Path) -> None:
        """Restore what `save` wrote (weights bit for bit)."""
        load_model_weights(self.model, directory / MODEL_FILE)
        load_optimizer_state(self.optimizer, directory)
        load_json_state(self.scheduler, directory / "scheduler.json")
        if self.scaler is not None:
            load_json_state(self.scaler, directory / "scaler.json")


__all__ = ["SingleDeviceEngine"]
