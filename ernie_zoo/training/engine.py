"""The engine contract, and `PlainEngine` (one process, one device).

An engine owns backward, the optimizer and every collective, so that the training loop (`loop.TrainLoop`) and
its tasks (`pretrain.Pretraining`, `supervised.SupervisedTraining`) touch neither. One engine per backend,
chosen in one place (`backends.make_engine` from explicit parts, `backends.engine_for_recipe` from a pretraining
recipe):

    backend     engine                                  what it trains
    single      `PlainEngine` (here)                    fine-tuning and pretraining
    deepspeed   `deepspeed_engine.DeepSpeedEngine`      fine-tuning and pretraining (ZeRO 0-3 + AutoTP)
    pipeline    `pipeline_engine.PipelineEngine`        pretraining only (its stages compute the loss)

An engine trains what it is given: the model, the optimizer and LR schedule, clipping, a precision, and
optionally an `objective`, a module holding the model whose forward returns the training loss (pretraining's
`objective.PretrainObjective`: the masked-LM or causal-LM loss of a batch), run by `forward` in place of the
model's own. Every engine:

    model, device, backend, rank, dp_rank, dp_world_size, is_main, lr
    forward(inputs)                  the objective's output (pretraining: (mean loss, tokens, correct)), else the
                                     model's (.loss, .logits); under the run's autocast; through DeepSpeed under
                                     that backend; the pipeline runs its schedule (forward and backward) on it
    backward(loss, boundary)         one micro batch (loss already divided by the accumulation steps); boundary:
                                     the last micro batch of an optimizer step
    step() -> grad norm              clip, optimizer step, LR schedule; the pre-clip global norm
    zero_grad()                      after anything that reads the gradients of the step (AdaLoRA's budget)
    dp_sum(values), barrier()        floats summed over the data-parallel ranks; wait for every rank
    layout()                         what a checkpoint's optimizer state depends on (a resume must match it, except
                                     the pipeline backend's, whose checkpoints reshard: `parallel.resharding`)
    num_parameters()                 parameters of the whole model
    save(dir), load(dir)             model + optimizer + scheduler state into / from a checkpoint directory
                                     (pretraining's checkpoints)

Supervised training (fine-tuning; single and deepspeed) also calls:

    shard(batch)                     this data-parallel rank's rows of the global batch (contiguous split)
    agree(x)                         rank 0's float on every rank
    trainable_state()                the trainable parameters, whole (gathered from the ZeRO shards) on rank 0
    load_trainable_state(s)          copy them back in
    save_optimizer_state(d)          into a checkpoint directory (every rank: its ZeRO-3 partition), and back:
    load_optimizer_state(d)          the weights, Adam moments and step counts an exact resume needs

Under DeepSpeed (`deepspeed_engine`) the optimizer and the warm-up/decay schedule are the run's own
(`training.core`), handed to `deepspeed.initialize`; the DeepSpeed json supplies ZeRO and communication settings,
and the run's micro batch, accumulation steps and clipping are written over it
(`parallel.deepspeed_backend.make_config`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ernie_zoo.parallel import resharding

from .build import MODEL_FILE, load_model_weights, save_model_weights
from .checkpoint import (
    load_json_state,
    load_optimizer_state,
    load_schedule_state,
    save_json_state,
    save_optimizer_state,
)

#: precision -> the forward's autocast dtype (None: no autocast)
AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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
    """One process, one device: `optimizer` and `scheduler` as given, clipping at `max_grad_norm` (0: none).

    Args:
        model: the model, on any device; it is moved to `device`.
        optimizer, scheduler: built for `model` (`core.adamw`, `core.warmup_decay`).
        max_grad_norm: clip the global gradient norm to it (0: no clipping).
        device: where to train.
        precision: "fp32", or mixed precision: the forward under autocast to "bf16" / "fp16" (fp16 with loss
            scaling, CUDA only).
        objective: a module holding `model` whose forward(**batch) is the training loss
            (`objective.PretrainObjective`); None: `forward` runs the model.
    """

    is_main = True
    rank = 0
    dp_rank = 0
    dp_world_size = 1
    backend = "single"

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        max_grad_norm: float,
        device: torch.device,
        *,
        precision: str = "fp32",
        objective: nn.Module | None = None,
    ):
        if precision not in AUTOCAST_DTYPES:
            raise ValueError(f"recipe key 'precision' = {precision!r}: one of {sorted(AUTOCAST_DTYPES)}")
        if precision == "fp16" and device.type != "cuda":
            raise ValueError("recipe key 'precision' = 'fp16' needs a CUDA device; use fp32 or bf16 on CPU")
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.objective = objective
        self.max_grad_norm = max_grad_norm
        self.device = device
        self.model.to(device)
        self.scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
        self._dtype = AUTOCAST_DTYPES[precision]

    def shard(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass (mixed precision, or nothing in fp32)."""
        if self._dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._dtype)

    def forward(self, inputs: dict[str, torch.Tensor]) -> Any:
        """The objective's output on `inputs` (else the model's), under `autocast()`."""
        with self.autocast():
            return (self.model if self.objective is None else self.objective)(**inputs)

    def backward(self, loss: torch.Tensor, boundary: bool | None = None) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self) -> float:
        """Unscale (fp16), clip, optimizer step, LR schedule; the pre-clip grad norm."""
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

    def num_parameters(self) -> int:
        """Parameters of the model (tied weights once)."""
        return sum(p.numel() for p in self.model.parameters())

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

    def save(self, directory: Path) -> None:
        """Model (config.json + model.safetensors), optimizer, scheduler and loss-scaler state."""
        save_model_weights(self.model, directory)
        self.save_optimizer_state(directory)
        save_json_state(self.scheduler, directory / "scheduler.json", "LR scheduler")
        if self.scaler is not None:
            save_json_state(self.scaler, directory / "scaler.json", "GradScaler")

    def load(self, directory: Path) -> None:
        """Restore what `save` wrote (weights bit for bit), or a logical checkpoint of any layout (`dcp/`, written by
        the pipeline backend: `parallel.resharding`): the weights, AdamW's state and the LR schedule."""
        directory = Path(directory)
        if (directory / resharding.DCP_DIR).is_dir():
            state = {
                **resharding.model_state(self.model),
                **resharding.optimizer_state(self.model, self.optimizer),
            }
            resharding.load(state, directory)
            load_schedule_state(self.scheduler, directory / "scheduler.json")
            return
        load_model_weights(self.model, directory / MODEL_FILE)
        self.load_optimizer_state(directory)
        load_json_state(self.scheduler, directory / "scheduler.json")
        if self.scaler is not None:
            load_json_state(self.scaler, directory / "scaler.json")


__all__ = ["PlainEngine", "check_trainable_state", "load_trainable_state", "trainable_parameters"]
