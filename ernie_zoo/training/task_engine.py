"""Engines for models whose forward returns their own loss (the fine-tuning tasks' models, peft-wrapped or not):
what the training loop (`loop.TrainLoop`, driving `ernie_zoo.finetune.run.FinetuneTask`) calls, so that neither touches
the optimizer or torch.distributed.

    engine.shard(batch)              this data-parallel rank's rows of the global batch (contiguous split)
    engine.forward(inputs)           the model's output (.loss, .logits); through DeepSpeed under that backend
    engine.backward(loss, boundary)  one micro batch (loss already divided by the accumulation steps); boundary:
                                     the last micro batch of an optimizer step
    engine.step() -> grad norm       clip, optimizer step, LR schedule; the pre-clip global norm
    engine.zero_grad()               after anything that reads the gradients of the step (AdaLoRA's budget)
    engine.dp_sum(xs), agree(x)      floats summed over the data-parallel ranks / rank 0's float on every rank
    engine.trainable_state()         the trainable parameters, whole (gathered from the ZeRO shards) on rank 0
    engine.load_trainable_state(s)   copy them back in
    engine.save_optimizer_state(d)   into a checkpoint directory (every rank: its ZeRO-3 partition), and back:
    engine.load_optimizer_state(d)   the weights, Adam moments and step counts an exact resume needs

`PlainEngine` is one process on one device. `DeepSpeedTaskEngine` wraps the model in DeepSpeed ZeRO (stage 0-3,
gloo on CPU, NCCL on GPUs), optionally with AutoTP tensor parallelism: the optimizer and the warm-up/decay
schedule are the run's own (`training.core`),
handed to `deepspeed.initialize`; the DeepSpeed json supplies ZeRO and communication settings, and the run's
micro batch, accumulation steps and clipping are written over it (`parallel.deepspeed_backend.make_config`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import torch
from torch import nn

from ernie_zoo.training.deepspeed_engine import DataParallelRanks, ZeroPartitionIO

from .checkpoint import load_optimizer_state, save_optimizer_state

logger = logging.getLogger(__name__)


def _trainable(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
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
        return {n: p.detach() for n, p in _trainable(self.model)}

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


class DeepSpeedTaskEngine(ZeroPartitionIO, DataParallelRanks, PlainEngine):
    """The model under DeepSpeed ZeRO (see the module docstring), on the ranks a launcher (torchrun, deepspeed)
    started. `config` is the run's DeepSpeed config (`parallel.deepspeed_backend.make_config`'s, as
    `backends.task_deepspeed_config` makes it: its micro batch is the rows one data-parallel rank reads, its
    clipping the run's). With `tensor_parallel.autotp_size` > 1, AutoTP splits the Linear layers of the TP plan
    (`parallel.tp_plan`, as `ernie-pretrain` does; through peft's LoRA wrappers: `lora_tp_plan`) over groups of
    that many ranks, which read the same rows.

    The process group must already be up (`parallel.deepspeed_backend.init_deepspeed_distributed`). Every rank
    builds the same model (same seed): under ZeRO-3 already partitioned (`deepspeed_engine.zero3_building`),
    otherwise whole, and the engine partitions what is not (new adapters, heads).
    """

    backend = "deepspeed"

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        config: dict[str, Any],
    ):
        import deepspeed
        import torch.distributed as dist
        from deepspeed.utils import groups

        from ernie_zoo.parallel.deepspeed_backend import autotp_looks_inside, init_deepspeed_distributed
        from ernie_zoo.parallel.tp_plan import (
            check_tp_divisibility,
            deepspeed_partition_config,
            lora_tp_plan,
            planned_modules,
        )

        self.tp_size = int((config.get("tensor_parallel") or {}).get("autotp_size") or 1)
        check_tp_divisibility(model.config, self.tp_size)  # before any rank waits for the others
        rank, world, local_rank = init_deepspeed_distributed()
        self.device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
        wrappers: list[nn.Module] = []
        if self.tp_size > 1:
            if world % self.tp_size:
                raise ValueError(f"distributed.tp_size {self.tp_size} does not divide the {world} ranks")
            plan = lora_tp_plan(
                model
            )  # the TP plan, through LoRA's wrappers to their base layers and factors
            wrapped = {k.removesuffix(".base_layer"): v for k, v in plan.items() if k.endswith(".base_layer")}
            wrappers = [m for _, m, _ in planned_modules(model, wrapped)]
            section = {**config["tensor_parallel"], "partition_config": deepspeed_partition_config(plan)}
            config = {**config, "tensor_parallel": section}
        self.ds_config = config
        with autotp_looks_inside(wrappers):
            self.ds, self.optimizer, _, self.scheduler = deepspeed.initialize(
                model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config
            )
        self.model = self.ds.module
        self.max_grad_norm = float(config["gradient_clipping"])
        self.zero_stage = int(self.ds_config["zero_optimization"].get("stage", 0))
        self.rank, self.world_size = rank, world
        self.dp_rank = groups._get_data_parallel_rank()
        self.dp_world_size = groups._get_data_parallel_world_size()
        self.is_main = dist.get_rank() == 0
        logger.info(
            "DeepSpeed ZeRO-%d, TP %d x DP %d, micro batch %d x %d accumulation per rank",
            self.zero_stage,
            self.tp_size,
            self.dp_world_size,
            config["train_micro_batch_size_per_gpu"],
            config["gradient_accumulation_steps"],
        )

    def shard(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows [r * n / W, (r + 1) * n / W) of every tensor (`torch.tensor_split`: the first ranks take one
        more row when W does not divide n). Every rank needs at least one row."""
        n = next(iter(batch.values())).shape[0]
        if n < self.dp_world_size:
            raise ValueError(f"a batch of {n} examples cannot feed {self.dp_world_size} data-parallel ranks")
        return {k: v.tensor_split(self.dp_world_size)[self.dp_rank] for k, v in batch.items()}

    def forward(self, inputs: dict[str, torch.Tensor]) -> Any:
        return self.ds(**inputs)

    def backward(self, loss: torch.Tensor, boundary: bool) -> None:
        # The loop owns the accumulation boundary (an epoch's last step may have fewer micro batches); DeepSpeed
        # reduces the gradients and, at the boundary, steps the optimizer and the LR schedule inside ds.step().
        self.ds.set_gradient_accumulation_boundary(boundary)
        self.ds.backward(loss, scale_wrt_gas=False)
        self.ds.step()

    def step(self) -> float:
        norm = self.ds.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def zero_grad(self) -> None:
        pass  # DeepSpeed zeroes (and frees) the gradients inside its step

    def agree(self, value: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.broadcast(t, src=0)
        return float(t.item())

    @contextlib.contextmanager
    def _whole(self, name: str, p: torch.Tensor, modifier_rank: int | None = None):
        """Parameter `name` (`p`) whole inside the block on every rank: its ZeRO-3 partitions gathered, then its
        AutoTP shards (DeepSpeed's `GatherReplacedLayerParams`, which splits it again on exit, keeping what
        every TP rank wrote into it alike). With `modifier_rank`, that data-parallel rank's values win."""
        import deepspeed
        from deepspeed.module_inject.layers import GatherReplacedLayerParams

        owner = self.model.get_submodule(name.rpartition(".")[0])
        with deepspeed.zero.GatheredParameters(
            [p], modifier_rank=modifier_rank, enabled=self.zero_stage == 3
        ):
            with GatherReplacedLayerParams([p], owner, enabled=self.tp_size > 1):
                yield

    def trainable_state(self) -> dict[str, torch.Tensor] | None:
        """The whole trainable parameters as CPU copies on rank 0 (None on the others), gathered (over ZeRO-3
        and TP) one parameter at a time, so no rank ever holds more than one whole parameter beyond its shard.
        Every rank must call it."""
        state = {}
        for name, p in _trainable(self.model):
            with self._whole(name, p):
                if self.is_main:
                    state[name] = p.detach().to("cpu", copy=True).contiguous()
        return state if self.is_main else None

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        """Every rank passes the same `state` (read from the shared checkpoint) and copies it whole; ZeRO-3 keeps
        data-parallel rank 0's, AutoTP each rank's shard of it."""
        params = check_trainable_state(self.model, state)
        for name, value in state.items():
            p = params[name]
            with self._whole(name, p, modifier_rank=0), torch.no_grad():
                p.copy_(value.to(p.device))

    def layout(self) -> dict[str, Any]:
        tp = {"tp_size": self.tp_size} if self.tp_size > 1 else {}
        return {"backend": self.backend, "world_size": self.world_size, "zero_stage": self.zero_stage, **tp}

    def save_optimizer_state(self, directory: str | os.PathLike) -> None:
        """This rank's ZeRO-3 partition (fp32 master weights and Adam moments); other stages keep none."""
        if self.zero_stage == 3:
            self.save_zero_partition(directory)

    def load_optimizer_state(self, directory: str | os.PathLike) -> None:
        if self.zero_stage != 3:
            raise ValueError(
                f"resuming a distributed.backend deepspeed run needs ZeRO stage 3 (this run's is {self.zero_stage}): "
                "only its checkpoints hold each rank's optimizer partition; start afresh with train.overwrite true"
            )
        self.load_zero_partition(directory)

    def tp_shapes(self) -> dict[str, list[int]]:
        """name -> the shape of this rank's TP shard of every parameter (ZeRO-3: before partitioning it): a
        split dimension divided by the TP size, replicated parameters whole."""
        return {
            n: [int(d) for d in getattr(p, "ds_shape", p.shape)] for n, p in self.model.named_parameters()
        }

    def shard_report(self) -> dict[str, list[int]]:
        """name -> [numel of this rank's TP shard (without TP: the whole parameter), numel this rank holds (ZeRO-3:
        its partition of that)] for every parameter."""
        report = {}
        for name, p in self.model.named_parameters():
            if hasattr(p, "ds_numel"):
                report[name] = [int(p.ds_numel), int(p.ds_tensor.numel())]
            else:
                report[name] = [p.numel(), p.numel()]
        return report


__all__ = ["DeepSpeedTaskEngine", "PlainEngine", "check_trainable_state", "load_trainable_state"]
