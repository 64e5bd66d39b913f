"""Generation engines behind the OpenAI endpoints: prompt token ids in, generated token ids out, whole or streamed.

    DynamicEngine      today's dynamic batching (batching.py): concurrent requests with the same decoding settings
                       wait while the model is busy and then run as one `generate()` call (prompts of equal length
                       together); each streamed request runs `generate()` on a thread of its own
    ContinuousEngine   transformers' continuous batching (`model.init_continuous_batching()`): one decode batch that
                       requests join at the next step and leave at the step they finish, each with its own length;
                       a request whose client went away is cancelled and leaves at the next step

    request ─> Decoding(max_new_tokens, sampling, temperature, top_p, seed, n) + prompt ids
           ─> engine.generate(...) -> n lists of token ids      engine.stream(...) -> async iterator of new ids

transformers' manager decides `do_sample` once for all its requests and takes no per-request seed, and it drops the
logits processors it cannot run per request (repetition penalty, min length). So with `--continuous_batching` the
manager runs the greedy requests (the default: no temperature / top_p given, or temperature 0), and sampled requests
go through the dynamic engine. Both engines decode the OpenAI way: no repetition penalty (OpenAI's API has none;
its frequency / presence penalties are not supported), no `eos_min_prob`, no `poem_format`, so that the same
request gives the same tokens through either engine.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ernie_zoo.taskflow.task import without_onednn
from ernie_zoo.taskflow.text_generation import Prompts, TextGeneration

from .batching import Batcher
from .config import ServeConfig

if TYPE_CHECKING:  # app.ServedTask (importing app here would be a cycle: app builds the engines)
    ServedTask = Any

logger = logging.getLogger(__name__)
PAGE_SIZE = (
    32  # KV-cache page of transformers' manager, in tokens (its default 256 wastes memory on short chats)
)


@dataclass(frozen=True)
class Decoding:
    """How to continue a prompt (requests with equal settings may share a dynamic batch)."""

    max_new_tokens: int
    sampling: bool = False
    """False: greedy (the n continuations are the same one)."""
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1

    def options(self) -> dict[str, Any]:
        """text_generation's options for these settings (OpenAI's decoding: no repetition penalty, see above)."""
        options: dict[str, Any] = dict(
            max_new_tokens=self.max_new_tokens,
            repetition_penalty=1.0,
            eos_min_prob=0.0,
            poem_format=False,
        )
        if self.sampling:
            options.update(
                decode_strategy="sampling",
                temperature=self.temperature,
                top_p=self.top_p,
                num_return_sequences=self.n,
                seed=self.seed,
            )
        return options


class DynamicEngine:
    """Generation through text_generation's Taskflow (one per decoding setting, sharing the model) and a Batcher."""

    def __init__(self, task: ServedTask, config: ServeConfig):
        self.task = task
        self.batcher = Batcher(
            f"{task.name}-openai",
            self._run,
            max_batch_size=config.max_batch_size,
            max_wait_ms=config.max_wait_ms,
            max_queue=config.max_queue,
        )
        self.timeout = config.request_timeout_s

    def generator(self, decoding: Decoding) -> TextGeneration:
        """The TextGeneration task of `decoding` (its options validated; ValueError/TypeError as Taskflow)."""
        flow = self.task.flow(self.task.options_key(decoding.options()))
        return flow._task  # type: ignore[return-value]

    def _run(self, key: Hashable, prompts: list[list[int]]) -> list[list[list[int]]]:
        assert isinstance(key, Decoding)
        generator = self.generator(key)
        with without_onednn(generator.settings.precision != "bf16"):
            return generator.forward(Prompts([""] * len(prompts), prompts))

    async def generate(self, prompt: list[int], decoding: Decoding) -> list[list[int]]:
        (sequences,) = await self.batcher.submit(decoding, [prompt])
        return sequences if decoding.sampling else sequences * decoding.n  # greedy: n times the one answer

    async def stream(self, prompt: list[int], decoding: Decoding) -> AsyncIterator[list[int]]:
        tokens = self.generator(decoding).stream_ids(prompt)
        loop = asyncio.get_running_loop()
        done = object()
        stopping = threading.Event()
        pieces: asyncio.Queue = asyncio.Queue()

        def consume() -> None:
            try:
                for ids in tokens:
                    loop.call_soon_threadsafe(pieces.put_nowait, ids)
                    if stopping.is_set():
                        break
                loop.call_soon_threadsafe(pieces.put_nowait, done)
            except BaseException as exc:
                loop.call_soon_threadsafe(pieces.put_nowait, exc)
            finally:
                tokens.close()  # stops generate() at its next step (from the thread that runs it)

        thread = threading.Thread(target=consume, name="openai-stream", daemon=True)
        thread.start()
        try:
            while True:
                item = await asyncio.wait_for(pieces.get(), self.timeout)
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stopping.set()
            await asyncio.to_thread(thread.join)


class ContinuousEngine:
    """Greedy generation on transformers' continuous-batching manager; sampled requests go to `fallback`."""

    def __init__(self, generator: TextGeneration, config: ServeConfig, fallback: DynamicEngine):
        from transformers import ContinuousBatchingConfig, GenerationConfig

        self.default = generator  # text_generation's default task: end / pad tokens, trimming
        self.fallback = fallback
        self.timeout = config.request_timeout_s
        self.eos = generator.eos_id if generator.eos_id is not None else -1
        model = generator.model
        # KV cache for max_running requests of max_seq_len tokens each (on CPU the manager would otherwise take 60%
        # of the machine's memory); a request longer than that waits for room.
        blocks = math.ceil(config.max_running * config.max_seq_len / PAGE_SIZE) + 1
        cb = ContinuousBatchingConfig(
            page_size=PAGE_SIZE,
            num_blocks=blocks,
            max_batch_tokens=max(config.max_seq_len, 256),
            max_requests_per_batch=config.max_running,
            allow_block_sharing=False,
            use_cuda_graph=False,
            auto_switch_to_flash=False,  # the model is shared with the dynamic engine: keep its attention as it is
        )
        gen = GenerationConfig(
            do_sample=False, max_new_tokens=64, eos_token_id=self.eos, pad_token_id=generator.pad_id
        )
        self.manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
        self.manager.start()
        self._ids = itertools.count()

    def generator(self, decoding: Decoding) -> TextGeneration:
        return self.fallback.generator(decoding)

    def stop(self) -> None:
        self.manager.stop(block=True, timeout=10)

    def running(self) -> int:
        """Requests in the manager's batch or waiting for it (0 once every request finished or was cancelled)."""
        processor = self.manager.batch_processor
        if processor is None:
            return 0
        scheduler = processor.scheduler
        return (
            len(scheduler.active_requests)
            + len(scheduler.waiting_requests)
            + self.manager.input_queue.qsize()
        )

    async def generate(self, prompt: list[int], decoding: Decoding) -> list[list[int]]:
        if decoding.sampling:
            return await self.fallback.generate(prompt, decoding)
        ids: list[int] = []
        async for new in self._request(prompt, decoding, streaming=False):
            ids = new
        return [self.default._trim(ids)] * decoding.n

    async def stream(self, prompt: list[int], decoding: Decoding) -> AsyncIterator[list[int]]:
        if decoding.sampling:
            async for ids in self.fallback.stream(prompt, decoding):
                yield ids
            return
        sent = 0
        async for ids in self._request(prompt, decoding, streaming=True):
            if len(ids) > sent:
                yield ids[sent:]
                sent = len(ids)

    async def _request(
        self, prompt: list[int], decoding: Decoding, streaming: bool
    ) -> AsyncIterator[list[int]]:
        """The generated ids so far (cumulative), after each step (streaming) or once at the end."""
        manager = self.manager
        if not manager.is_running():
            raise RuntimeError("the continuous-batching manager stopped")
        request_id = f"openai-{next(self._ids)}"
        outputs: asyncio.Queue = asyncio.Queue()
        manager.register_result_handler(request_id, outputs.put_nowait)
        finished = False
        try:
            manager.add_request(
                prompt,
                request_id=request_id,
                max_new_tokens=decoding.max_new_tokens,
                streaming=streaming,
                eos_token_id=self.eos,
            )
            while not finished:
                output = await asyncio.wait_for(outputs.get(), self.timeout)
                if output.error is not None:
                    raise RuntimeError(f"continuous batching failed on this request: {output.error}")
                finished = output.is_finished()
                yield list(output.generated_tokens)
        finally:
            if not finished:  # the client went away, a timeout: the request leaves the batch at the next step
                manager.cancel_request(request_id)
                with manager.output_router._lock:  # a cancelled request gets no final output to clean it up
                    manager.output_router.result_handlers.pop(request_id, None)


__all__ = ["ContinuousEngine", "Decoding", "DynamicEngine"]
