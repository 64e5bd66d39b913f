"""Dynamic batching: concurrent requests for one task merged into model batches.

    request A (2 texts, options k1) ─┐                       ┌─> A gets results 0-1
    request B (1 text,  options k1) ─┼─> queue ─> batch [a0 a1 b0] ─> model ─> split ─┼─> B gets result 2
    request C (3 texts, options k2) ─┘   (C waits: other options)                   ...

One asyncio task per served task forms batches; the model runs in one dedicated worker thread per task, so the
event loop keeps accepting and answering requests while a batch runs. A batch holds whole requests, in arrival
order, that share the same (normalized) options, up to `max_batch_size` texts (a single larger request runs as
its own batch; Taskflow cuts it into model batches itself). When the model is idle the first waiting request
waits at most `max_wait` for others to join; when the model is busy, requests pile up meanwhile and the next
batch starts as soon as it is free, so waiting costs nothing under load. Results are routed back by position:
Taskflow returns one result per input text, in input order, whatever the batch (it is batch-size invariant).

If a merged batch raises, each of its requests is run again on its own, so that a text that breaks the model
fails only its own request. The queue is bounded in texts (`QueueFull`, answered 503 with Retry-After).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The task's queue holds `max_queue` texts; `retry_after` is a guess in whole seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class ShuttingDown(Exception):
    """The batcher is stopping and takes no new requests."""


@dataclass
class _Job:
    key: Hashable
    texts: list[str]
    future: asyncio.Future
    enqueued: float = field(default_factory=time.monotonic)


@dataclass
class BatchStats:
    """What one model batch did (for metrics)."""

    texts: int
    requests: int
    seconds: float
    failed: bool


class Batcher:
    """Merge `submit(key, texts)` calls into `run(key, texts)` calls of at most `max_batch_size` texts.

    `run` is called in one worker thread, never concurrently with itself; it must return one result per text.
    `on_batch(stats)` and `on_queue(texts_waiting)` are called on the event loop (metrics hooks). `arriving()`
    counts requests received but not yet submitted (being read and validated); while the model is idle, the first
    queued request waits up to `max_wait_ms` only while it is > 0 (None: always wait up to max_wait_ms).
    """

    def __init__(
        self,
        name: str,
        run: Callable[[Hashable, list[str]], list[Any]],
        *,
        max_batch_size: int = 32,
        max_wait_ms: float = 5.0,
        max_queue: int = 2048,
        on_batch: Callable[[BatchStats], None] | None = None,
        on_queue: Callable[[int], None] | None = None,
        arriving: Callable[[], int] | None = None,
    ):
        self.name = name
        self._run = run
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000
        self.max_queue = max_queue
        self._on_batch = on_batch or (lambda stats: None)
        self._on_queue = on_queue or (lambda n: None)
        self._arriving = arriving or (lambda: 1)
        self._jobs: deque[_Job] = deque()
        self._queued = 0  # texts in self._jobs
        self._wakeup: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._running: list[_Job] = []  # the jobs of the batch in the worker thread
        self._rate = 0.0  # texts/s of recent batches (exponential average), for Retry-After
        self.worker_thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the batching task on the running event loop."""
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"infer-{self.name}")
        self._loop_task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher-{self.name}")

    async def stop(self) -> None:
        """Refuse new requests, fail the ones still queued with ShuttingDown, let a running batch finish."""
        self._closed = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
        for job in [*self._running, *self._jobs]:
            _settle(job.future, exc=ShuttingDown(f"{self.name}: the server is shutting down"))
        self._jobs.clear()
        self._queued = 0
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    @property
    def queued(self) -> int:
        """Texts waiting for a batch."""
        return self._queued

    # --------------------------------------------------------------------------------------------- submit
    async def submit(self, key: Hashable, texts: list[str]) -> list[Any]:
        """Queue `texts` (run with options `key`) and wait for their results, in order."""
        if self._closed or self._wakeup is None:
            raise ShuttingDown(f"{self.name}: the server is shutting down")
        if self._queued + len(texts) > self.max_queue:
            wait = self._queued / self._rate if self._rate > 0 else 1.0
            raise QueueFull(
                f"the {self.name} queue is full ({self._queued} texts waiting, limit {self.max_queue}); "
                "retry later",
                retry_after=max(1, math.ceil(wait)),
            )
        job = _Job(key, texts, asyncio.get_running_loop().create_future())
        self._jobs.append(job)
        self._set_queued(self._queued + len(texts))
        self._wakeup.set()
        return await job.future

    def _set_queued(self, n: int) -> None:
        self._queued = n
        self._on_queue(n)

    # ---------------------------------------------------------------------------------------------- loop
    def _drop_abandoned(self) -> None:
        """Forget queued jobs whose caller gave up (timeout, disconnect): their futures are cancelled."""
        if any(job.future.done() for job in self._jobs):
            kept = deque(job for job in self._jobs if not job.future.done())
            self._jobs = kept
            self._set_queued(sum(len(job.texts) for job in kept))

    def _waiting(self, key: Hashable) -> int:
        return sum(len(job.texts) for job in self._jobs if job.key == key)

    def _take(self, key: Hashable) -> list[_Job]:
        """The next batch: queued jobs with options `key`, oldest first, while they fit in max_batch_size."""
        taken: list[_Job] = []
        kept: deque[_Job] = deque()
        size = 0
        full = False
        for job in self._jobs:
            if not full and job.key == key and (not taken or size + len(job.texts) <= self.max_batch_size):
                taken.append(job)
                size += len(job.texts)
            else:
                # a same-key job that does not fit closes the batch, so it is first in line next time
                full = full or job.key == key
                kept.append(job)
        self._jobs = kept
        self._set_queued(self._queued - size)
        return taken

    async def _loop(self) -> None:
        assert self._wakeup is not None
        while True:
            self._drop_abandoned()
            if not self._jobs:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            first = self._jobs[0]
            deadline = first.enqueued + self.max_wait
            # Wait for the batch to fill while the model is idle, at most until the first job's deadline, and only
            # while requests that will join it are on their way (a lone client is not kept waiting for nobody).
            while self._waiting(first.key) < self.max_batch_size and self._arriving() > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or first.future.done():
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except TimeoutError:
                    break
            self._drop_abandoned()
            if not self._jobs:
                continue
            await self._run_batch(self._take(self._jobs[0].key))

    async def _run_batch(self, jobs: list[_Job]) -> None:
        loop = asyncio.get_running_loop()
        texts = [t for job in jobs for t in job.texts]
        started = time.perf_counter()
        self._running = jobs
        try:
            results = await loop.run_in_executor(self._executor, self._call, jobs[0].key, texts)
        except Exception as exc:
            self._running = []
            self._on_batch(BatchStats(len(texts), len(jobs), time.perf_counter() - started, True))
            if len(jobs) == 1:
                _settle(jobs[0].future, exc=exc)
                return
            # One request may hold the text that broke the batch: run each on its own so the others succeed.
            logger.warning(
                "%s: a batch of %d requests failed (%r); retrying them one by one", self.name, len(jobs), exc
            )
            for job in jobs:
                if not job.future.done():
                    await self._run_batch([job])
            return
        self._running = []
        seconds = time.perf_counter() - started
        rate = len(texts) / max(seconds, 1e-6)
        self._rate = 0.8 * self._rate + 0.2 * rate if self._rate else rate
        self._on_batch(BatchStats(len(texts), len(jobs), seconds, False))
        position = 0
        for job in jobs:
            _settle(job.future, result=results[position : position + len(job.texts)])
            position += len(job.texts)

    def _call(self, key: Hashable, texts: list[str]) -> list[Any]:
        self.worker_thread = threading.current_thread()
        results = self._run(key, texts)
        if len(results) != len(texts):
            raise RuntimeError(f"{self.name}: {len(texts)} texts gave {len(results)} results")
        return results


def _settle(future: asyncio.Future, result: Any = None, exc: BaseException | None = None) -> None:
    if future.done():  # the caller gave up (timeout) while the batch ran
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


__all__ = ["BatchStats", "Batcher", "QueueFull", "ShuttingDown"]
