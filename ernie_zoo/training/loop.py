"""The one training loop: pretraining (`training.pretrain`) and fine-tuning (`training.supervised`, running a
`finetune.run.FinetuneJob`) are tasks on it. As in torchtitan, the loop owns the optimizer step and the cadences; the task supplies what is
model-specific (its batches, its loss, what it logs, evaluates and saves); the engine owns backward, the
optimizer and every collective.

    while step < total_steps and not stopped:
        for batch, last in task.micro_batches(step):    the step's micro batches (advances the data position)
            loss = task.loss(batch)
            engine.backward(loss / grad_accum, last)      last: the step's accumulation boundary
        grad_norm = engine.step()                         clip, update, LR schedule
        loss, *sums = engine.dp_sum([loss, *task.step_sums()])    one all-reduce: every rank sees the same
        non-finite loss -> FloatingPointError               numbers, so every rank raises (none hangs)
        task.end_step(...); engine.zero_grad()            the task may read the gradients (AdaLoRA)
        every log_every: task.log -> progress-bar postfix; every eval_every: task.run_eval (True: stop
        early); every save_every: task.save; ERNIE_ZOO_TEST_KILL_AT_STEP: SIGKILL (exact-resume tests)
    after the last step: task.run_eval and task.save unless this step already did them

Every engine (one per backend, chosen by `backends.py`) has the contract written in `engine.py`; the loop
uses `backward(loss, boundary)`, `step() -> grad norm`, `zero_grad()`, `dp_sum(values)`, `dp_world_size`, `is_main`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from .logging_utils import progress_bar
from .profiling import StepProfiler

#: Test hook: SIGKILL this process right after the optimizer step with this number (exact-resume tests).
KILL_ENV = "ERNIE_ZOO_TEST_KILL_AT_STEP"


class TrainTask(Protocol):
    """What a task supplies to `TrainLoop.run` (the module docstring says when each is called): `micro_batches`
    yields (batch, is the step's last) for 0-based step `step`; `step_sums` are this rank's counts, which the loop
    sums over the data-parallel ranks for `end_step` (1-based `step`); `run_eval` returns True to stop early."""

    def micro_batches(self, step: int) -> Iterator[tuple[Any, bool]]: ...
    def loss(self, batch: Any) -> torch.Tensor: ...
    def step_sums(self) -> dict[str, float]: ...
    def end_step(self, step: int, loss: float, grad_norm: float, sums: dict, seconds: float) -> None: ...
    def log(self, step: int) -> dict[str, str] | None: ...
    def run_eval(self, step: int) -> bool: ...
    def save(self, step: int) -> None: ...


@dataclasses.dataclass
class TrainLoop:
    """The cadences of a run; `run` trains `task` on `engine` from `start_step` to `total_steps`."""

    total_steps: int
    grad_accum: int  #: every micro batch's loss is divided by it
    log_every: int = 1  #: and at the last step
    eval_every: int = 0  #: 0: only after the last step
    save_every: int = 0  #: 0: only after the last step (if save_final)
    save_final: bool = True
    progress: bool = True
    desc: str = "train"
    nonfinite_hint: str = "lower the learning rate"
    profile_steps: tuple[int, int] | list[int] | None = None  #: [start, end] (1-based, inclusive): profiled
    profile_dir: str | os.PathLike | None = None  #: where the profiled steps' traces go

    def run(
        self,
        engine: Any,
        task: TrainTask,
        start_step: int = 0,
        resumed: bool = False,
        last_eval: int | None = None,
        stopped: bool = False,
        on_step_end: Callable[[int, dict[str, float]], None] | None = None,
    ) -> int:
        """Train until `total_steps` or an early stop; returns the last step. `resumed`: `start_step` is a saved
        checkpoint's; `last_eval`: the step of the last evaluation (a resumed run's); `stopped`: stopped early
        already. `on_step_end(step, {"loss", *step_sums, "seconds"})`: this rank's own numbers, every step."""
        step, last_saved = start_step, start_step if resumed else None
        kill_at = int(os.environ.get(KILL_ENV, "0") or 0)
        bar = progress_bar(self.total_steps, step, self.progress and engine.is_main, self.desc)
        prof = StepProfiler(self.profile_steps, self.profile_dir, getattr(engine, "rank", 0))
        region = prof.region
        engine.model.train()
        try:
            while step < self.total_steps and not stopped:
                prof.begin(step + 1)
                t0 = time.perf_counter()
                running = 0.0
                batches = iter(task.micro_batches(step))
                while True:
                    with region("data"):
                        item = next(batches, None)
                    if item is None:
                        break
                    batch, last = item
                    with region("forward"):
                        loss = task.loss(batch)
                    with region("backward"):
                        engine.backward(loss / self.grad_accum, last)
                    running += float(loss.detach()) / self.grad_accum
                with region("optimizer"):
                    grad_norm = engine.step()
                step += 1
                seconds = time.perf_counter() - t0
                sums = task.step_sums()
                if on_step_end is not None:
                    on_step_end(step, {"loss": running, **sums, "seconds": seconds})
                with region("dp_sum"):
                    loss_sum, *totals = engine.dp_sum([running, *sums.values()])
                running = loss_sum / engine.dp_world_size
                if not math.isfinite(running):
                    raise FloatingPointError(f"loss is {running} at step {step}: {self.nonfinite_hint}")
                task.end_step(step, running, grad_norm, dict(zip(sums, totals)), seconds)
                engine.zero_grad()
                bar.update(1)
                if step % self.log_every == 0 or step == self.total_steps:
                    postfix = task.log(step)
                    if postfix:
                        bar.set_postfix(**postfix)
                if self.eval_every and step % self.eval_every == 0:
                    with region("eval"):
                        stopped, last_eval = task.run_eval(step), step
                if self.save_every and step % self.save_every == 0:
                    with region("save"):
                        task.save(step)
                    last_saved = step
                prof.end(step)
                if step == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            if last_eval != step:
                task.run_eval(step)
            if self.save_final and last_saved != step:
                task.save(step)
        finally:
            prof.close()
            bar.close()
        return step


__all__ = ["KILL_ENV", "TrainLoop", "TrainTask"]
