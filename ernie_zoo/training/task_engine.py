"""The engine contract, and `PlainEngine` (one process, one device) that every engine builds on.

An engine owns backward, the optimizer and every collective, so that the training loop (`loop.TrainLoop`) and
its tasks (`pretrain.PretrainTask`, `ernie_zoo.finetune.run.FinetuneTask`) touch neither. One engine per backend,
chosen in one place (`backends.ENGINES` / `make_engine` for pretraining, `make_task_engine` for fine-tuning):

    backend     fine-tuning (models that return their loss)  pretraining (the same engine + the parts below)
    single      `PlainEngine`                                 `engine.SingleDeviceEngine`
    deepspeed   `deepspeed_engine.DeepSpeedTaskEngine`        `deepspeed_engine.DeepSpeedEngine`
    pipeline    -                                             `pipeline_engine.PipelineEngine` (pretraining only)

Every engine:

    model, device, backend, rank, dp_rank, dp_world_size, is_main, lr
    backward(loss, boundary)         one micro batch (loss already divided by the accumulation steps); boundary:
                                     the last micro batch of an optimizer step
    step() -> grad norm              clip, optimizer step, LR schedule; the pre-clip global norm
    zero_grad()                      after anything that reads the gradients of the step (AdaLoRA's budget)
    dp_sum(values), barrier()        floats summed over the data-parallel ranks; wait for every rank
    layout()                         what a checkpoint's optimizer state depends on (a resume must match it)

Fine-tuning also calls:

    shard(batch)                     this data-parallel rank's rows of the global batch (contiguous split)
    forward(inputs)                  the model's output (.loss, .logits); through DeepSpeed under that backend
    agree(x)                         rank 0's float on every rank
    trainable_state()                the trainable parameters, whole (gathered from the ZeRO shards) on rank 0
    load_trainable_state(s)          copy them back in
    save_optimizer_state(d)          into a checkpoint directory (every rank: its ZeRO-3 partition), and back:
    load_optimizer_state(d)          the weights, Adam moments and step counts an exact resume needs

Pretraining engines are built from the recipe, `(recipe, model, device)`, with its AdamW + warmup/decay schedule,
and add:

    loss(batch)                      -> (mean masked-LM or causal-LM loss, tokens, correct); moves the batch to
                                     the device (optionally `last_details`: the loss's parts, mlm.masked_lm_loss)
    autocast(), num_parameters()     the forward's mixed-precision context; parameters of the whole model
    save(dir), load(dir)             model + optimizer + scheduler state into / from a checkpoint directory
    step()                           also zeroes the gradients (zero_grad(): nothing left)

Under DeepSpeed (`deepspeed_engine`) the optimizer and the warm-up/decay schedule are the run's own
(`training.core`), handed to `deepspeed.initialize`; the DeepSpeed json supplies ZeRO and communication settings,
and the run's micro batch, accumulation steps and clipping are written over it
(`parallel.deepspeed_backend.make_config`).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from .checkpoint import load_optimizer_state, save_optimizer_state


def trainable_parameters(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(name, parameter) of the parameters that train."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def check_trainable_state(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, nn.Parameter]:
    """The model's parameters by name, after checking that `state` holds exactly its trainable ones."""
    params = dict(model.named_parameters())
    missing = sorted(n for n, p in params.items() if p.requires_grad and n not in state)
    unknown = sorted(set(state) - set(params))
    if missing or unknown:
        raise ValueError(f"checkpoint does not fit the model: missing {missing[:5]}, unknown {unknown[:5]}")
    return params


def load_trainable_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` (exactly the trainable parameters, by name) into `model`."""
    params = check_trainable_state(model, state)
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


class PlainEngine:
    """One process, one device: `optimizer` and `scheduler` as given, clipping at `max_grad_norm` (0: none)."""

    is_main = True
    rank = 0
    dp_rank = 0
    dp_world_size = 1
    backend = "single"
    scaler: torch.amp.GradScaler | None = None  # fp16 loss scaling (pretraining's SingleDeviceEngine)

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        max_grad_norm: float,
        device: torch.device,
    ):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.max_grad_norm = max_grad_norm
        self.device = device
        self.model.to(device)

    def shard(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch

    def forward(self, inputs: dict[str, torch.Tensor]) -> Any:
        return self.model(**inputs)

    def backward(self, loss: torch.Tensor, boundary: bool | None = None) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self) -> float:
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        return float(norm)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def dp_sum(self, values: list[float]) -> list[float]:
        return [float(v) for v in values]

    def agree(self, value: float) -> float:
        return value

    def barrier(self) -> None:
        pass

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The trainable parameters (detached, on the training device)."""
        return {n: p.detach() for n, p in trainable_parameters(self.model)}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        load_trainable_state(self.model, state)

    def shard_report(self) -> dict[str, list[int]]:
        return {n: [p.numel(), p.numel()] for n, p in self.model.named_parameters()}

    def layout(self) -> dict[str, Any]:
        """What a checkpoint's optimizer state depends on (a resume must match it)."""
        return {"backend": self.backend}

    def save_optimizer_state(self, directory: str | os.PathLike) -> None:
        save_optimizer_state(self.optimizer, directory)

    def load_optimizer_state(self, directory: str | os.PathLike) -> None:
        load_optimizer_state(self.optimizer, directory)


__all__ = ["PlainEngine", "check_trainable_state", "load_trainable_state", "trainable_parameters"]
