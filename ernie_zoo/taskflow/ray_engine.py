"""Corpus-scale Taskflow on Ray: one Taskflow per Ray actor, blocks of texts mapped over the actors in order.

    pip install "ray>=2.60"          # or: pip install -e ".[ray]"
    ernie-zoo taskflow sentiment_analysis -i big.jsonl -o out.jsonl --resume --engine ray --workers 4
    ernie-zoo taskflow ner -i big.jsonl -o out.jsonl --resume --engine ray --ray-address auto   # a running cluster

The command line reads the input a block at a time (as the local engine does), keeps at most 2 blocks per worker in
flight (memory stays flat however big the file), and writes the results in input order, so `--resume` works as it
does locally: a job killed halfway and started again neither loses nor duplicates a line. Each actor loads the
model once (from the package or `--task-path`, which every node must see at the same path) and runs with
`--threads-per-worker` torch threads. Without `--ray-address` a local single-node Ray is started (and stopped at the
end) with one CPU per worker; a small watcher process stops it with the job however the job ends, a SIGKILL
included (Ray's own fate sharing left the raylet's DashboardAgent and RuntimeEnvAgent running; _ray_reaper.py).
"""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class TaskflowWorker:
    """The body of a Ray actor: one Taskflow, called on blocks of texts."""

    def __init__(self, task: str, kwargs: dict[str, Any], threads: int):
        import torch

        torch.set_num_threads(threads)
        from ernie_zoo.taskflow import Taskflow

        self.flow = Taskflow(task, **kwargs)

    def run(self, texts: list[str]) -> list[Any]:
        return self.flow(texts)


class RayTaskflowPool:
    """`workers` Ray actors, each with its own Taskflow(task, **kwargs); `map(blocks)` yields each block's results
    in input order, with at most `2 * workers` blocks in flight."""

    def __init__(
        self,
        task: str,
        kwargs: dict[str, Any],
        *,
        workers: int = 2,
        threads_per_worker: int = 1,
        address: str | None = None,
    ):
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - exercised where ray is not installed
            raise ImportError(
                '--engine ray needs Ray: pip install "ray>=2.60" (or pip install -e ".[ray]")'
            ) from exc
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be >= 1, got {threads_per_worker}")
        self.ray = ray
        self.started = False
        self.reaper: subprocess.Popen | None = None
        if not ray.is_initialized():
            if address is None:
                self.reaper = _start_reaper()
                ray.init(num_cpus=workers * threads_per_worker, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
            self.started = True
        actor = ray.remote(num_cpus=threads_per_worker)(TaskflowWorker)
        self.actors = [actor.remote(task, kwargs, threads_per_worker) for _ in range(workers)]

    def map(self, blocks: Iterable[list[str]]) -> Iterator[list[Any]]:
        pending: collections.deque = collections.deque()
        depth = 2 * len(self.actors)
        for i, texts in enumerate(blocks):
            pending.append(self.actors[i % len(self.actors)].run.remote(texts))
            if len(pending) >= depth:
                yield self._get(pending.popleft())
        while pending:
            yield self._get(pending.popleft())

    def _get(self, ref: Any) -> list[Any]:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            # the actor's own exception (a ValueError for a text the task refuses, ...), raised here as itself
            raise exc.as_instanceof_cause() from None

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
        if self.started:
            self.ray.shutdown()
            self.started = False
        if self.reaper is not None:  # it stops what ray.shutdown() leaves running (the raylet's agents)
            self.reaper.stdin.close()
            try:
                self.reaper.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log.warning("the Ray reaper (pid %d) did not finish in 30 s", self.reaper.pid)
            self.reaper = None


def _start_reaper() -> subprocess.Popen:
    """A watcher that stops this job's local Ray processes when this process ends, SIGKILL included
    (ernie_zoo/taskflow/_ray_reaper.py). Its own session: a kill of this job's process group must not take it."""
    script = Path(__file__).with_name("_ray_reaper.py")
    return subprocess.Popen(
        [sys.executable, str(script), str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


__all__ = ["RayTaskflowPool", "TaskflowWorker"]
