"""The ASGI app: Taskflow tasks over HTTP, with dynamic batching, limits, metrics and an optional API key.

    POST /v1/{task}   {"texts": ["...", ...], "options": {...}}  ->  {"task": ..., "results": [Taskflow's dicts]}
                      text_generation with "options": {"stream": true} and one text: server-sent events, one
                      `data: {"text": piece}` per generated piece, then `event: done` with the usual response body
                      (or `event: error` with the usual error body if the model fails once the stream has begun)
    GET  /v1/tasks    the served tasks, their options and models
    POST /v1/chat/completions, /v1/completions, /v1/embeddings, GET /v1/models
                      OpenAI-compatible, over text_generation / feature_extraction (openai_api.py; errors there
                      in OpenAI's shape)
    GET  /health      200 while the process is alive (503 when a model failed to load)
    GET  /ready       200 once every model is loaded and warmed up; 503 while loading or shutting down
    GET  /metrics     Prometheus text format
    GET  /docs        OpenAPI (Swagger UI); /openapi.json

Every error is JSON: `{"error": {"code": ..., "message": ..., ["fields": [...]]}}` with status 401 (API key),
404 (unknown task), 413 (too many texts or characters), 415 (body not sent as JSON), 422 (malformed JSON, wrong types, unknown or invalid
options: `fields` names them), 503 (loading, queue full with Retry-After, shutting down), 504 (timeout) or 500
(the model raised, or the server failed on this request; other requests and the connection are not affected).
Errors found below the app (bad HTTP, slow clients, too many connections) are answered in the same shape by
`protocol.py`.

A lone UTF-16 surrogate in a text (`"\ud800"` not part of a pair: valid JSON, but not encodable as UTF-8) is
replaced with U+FFFD before the model sees it, one character for one, so offsets hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import json
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException

from ernie_zoo.taskflow import Taskflow, get_task, list_tasks
from ernie_zoo.taskflow.task import build_options
from ernie_zoo.version import __version__

from .batching import Batcher, QueueFull, ShuttingDown
from .config import ServeConfig
from .engines import ContinuousEngine, DynamicEngine
from .metrics import Metrics
from .openai_api import OpenAIError, add_routes, is_openai_path, openai_error
from .responses import _SURROGATE, ErrorResponse, ResultsResponse, encode_json

logger = logging.getLogger(__name__)
ARRIVING_KEY = "ernie_zoo.arriving"  # in the ASGI scope of a task request until it reaches the batcher
MAX_OPTION_SETS = 16  # Taskflow instances kept per task, one per distinct option set (they share the model)
WARMUP_TEXT = "这家餐厅的服务非常棒！"


def replace_surrogates(texts: list[Any]) -> list[Any]:
    """Each lone surrogate as U+FFFD (what the model sees and what the results echo), in texts and in pairs of
    texts (text_similarity)."""

    def clean(t: str) -> str:
        return _SURROGATE.sub("\ufffd", t) if _SURROGATE.search(t) else t

    return [clean(t) if isinstance(t, str) else [clean(x) for x in t] for t in texts]


def _text_or_pair(value: Any) -> str | list[str]:
    """A request item: a text, or a pair [text1, text2] of texts (text_similarity); one error per bad item."""
    if isinstance(value, str) or (
        isinstance(value, list) and len(value) == 2 and all(isinstance(t, str) for t in value)
    ):
        return value
    raise ValueError("expected a string (text_similarity: a pair [text1, text2] of strings)")


TextOrPair = Annotated[
    Any,
    AfterValidator(_text_or_pair),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
            ]
        }
    ),
]


class PredictRequest(BaseModel):
    """A task request: texts and the task's options (see GET /v1/tasks or the endpoint's description)."""

    model_config = ConfigDict(extra="forbid")
    texts: list[TextOrPair] = Field(
        description="the texts to process; one result per text, in the same order (text_similarity: pairs "
        '["text1", "text2"], one result per pair)',
        examples=[["这家餐厅的服务非常棒！", "新华社北京三月五日电"]],
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description='the task\'s options, e.g. {"return_all_scores": true}'
    )


class PredictResponse(BaseModel):
    task: str = Field(description="the task's canonical name")
    results: list[dict[str, Any]] = Field(description="Taskflow's result dicts, one per text, in order")


class ApiError(Exception):
    """An error answered as `{"error": {"code", "message"[, "fields"]}}` with `status`."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
    ):
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.extra = status, code, message, headers, extra

    def response(self, scope: dict | None = None) -> JSONResponse:
        """The error in the app's shape, or in OpenAI's on the OpenAI endpoints (`scope`: the request's)."""
        if scope is not None and is_openai_path(scope.get("path", "")):
            fields = self.extra.get("fields") or [None]
            status, body = openai_error(self.status, self.code, self.message, fields[0])
            return ErrorResponse(body, status, self.headers)
        return ErrorResponse(
            {"error": {"code": self.code, "message": self.message, **self.extra}}, self.status, self.headers
        )


# ------------------------------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class OptionsKey:
    """Normalized options of a request: requests with equal keys (same option values, defaults filled in) may
    share a model batch. `given` is what the first such request sent, to build its Taskflow."""

    normalized: str
    given: dict[str, Any] = field(compare=False, hash=False)


class ServedTask:
    """One served task: a Taskflow per distinct option set (all sharing one loaded model) and a batcher."""

    def __init__(self, name: str, config: ServeConfig, metrics: Metrics, arriving: Callable[[], int]):
        self.cls = get_task(name)
        self.name = self.cls.name
        self.kwargs = config.taskflow_kwargs(self.name)
        self.flows: OrderedDict[str, Taskflow] = OrderedDict()
        self.model_path: str | None = None
        self.batcher = Batcher(
            self.name,
            self._run,
            max_batch_size=config.max_batch_size,
            max_wait_ms=config.max_wait_ms,
            max_queue=config.max_queue,
            on_batch=lambda stats: metrics.observe_batch(self.name, stats),
            on_queue=metrics.queue_depth.labels(self.name).set,
            arriving=arriving,
        )
        self.default_key = self.options_key({})
        self.streams = 0  # streamed generations running now (bounded by max_queue, like waiting texts)

    def options_key(self, options: dict[str, Any]) -> OptionsKey:
        """Validate request options with the task's typed option dataclass (ValueError/TypeError as Taskflow)."""
        normalized = dataclasses.asdict(build_options(self.cls.Options, self.name, options))
        return OptionsKey(json.dumps(normalized, sort_keys=True, default=repr), dict(options))

    def load(self) -> None:
        """Load the model and run one text through it (first-call costs are paid before /ready says yes)."""
        flow = Taskflow(self.name, **self.kwargs)
        self.flows[self.default_key.normalized] = flow
        self.model_path = flow.model_path
        try:
            self._run(
                self.default_key, [[WARMUP_TEXT, WARMUP_TEXT]] if self.cls.takes_pairs else [WARMUP_TEXT]
            )
        except (ValueError, TypeError) as exc:  # a task may refuse the text (fill_mask wants a [MASK])
            logger.info("%s: warm-up text refused (%s); the model is loaded", self.name, exc)

    def _run(self, key: Hashable, texts: list[str]) -> list[dict[str, Any]]:
        return self.flow(key)(texts)  # type: ignore[return-value]

    def flow(self, key: Hashable) -> Taskflow:
        """The Taskflow of an option set (built on first use; the model comes from the process cache)."""
        assert isinstance(key, OptionsKey)
        flow = self.flows.get(key.normalized)
        if flow is None:
            flow = Taskflow(self.name, **self.kwargs, **key.given)  # the model comes from the process cache
            self.flows[key.normalized] = flow
            if len(self.flows) > MAX_OPTION_SETS:
                oldest = next(k for k in self.flows if k != self.default_key.normalized)
                del self.flows[oldest]
        else:
            self.flows.move_to_end(key.normalized)
        return flow


# ------------------------------------------------------------------------------------------------- state
_STATES: weakref.WeakSet[ServingState] = weakref.WeakSet()


def begin_draining() -> None:
    """Called on SIGTERM: every app of this process answers 503 to new requests and /ready says no, while the
    requests already in flight finish."""
    for state in list(_STATES):
        state.draining = True
        state.metrics.ready.set(0)


class ServingState:
    def __init__(self, config: ServeConfig):
        self.config = config
        self.metrics = Metrics()
        self.arriving = dict.fromkeys(config.tasks, 0)  # requests received, not yet submitted to the batcher
        self.tasks = {
            name: ServedTask(name, config, self.metrics, functools.partial(self.arriving.__getitem__, name))
            for name in config.tasks
        }
        self.routes: dict[str, ServedTask] = {}  # names and aliases -> task
        for task in self.tasks.values():
            for key in (task.name, *task.cls.aliases):
                self.routes[key] = task
        self.loaded = False
        self.draining = False
        self.load_error: str | None = None
        self._loader: asyncio.Task | None = None
        self.started = time.time()
        self.streams = 0  # OpenAI streams running now
        # The OpenAI endpoints' generation engine (engines.py); the continuous one is built once the model loaded.
        generation = self.tasks.get("text_generation")
        self.dynamic = DynamicEngine(generation, config) if generation is not None else None
        self.engine: DynamicEngine | ContinuousEngine | None = self.dynamic
        _STATES.add(self)

    @property
    def ready(self) -> bool:
        return self.loaded and not self.draining and self.load_error is None

    async def start(self) -> None:
        if self.config.torch_threads:
            torch.set_num_threads(self.config.torch_threads)
        for task in self.tasks.values():
            task.batcher.start()
        if self.dynamic is not None:
            self.dynamic.batcher.start()
        self._loader = asyncio.get_running_loop().create_task(self._load())

    async def _load(self) -> None:
        started = time.perf_counter()
        try:
            for task in self.tasks.values():
                await asyncio.to_thread(task.load)
                logger.info("%s ready (model: %s)", task.name, task.model_path or "none")
            if self.config.continuous_batching and self.dynamic is not None:
                generator = self.dynamic.task.flow(self.dynamic.task.default_key)._task
                self.engine = await asyncio.to_thread(ContinuousEngine, generator, self.config, self.dynamic)
                logger.info(
                    "text_generation: continuous batching on (max_running=%d)", self.config.max_running
                )
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            logger.exception("loading the models failed; /health answers 503")
            return
        self.loaded = True
        self.metrics.ready.set(0 if self.draining else 1)
        logger.info("all models loaded in %.1f s", time.perf_counter() - started)

    async def stop(self) -> None:
        self.draining = True
        self.metrics.ready.set(0)
        if self._loader is not None and not self._loader.done():
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
        for task in self.tasks.values():
            await task.batcher.stop()
        if self.dynamic is not None:
            await self.dynamic.batcher.stop()
        if isinstance(self.engine, ContinuousEngine):
            await asyncio.to_thread(self.engine.stop)

    # ----------------------------------------------------------------------------------------- predict
    def check_limits(self, texts: list[Any]) -> None:
        """Texts per request, characters per text and per request; a pair of texts (text_similarity) counts as
        one item whose texts are each held to the per-text limit."""
        c = self.config
        if len(texts) > c.max_texts_per_request:
            raise ApiError(
                413,
                "too_many_texts",
                f"{len(texts)} texts in one request; the limit is {c.max_texts_per_request} (max_texts_per_request)",
            )
        total = 0
        for i, item in enumerate(texts):
            for j, text in [(None, item)] if isinstance(item, str) else enumerate(item):
                where = f"texts[{i}]" if j is None else f"texts[{i}][{j}]"
                if len(text) > c.max_chars_per_text:
                    raise ApiError(
                        413,
                        "text_too_long",
                        f"{where} has {len(text)} characters; the limit is {c.max_chars_per_text} "
                        "(max_chars_per_text)",
                        fields=[where.replace("[", ".").replace("]", "")],
                    )
                total += len(text)
        if total > c.max_chars_per_request:
            raise ApiError(
                413,
                "request_too_long",
                f"the texts have {total} characters together; the limit is {c.max_chars_per_request} "
                "(max_chars_per_request)",
            )

    def arrive(self, scope: dict, task: str) -> None:
        scope[ARRIVING_KEY] = task
        self.arriving[task] += 1

    def arrived(self, scope: dict) -> None:
        """The request was submitted or answered: it no longer holds an idle batch open (idempotent)."""
        task = scope.pop(ARRIVING_KEY, None)
        if task is not None:
            self.arriving[task] -= 1

    def check_serving(self) -> None:
        if self.draining:
            raise ApiError(503, "shutting_down", "the server is shutting down", {"Connection": "close"})
        if self.load_error is not None:
            raise ApiError(503, "load_failed", f"the models failed to load: {self.load_error}")
        if not self.loaded:
            raise ApiError(
                503, "not_ready", "the models are still loading; retry shortly", {"Retry-After": "1"}
            )

    def checked_options(self, task: ServedTask, body: PredictRequest) -> OptionsKey:
        """Readiness, limits and options, in the order every task request is checked."""
        self.check_serving()
        self.check_limits(body.texts)
        try:
            return task.options_key(body.options)
        except (ValueError, TypeError) as exc:
            raise ApiError(422, "invalid_option", str(exc), fields=["options"]) from None

    async def predict(self, task: ServedTask, body: PredictRequest, scope: dict) -> dict[str, Any]:
        key = self.checked_options(task, body)
        if not body.texts:
            return {"task": task.name, "results": []}
        texts = replace_surrogates(body.texts)
        self.arrived(scope)
        try:
            results = await asyncio.wait_for(task.batcher.submit(key, texts), self.config.request_timeout_s)
        except QueueFull as exc:
            raise ApiError(503, "overloaded", str(exc), {"Retry-After": str(exc.retry_after)}) from None
        except ShuttingDown as exc:
            raise ApiError(503, "shutting_down", str(exc), {"Connection": "close"}) from None
        except TimeoutError:
            raise ApiError(
                504, "timeout", f"no answer within {self.config.request_timeout_s:g} s (request_timeout_s)"
            ) from None
        except (ValueError, TypeError) as exc:  # Taskflow's contract for inputs it cannot take
            raise ApiError(422, "invalid_input", str(exc), fields=["texts"]) from None
        except Exception as exc:
            logger.error(
                "%s: the model raised on a request of %d texts", task.name, len(body.texts), exc_info=exc
            )
            raise ApiError(
                500, "model_error", f"the {task.name} model failed on this request ({type(exc).__name__})"
            ) from None
        self.metrics.texts.labels(task.name).inc(len(results))
        return {"task": task.name, "results": results}

    async def stream(self, task: ServedTask, body: PredictRequest, scope: dict) -> StreamingResponse:
        """text_generation with stream=true: the pieces as server-sent events. Everything that can be refused is
        refused before the stream begins, with the usual JSON error: readiness, limits, options, one text, the
        prompt itself (Taskflow's preprocessing runs before the first event) and the stream cap (max_queue)."""
        key = self.checked_options(task, body)
        if len(body.texts) != 1:
            raise ApiError(
                422,
                "invalid_input",
                f"stream=true takes one text per request, got {len(body.texts)}",
                fields=["texts"],
            )
        self.arrived(scope)
        if task.streams >= self.config.max_queue:
            raise ApiError(
                503,
                "overloaded",
                f"{task.streams} streams are running for {task.name} (max_queue); retry shortly",
                {"Retry-After": "1"},
            )
        text = replace_surrogates(body.texts)[0]
        events = _StreamedGeneration(task.flow(key), text, asyncio.get_running_loop())
        task.streams += 1
        try:
            first = await events.next(self.config.request_timeout_s)
        except BaseException as exc:
            task.streams -= 1
            await events.close()
            if isinstance(exc, TimeoutError):
                raise ApiError(
                    504,
                    "timeout",
                    f"no answer within {self.config.request_timeout_s:g} s (request_timeout_s)",
                ) from None
            if isinstance(exc, (ValueError, TypeError)):
                raise ApiError(422, "invalid_input", str(exc), fields=["texts"]) from None
            if isinstance(exc, Exception):
                logger.error("%s: the model raised on a streamed request", task.name, exc_info=exc)
                raise ApiError(
                    500, "model_error", f"the {task.name} model failed on this request ({type(exc).__name__})"
                ) from None
            raise

        async def sse():
            pieces: list[str] = []
            try:
                piece = first
                while piece is not None:
                    pieces.append(piece)
                    yield _sse("message", {"text": piece})
                    piece = await events.next(self.config.request_timeout_s)
                result = {"text": text, "generated": ["".join(pieces)]}
                self.metrics.texts.labels(task.name).inc(1)
                yield _sse("done", {"task": task.name, "results": [result]})
            except TimeoutError:
                message = f"no new text within {self.config.request_timeout_s:g} s (request_timeout_s)"
                yield _sse("error", {"error": {"code": "timeout", "message": message}})
            except Exception as exc:
                logger.error("%s: the model raised during a stream", task.name, exc_info=exc)
                message = f"the {task.name} model failed on this request ({type(exc).__name__})"
                yield _sse("error", {"error": {"code": "model_error", "message": message}})
            finally:  # also on a client that went away (the response task is cancelled): stop the generation
                task.streams -= 1
                await events.close()

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _sse(event: str, data: Any) -> bytes:
    head = b"" if event == "message" else f"event: {event}\n".encode()
    return head + b"data: " + encode_json(data) + b"\n\n"


class _StreamedGeneration:
    """Taskflow's stream iterator consumed on a thread of its own, its pieces handed to the event loop. A
    consumer that stops (client gone, timeout) sets `stopping`; the thread then closes the iterator, which stops
    the generation, from the thread that runs it."""

    _END = object()

    def __init__(self, flow: Taskflow, text: str, loop: asyncio.AbstractEventLoop):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.loop = loop
        self.stopping = False
        self.thread = threading.Thread(
            target=self._consume, args=(flow, text), name="serve-stream", daemon=True
        )
        self.thread.start()

    def _consume(self, flow: Taskflow, text: str) -> None:
        pieces = None
        try:
            pieces = flow(text)
            for piece in pieces:
                if self.stopping:
                    break
                self.loop.call_soon_threadsafe(self.queue.put_nowait, piece)
            else:
                self.loop.call_soon_threadsafe(self.queue.put_nowait, self._END)
        except BaseException as exc:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, exc)
        finally:
            if pieces is not None:
                pieces.close()

    async def next(self, timeout: float) -> str | None:
        """The next piece; None at the end; the generation's exception; TimeoutError after `timeout` s."""
        item = await asyncio.wait_for(self.queue.get(), timeout)
        if item is self._END:
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    async def close(self) -> None:
        self.stopping = True
        await asyncio.to_thread(self.thread.join)


# ------------------------------------------------------------------------------------------- middleware
class _BodyTooLarge(StarletteHTTPException):
    """Raised by the wrapped `receive` once a streamed body passes the limit; an HTTPException, so that FastAPI
    passes it through its body parsing to the exception handlers (413) instead of answering 400."""

    def __init__(self, limit: int):
        super().__init__(413, f"the request body exceeds {limit} bytes", {"Connection": "close"})


class GuardMiddleware:
    """Pure ASGI, in front of /v1/: checks the API key, refuses bodies over `max_body_bytes` (Content-Length or
    streamed) with 413 before any parsing, and records status, latency and in-flight count of task requests."""

    def __init__(self, app: Any, state: ServingState):
        self.app = app
        self.state = state

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_checked(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._guarded(scope, receive, send_checked)
        except Exception as exc:
            # Starlette would answer a plain-text 500 and re-raise, and uvicorn would then drop the connection,
            # with whatever request the client sends next on it: answer JSON here and keep the connection.
            if started:
                raise
            logger.error("%s %s: the server failed", scope["method"], scope["path"], exc_info=exc)
            error = ApiError(
                500, "internal_error", f"the server failed on this request ({type(exc).__name__})"
            )
            await error.response(scope)(scope, receive, send_checked)

    async def _guarded(self, scope: dict, receive: Any, send: Any) -> None:
        if not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        state, limit = self.state, self.state.config.max_body_bytes
        headers = dict(scope["headers"])
        # The key is checked before the body is read or parsed: without it a caller learns nothing.
        denied = _auth_error(state.config.api_key, headers.get(b"authorization"), headers.get(b"x-api-key"))
        if scope["method"] != "POST":
            await (denied.response(scope) if denied else self.app)(scope, receive, send)
            return
        served = state.routes.get(scope["path"][4:])
        # bounded label values
        label = (
            served.name if served is not None else "openai" if is_openai_path(scope["path"]) else "unknown"
        )
        metrics = state.metrics
        if served is not None:
            state.arrive(scope, served.name)
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_wrapper(message: dict) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status, response_started = message["status"], True
            await send(message)

        received = 0

        async def receive_wrapper() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge(limit)
            return message

        metrics.in_flight.inc()
        try:
            length = headers.get(b"content-length")
            if denied is not None:
                await denied.response(scope)(scope, receive, send_wrapper)
            elif length is not None and length.isdigit() and int(length) > limit:
                await self._too_large(scope, receive, send_wrapper, limit)
            else:
                try:
                    await self.app(scope, receive_wrapper, send_wrapper)
                except _BodyTooLarge:
                    if response_started:
                        raise
                    await self._too_large(scope, receive, send_wrapper, limit)
        except Exception:
            status = 500  # answered by __call__
            raise
        finally:
            state.arrived(scope)
            metrics.in_flight.dec()
            metrics.requests.labels(label, str(status)).inc()
            metrics.latency.labels(label).observe(time.perf_counter() - started)

    @staticmethod
    async def _too_large(scope: dict, receive: Any, send: Any, limit: int) -> None:
        error = ApiError(
            413, "body_too_large", f"the request body exceeds {limit} bytes", {"Connection": "close"}
        )
        await error.response(scope)(scope, receive, send)


# ------------------------------------------------------------------------------------------------- app
def _field(loc: tuple) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


def create_app(config: ServeConfig) -> FastAPI:
    """The FastAPI app serving `config.tasks`; models load in the background after startup (see /ready)."""
    state = ServingState(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.start()
        try:
            yield
        finally:
            await state.stop()

    app = FastAPI(
        title="ernie-zoo serve",
        version=__version__,
        description=__doc__.split("\n\n", 1)[0] + "\n\nServed tasks: " + ", ".join(state.tasks),
        lifespan=lifespan,
    )
    app.state.serving = state
    app.add_middleware(GuardMiddleware, state=state)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response(request.scope)

    @app.exception_handler(OpenAIError)
    async def _openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
        status, body = openai_error(exc.status, exc.code, exc.message, exc.param)
        return ErrorResponse(body, status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        content_type = request.headers.get("content-type", "")
        if "json" not in content_type:
            return ApiError(
                415,
                "unsupported_media_type",
                f"send the body as JSON with Content-Type: application/json (got {content_type or 'none'!r})",
            ).response(request.scope)
        if any(e.get("type") == "missing" and tuple(e["loc"]) == ("body",) for e in errors):
            return ApiError(
                422, "invalid_request", 'the body is empty; send {"texts": [...]}', fields=["body"]
            ).response(request.scope)
        if any(e.get("type") == "json_invalid" for e in errors):
            e = next(e for e in errors if e.get("type") == "json_invalid")
            detail = (e.get("ctx") or {}).get("error", "")
            pos = e["loc"][-1] if isinstance(e["loc"][-1], int) else "?"
            return ApiError(
                422, "malformed_json", f"the body is not valid JSON ({detail} at position {pos})"
            ).response(request.scope)
        fields = [_field(tuple(e["loc"])) for e in errors]
        message = "; ".join(f"{f}: {e['msg']}" for f, e in zip(fields, errors))
        return ApiError(422, "invalid_request", message, fields=fields).response(request.scope)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        cause = exc.__cause__
        if exc.status_code == 400 and cause is not None:  # FastAPI could not parse the JSON body
            if isinstance(cause, UnicodeDecodeError):
                detail = f"not valid UTF-8: byte 0x{cause.object[cause.start]:02x} at position {cause.start}"
            elif isinstance(cause, RecursionError):
                detail = "nested too deeply to parse"
            else:
                detail = f"{type(cause).__name__}: {cause}"
            return ApiError(422, "malformed_json", f"the body is not valid JSON ({detail})").response(
                request.scope
            )
        codes = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        code = codes.get(exc.status_code, "http_error")
        return ApiError(exc.status_code, code, str(exc.detail), dict(exc.headers or {})).response(
            request.scope
        )

    dependencies = [Depends(_api_key_check(config.api_key))] if config.api_key else []

    @app.get("/health", tags=["operations"])
    async def health() -> JSONResponse:
        """Liveness: 200 while the process serves HTTP; 503 when a model failed to load (restart the process)."""
        if state.load_error is not None:
            return JSONResponse({"status": "failed", "error": state.load_error}, 503)
        return JSONResponse({"status": "ok"})

    @app.get("/ready", tags=["operations"])
    async def ready() -> JSONResponse:
        """Readiness: 200 once every model is loaded and warmed up; 503 while loading, after a load failure and
        once shutdown began (take this replica out of the load balancer)."""
        if state.ready:
            return JSONResponse({"ready": True, "tasks": list(state.tasks)})
        reason = "shutting_down" if state.draining else "load_failed" if state.load_error else "loading"
        return JSONResponse({"ready": False, "reason": reason}, 503, {"Retry-After": "1"})

    @app.get("/metrics", tags=["operations"])
    async def metrics() -> Response:
        """Prometheus metrics (text exposition format)."""
        return Response(state.metrics.render(), media_type=state.metrics.content_type)

    @app.get("/v1/tasks", tags=["tasks"], dependencies=dependencies)
    async def tasks() -> JSONResponse:
        """The served tasks with their aliases, options and model."""
        info = list_tasks()
        return JSONResponse(
            {
                name: {
                    "aliases": info[name]["aliases"],
                    "options": info[name]["options"],
                    "model": task.model_path,
                }
                for name, task in state.tasks.items()
            }
        )

    for task in state.tasks.values():
        for path_name in (task.name, *task.cls.aliases):
            app.post(
                f"/v1/{path_name}",
                tags=["tasks"],
                name=path_name,
                summary=f"{task.name}: results for a list of texts",
                description=_describe(task),
                response_model=PredictResponse,
                response_class=ResultsResponse,
                dependencies=dependencies,
                include_in_schema=path_name == task.name,
                responses={c: {"description": d} for c, d in _ERROR_DOCS.items()},
            )(_endpoint(state, task))

    add_routes(app, state, dependencies)

    @app.post("/v1/{task}", include_in_schema=False, dependencies=dependencies)
    async def unknown_task(task: str) -> None:
        raise ApiError(
            404, "unknown_task", f"task {task!r} is not served here; served tasks: {', '.join(state.tasks)}"
        )

    return app


_ERROR_DOCS = {
    400: "not parseable as HTTP (e.g. a bad Content-Length)",
    401: "missing or wrong API key",
    408: "the headers or the body came too slowly",
    413: "too many texts or characters",
    422: "malformed JSON, wrong types, unknown or invalid options (`fields` names them)",
    500: "the model or the server failed on this request",
    503: "loading, queue full (Retry-After), shutting down or too many connections",
    504: "no answer within the request timeout",
}


def _endpoint(state: ServingState, task: ServedTask):
    streams = "stream" in {f.name for f in dataclasses.fields(task.cls.Options)}

    async def predict(body: PredictRequest, request: Request) -> Response:
        if streams and body.options.get("stream") is True:
            return await state.stream(task, body, request.scope)
        return ResultsResponse(await state.predict(task, body, request.scope))

    return predict


def _describe(task: ServedTask) -> str:
    usage = task.cls.usage().split("\n\n")[0]
    options = (task.cls.Options.__doc__ or "").strip()
    return f"{usage}\n\nOptions (`options` in the body):\n\n```\n{options}\n```"


_BEARER = HTTPBearer(auto_error=False, description="`Authorization: Bearer KEY`")
_KEY_HEADER = APIKeyHeader(name="X-API-Key", auto_error=False, description="`X-API-Key: KEY`")


def _auth_error(
    expected: str | None, authorization: bytes | None, x_api_key: bytes | None
) -> ApiError | None:
    """None when no key is configured or the request carries it (Bearer or X-API-Key); else the 401."""
    if expected is None:
        return None
    given = x_api_key
    if authorization is not None:
        scheme, _, credentials = authorization.partition(b" ")
        if scheme.lower() == b"bearer":
            given = credentials.strip()
    if given is not None and hmac.compare_digest(given, expected.encode()):
        return None
    return ApiError(
        401,
        "unauthorized",
        "a valid API key is required (Authorization: Bearer KEY or X-API-Key: KEY)",
        {"WWW-Authenticate": "Bearer"},
    )


def _api_key_check(expected: str):
    """The same check as a FastAPI dependency, so that /docs shows the two ways to pass the key (the middleware
    has already refused requests without it)."""

    async def check(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
        key: Annotated[str | None, Depends(_KEY_HEADER)],
    ) -> None:
        bearer = f"Bearer {credentials.credentials}".encode() if credentials is not None else None
        denied = _auth_error(expected, bearer, key.encode() if key is not None else None)
        if denied is not None:
            raise denied

    return check


__all__ = [
    "ApiError",
    "PredictRequest",
    "PredictResponse",
    "ServedTask",
    "ServingState",
    "begin_draining",
    "create_app",
]
