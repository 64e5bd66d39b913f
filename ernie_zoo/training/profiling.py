"""torch.profiler over a window of optimizer steps (recipe key `logging.profile_steps: [start, end]`).

`TrainLoop` calls `begin(step)` before each step and `end(step)` after it, and wraps the phases of a step in
`region(name)`; outside the window both are free (no profiler exists, `region` is a null context). Inside it,
every step is one `train_step <n>` range holding its `data`, `forward`, `backward`, `optimizer` and
`dp_sum` ranges (and `eval` / `save` when the step runs them), with torch's own ops (and, on CUDA, the kernels)
underneath. After the window's last step each rank writes

    <directory>/rank<r>.pt.trace.json   Chrome trace: open in https://ui.perfetto.dev or chrome://tracing
                                        (TensorBoard reads it too, with the torch-tb-profiler plugin)
    <directory>/rank<r>.txt             the ops that took the time, by self time (key_averages().table)

A run resumed inside the window records the rest of it; a run that stops inside it (an error, an early stop)
writes what it recorded.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch

from ernie_zoo.utils import atomic_write_text

logger = logging.getLogger(__name__)

#: The `record_function` name of step n: `f"{STEP_RANGE} {n}"`.
STEP_RANGE = "train_step"


class StepProfiler:
    """Profile optimizer steps `window[0]..window[1]` (1-based, inclusive) into `directory` as rank `rank`;
    `window` None: profile nothing."""

    def __init__(
        self, window: tuple[int, int] | list[int] | None, directory: str | os.PathLike | None, rank: int
    ):
        if window is not None and directory is None:
            raise ValueError("a profile window needs a directory for the traces")
        self.window = tuple(window) if window is not None else None
        self.directory = Path(directory) if directory is not None else None
        self.rank = rank
        self.profiler: torch.profiler.profile | None = None
        self._step: contextlib.AbstractContextManager | None = None

    @property
    def active(self) -> bool:
        return self.profiler is not None

    def begin(self, step: int) -> None:
        """Before 1-based step `step`: start the profiler at the window's first step (or the first step this run
        makes inside it), and open the step's range."""
        if self.window is None:
            return
        start, end = self.window
        if self.profiler is None and start <= step <= end:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.profiler = torch.profiler.profile(activities=activities, record_shapes=True)
            self.profiler.__enter__()
            logger.info("profiling steps %d..%d (rank %d)", step, end, self.rank)
        if self.profiler is not None:
            self._step = torch.profiler.record_function(f"{STEP_RANGE} {step}")
            self._step.__enter__()

    def region(self, name: str) -> contextlib.AbstractContextManager:
        """A named range inside the current step (a null context when not profiling)."""
        return torch.profiler.record_function(name) if self.profiler is not None else contextlib.nullcontext()

    def end(self, step: int) -> None:
        """After step `step`: close its range; after the window's last step, stop and write the files."""
        if self._step is not None:
            self._step.__exit__(None, None, None)
            self._step = None
        if self.profiler is not None and step >= self.window[1]:
            self.close()

    def close(self) -> None:
        """Stop the profiler if it runs and write this rank's trace and table."""
        if self._step is not None:
            self._step.__exit__(None, None, None)
            self._step = None
        profiler, self.profiler = self.profiler, None
        if profiler is None:
            return
        profiler.__exit__(None, None, None)
        self.directory.mkdir(parents=True, exist_ok=True)
        trace = self.directory / f"rank{self.rank}.pt.trace.json"
        tmp = trace.with_name(f".{trace.name}.tmp-{os.getpid()}")
        profiler.export_chrome_trace(str(tmp))
        os.replace(tmp, trace)
        sort_by = "self_device_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
        table = profiler.key_averages().table(sort_by=sort_by, row_limit=40)
        atomic_write_text(self.directory / f"rank{self.rank}.txt", table + "\n")
        logger.info("profile written to %s and %s", trace, trace.with_name(f"rank{self.rank}.txt"))


__all__ = ["STEP_RANGE", "StepProfiler"]
