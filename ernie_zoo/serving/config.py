"""`ServeConfig`: everything `ernie-zoo serve` needs, as one typed dataclass (the CLI fills it from flags)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ernie_zoo.taskflow import get_task


@dataclass
class ServeConfig:
    """Options of the HTTP server (`ernie-zoo serve` takes each as `--NAME VALUE`)."""

    tasks: list[str] = field(default_factory=list)
    """Task names (or aliases) to serve, each at `POST /v1/{task}`."""
    task_paths: dict[str, str] = field(default_factory=dict)
    """{task: local model directory} for tasks that should not use their shipped default model."""
    models: dict[str, str] = field(default_factory=dict)
    """{task: shipped model name or hub id} (exclusive with task_paths for the same task)."""
    host: str = "127.0.0.1"
    """Address to bind; loopback by default so nothing is exposed until you ask for it ("0.0.0.0")."""
    port: int = 8000
    """TCP port, 1-65535."""
    workers: int = 1
    """Uvicorn worker processes, each with its own copy of the models and its own batcher."""
    device: str | None = None
    """"cpu", "cuda", "cuda:N" or None (cuda when available)."""
    precision: Literal["fp32", "fp16", "bf16", "int8"] | None = None
    """"fp32", "fp16"/"bf16" (GPU) or "int8" (CPU int8 compute; about 2x faster on CPU); None: fp32, or on CPU
    the model's own choice (Taskflow's default)."""
    backend: Literal["torch", "onnxruntime"] = "torch"
    """Taskflow's backend: "torch", or "onnxruntime" for directories written by `ernie-zoo export --onnx` (every
    served task then needs --task_path TASK=EXPORTED_DIR; see docs/onnx.md)."""
    max_seq_len: int = 512
    """Longest token sequence fed to the model; longer texts are split and joined (see Taskflow)."""
    continuous_batching: bool = False
    """Run greedy generation of the OpenAI endpoints (/v1/chat/completions, /v1/completions) on transformers'
    continuous-batching manager: requests join the running decode batch at the next step and leave it when done,
    instead of waiting for the batch in flight to finish (dynamic batching). Sampled requests keep dynamic
    batching (the manager has no per-request do_sample or seed). See docs/serving.md."""
    max_running: int = 32
    """With continuous_batching: most requests in the decode batch at once (the KV cache is sized for this many
    sequences of max_seq_len tokens); more wait for a slot."""
    max_batch_size: int = 64
    """Most texts merged from concurrent requests into one Taskflow call."""
    batch_size: int | None = None
    """Texts per forward pass inside that call (Taskflow's batch_size); None: 2 on CPU, 32 on GPU. Texts
    merged from requests have unrelated lengths, and on CPU padding them to a common length costs more than
    batching saves: with the mini models a forward batch of 2 is the fastest over merged batches of 4 to 64
    texts (bench/bench_serve.py, `--batch-size` sweep in docs/serving.md)."""
    max_wait_ms: float = 5.0
    """How long the first request of a batch waits for others to join it while the model is idle."""
    max_queue: int = 2048
    """Most texts waiting per task; beyond it requests get 503 with Retry-After (bounded memory)."""
    max_texts_per_request: int = 256
    """Most texts in one request (413 beyond)."""
    max_chars_per_text: int = 10_000
    """Most characters in one text (413 beyond)."""
    max_chars_per_request: int = 200_000
    """Most characters in all texts of one request together (413 beyond)."""
    request_timeout_s: float = 30.0
    """A request still unanswered after this many seconds gets 504."""
    api_key: str | None = None
    """When set, task endpoints need `Authorization: Bearer KEY` or `X-API-Key: KEY`."""
    torch_threads: int | None = None
    """Torch intra-op threads per worker (None: torch's default, one per core)."""
    access_log: bool = False
    """Log every request (uvicorn's access log); off by default, /metrics counts requests."""
    graceful_timeout_s: float = 60.0
    """After SIGTERM, how long in-flight requests may take before the server stops anyway."""
    max_connections: int = 256
    """Most open connections per worker process; a connection beyond it gets 503 `too_many_connections` and is
    closed (slow or idle clients cannot exhaust the server)."""
    header_timeout_s: float = 10.0
    """A request's line and headers must arrive within this many seconds (of connecting, or of the request's
    first byte on a kept-alive connection); else 408 `header_timeout` and the connection is closed."""
    body_timeout_s: float = 30.0
    """A request's body must arrive within this many seconds of its headers; else 408 `body_timeout` and the
    connection is closed."""
    drain_timeout_s: float = 5.0
    """After an answer that closes the connection while the client is still sending (413 `body_too_large`, 408,
    400), the server half-closes and reads and discards what still comes for up to this many seconds (and 64 MiB),
    so that the client reads the answer instead of a connection reset."""

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("serve at least one task (--task NAME)")
        # Canonical names, so that aliases ("sentiment") and their task share one batcher and one model.
        canonical = [get_task(t).name for t in self.tasks]
        self.tasks = list(dict.fromkeys(canonical))
        for kind, mapping in (("task_path", self.task_paths), ("model", self.models)):
            fixed = {}
            for task, value in mapping.items():
                name = get_task(task).name
                if name not in self.tasks:
                    raise ValueError(f"{kind} given for {task!r}, which is not served (--task {task})")
                fixed[name] = value
            mapping.clear()
            mapping.update(fixed)
        both = sorted(set(self.task_paths) & set(self.models))
        if both:
            raise ValueError(f"give either a task_path or a model for {', '.join(both)}, not both")
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {self.batch_size!r}")
        if not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise ValueError(f"port must be an int from 1 to 65535, got {self.port!r}")
        for name in (
            "workers",
            "max_running",
            "max_batch_size",
            "max_queue",
            "max_texts_per_request",
            "max_connections",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive int, got {getattr(self, name)!r}")
        for name in (
            "max_chars_per_text",
            "max_chars_per_request",
            "request_timeout_s",
            "header_timeout_s",
            "body_timeout_s",
            "drain_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")
        if self.max_texts_per_request > self.max_queue:
            raise ValueError(
                f"max_texts_per_request={self.max_texts_per_request} exceeds max_queue={self.max_queue}: "
                "such a request could never be queued"
            )

    @property
    def max_body_bytes(self) -> int:
        """Largest request body read: the character budget at JSON's worst case (a \\uXXXX\\uXXXX escaped
        surrogate pair is 12 bytes for one character) plus room for the envelope and options."""
        return 12 * self.max_chars_per_request + 4 * self.max_texts_per_request + 65_536

    @property
    def forward_batch_size(self) -> int:
        if self.batch_size is not None:
            return self.batch_size
        from ernie_zoo.utils import resolve_device

        return 32 if resolve_device(self.device).type == "cuda" else 2

    def taskflow_kwargs(self, task: str) -> dict[str, Any]:
        """Keyword arguments of `Taskflow(task, ...)` for a served task (task options come per request)."""
        kwargs: dict[str, Any] = dict(
            batch_size=self.forward_batch_size,
            max_seq_len=self.max_seq_len,
            precision=self.precision,
            device=self.device,
        )
        if self.backend != "torch":  # only then: a model-free task (word_segmentation) takes no backend
            kwargs["backend"] = self.backend
        if task in self.task_paths:
            kwargs["task_path"] = self.task_paths[task]
        if task in self.models:
            kwargs["model"] = self.models[task]
        return kwargs

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServeConfig:
        return cls(**json.loads(text))


__all__ = ["ServeConfig"]
