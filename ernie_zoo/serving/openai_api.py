"""OpenAI-compatible endpoints, next to the task endpoints (which are unchanged):

    POST /v1/chat/completions   messages -> the served text_generation model's answer (stream=true: server-sent
                                `chat.completion.chunk` events, then `data: [DONE]`)
    POST /v1/completions        prompt (a string or a list of strings) -> its continuation
    POST /v1/embeddings         input (a string or a list of strings) -> feature_extraction's embeddings, unit length
    GET  /v1/models             the served models (`model` in a request: one of these ids, or the task's name)

Supported request fields: `model`, `messages` / `prompt` / `input`, `max_tokens` (chat also
`max_completion_tokens`), `temperature`, `top_p`, `n`, `stop` (a string or up to 4), `seed`, `stream`,
`stream_options.include_usage`, `user` (ignored), `encoding_format` ("float" or "base64"). A field that would change
the answer and is not supported (`logprobs`, `tools`, penalties other than 0, `echo`, `dimensions`, ...) is refused
with 400 naming it, never silently ignored. Every error is OpenAI's shape:
`{"error": {"message", "type", "param", "code"}}` (400 where the task endpoints answer 422).

Decoding: without `temperature` and `top_p` the model's own decoding is used, greedy for the zoo's models (OpenAI's
default is temperature 1, which makes a 7M-parameter model ramble); `temperature: 0` is greedy too; otherwise
sampling with the given temperature / top_p, reproducible with `seed`. The prompt of a chat is the tokenizer's chat
template (`ernie-finetune --task instruction` saves one), or ERNIE 4.5's `User: ... / Assistant: ...` format
(`ernie_zoo.models.decoder.CHAT_TEMPLATE`) for a tokenizer without one. `usage` counts prompt tokens (the template
included) and generated tokens up to the returned text's end.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from ernie_zoo.models.decoder import chat_template_for
from ernie_zoo.taskflow.text import clean_surrogates
from ernie_zoo.taskflow.text_generation import TextGeneration

from .batching import QueueFull, ShuttingDown
from .engines import Decoding
from .responses import ResultsResponse, encode_json

if TYPE_CHECKING:  # app.py builds the server from its ServingState (importing app here would be a cycle)
    ServedTask = ServingState = Any

OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"})
MAX_STOP = 4  # OpenAI's limit on stop sequences
MAX_N = 16
DEFAULT_COMPLETION_TOKENS = 16  # /v1/completions' max_tokens default (OpenAI's)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
}


def is_openai_path(path: str) -> bool:
    return path in OPENAI_PATHS or path.startswith("/v1/models/")


def openai_error(status: int, code: str, message: str, param: str | None = None) -> tuple[int, dict]:
    """(status, body) in OpenAI's error shape; the task endpoints' 422 is OpenAI's 400."""
    status = 400 if status == 422 else status
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}


# ---------------------------------------------------------------------------------------------- requests
class _Request(BaseModel):
    # Unknown fields are accepted (clients send new ones all the time) and checked against UNSUPPORTED.
    model_config = ConfigDict(extra="allow")
    model: StrictStr = Field(description="a served model id (GET /v1/models) or the task's name")
    user: str | None = None


class TextPart(BaseModel):
    type: Literal["text"]
    text: StrictStr


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant"]
    content: StrictStr | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Generation(_Request):
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=MAX_N)
    stop: StrictStr | list[StrictStr] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)


class ChatRequest(_Generation):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)


class CompletionRequest(_Generation):
    prompt: StrictStr | list[StrictStr]


class EmbeddingRequest(_Request):
    input: StrictStr | list[StrictStr]
    encoding_format: Literal["float", "base64"] = "float"


# Fields that change the answer and that this server does not implement: refused (400, param names the field)
# unless sent with the value that means "off".
UNSUPPORTED: dict[str, Any] = {
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logprobs": False,
    "top_logprobs": 0,
    "logit_bias": {},
    "tools": [],
    "functions": [],
    "response_format": {"type": "text"},
    "echo": False,
    "best_of": 1,
    "suffix": None,
    "dimensions": None,
}


class OpenAIError(Exception):
    def __init__(self, status: int, code: str, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


def _check_unsupported(body: BaseModel) -> None:
    for name, value in (body.model_extra or {}).items():
        if name in UNSUPPORTED and value not in (None, UNSUPPORTED[name]):
            raise OpenAIError(400, "unsupported_parameter", f"{name} is not supported by this server", name)
        if name in ("tool_choice", "function_call") and value not in (None, "none"):
            raise OpenAIError(400, "unsupported_parameter", f"{name} is not supported by this server", name)


# ---------------------------------------------------------------------------------------------- helpers
@dataclass
class Choice:
    """One continuation being produced: its ids so far, the text sent, why it ended."""

    index: int
    ids: list[int]
    sent: str = ""
    finish_reason: str | None = None


class TextOut:
    """Token ids -> text for one continuation, with the end token and stop strings applied; `push(new_ids)` returns
    the text that can be sent now (held back: an unfinished character, a possible beginning of a stop string)."""

    def __init__(self, generator: TextGeneration, stop: list[str], max_new_tokens: int):
        self.generator, self.stop, self.max_new_tokens = generator, stop, max_new_tokens
        self.ids: list[int] = []
        self.sent = ""
        self.finish_reason: str | None = None
        self.used = 0  # generated tokens up to the returned text's end

    def push(self, new: list[int]) -> str:
        if self.finish_reason is not None:
            return ""
        eos = self.generator.eos_id
        for token in new:
            if eos is not None and token == eos:
                self.finish_reason = "stop"
                break
            self.ids.append(token)
        self.used = len(self.ids)
        text = self.generator.decode(self.ids)
        for stop in self.stop:
            at = text.find(stop)
            if at >= 0:
                text, self.finish_reason = text[:at], "stop"
        if self.finish_reason is None and len(self.ids) >= self.max_new_tokens:
            self.finish_reason = "length"
        if self.finish_reason is None:
            text = text.rstrip("\ufffd")  # an unfinished multi-byte character: wait for its last byte
            for stop in self.stop:  # hold back a tail that may become a stop string
                for k in range(min(len(stop) - 1, len(text)), 0, -1):
                    if text.endswith(stop[:k]):
                        text = text[:-k]
                        break
        if not text.startswith(self.sent):  # a decoder that rewrote earlier text: never send a piece twice
            raise RuntimeError("the tokenizer's decoding changed text already streamed; use stream=false")
        piece, self.sent = text[len(self.sent) :], text if len(text) > len(self.sent) else self.sent
        return piece

    def finish(self) -> str:
        """The rest once the generation ended (the engine stops at max_new_tokens or the end token)."""
        if self.finish_reason is None:
            self.finish_reason = "length" if len(self.ids) >= self.max_new_tokens else "stop"
        text = self.generator.decode(self.ids)
        for stop in self.stop:
            at = text.find(stop)
            if at >= 0:
                text = text[:at]
        piece = text[len(self.sent) :] if text.startswith(self.sent) else ""
        self.sent += piece
        return piece


def _stops(stop: str | list[str] | None) -> list[str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOP:
        raise OpenAIError(
            400, "invalid_value", f"stop takes at most {MAX_STOP} sequences, got {len(stops)}", "stop"
        )
    if any(not s for s in stops):
        raise OpenAIError(400, "invalid_value", "a stop sequence must not be empty", "stop")
    return stops


def _sse(data: Any) -> bytes:
    return b"data: " + encode_json(data) + b"\n\n"


# ------------------------------------------------------------------------------------------------ the API
class OpenAIServer:
    """The OpenAI endpoints over the served text_generation and feature_extraction tasks."""

    def __init__(self, state: ServingState):
        self.state = state
        self.generation: ServedTask | None = state.tasks.get("text_generation")
        self.embedding: ServedTask | None = state.tasks.get("feature_extraction")

    # -- models
    def model_ids(self, task: ServedTask | None) -> list[str]:
        if task is None:
            return []
        ids = [task.name]
        if task.model_path:
            ids.insert(0, task.model_path.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1])
        return ids

    def models(self) -> dict[str, Any]:
        created = int(self.state.started)
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_ids(task)[0],
                    "object": "model",
                    "created": created,
                    "owned_by": "ernie-zoo",
                }
                for task in (self.generation, self.embedding)
                if task is not None
            ],
        }

    def _task_for(self, model: str, task: ServedTask | None, what: str) -> ServedTask:
        self.state.check_serving()
        if task is None:
            raise OpenAIError(
                404,
                "model_not_found",
                f"no model for {what} is served here: start the server with --task {what}",
                "model",
            )
        if model not in self.model_ids(task):
            served = ", ".join(self.model_ids(task))
            raise OpenAIError(
                404, "model_not_found", f"the model {model!r} is not served here ({served})", "model"
            )
        return task

    # -- generation
    def _decoding(self, body: _Generation, max_tokens: int) -> Decoding:
        sampling = (body.temperature is not None and body.temperature > 0) or (
            body.temperature is None and body.top_p is not None
        )
        return Decoding(
            max_new_tokens=max_tokens,
            sampling=sampling,
            temperature=body.temperature if body.temperature is not None else 1.0,
            top_p=body.top_p if body.top_p is not None else 1.0,
            seed=body.seed,
            n=body.n,
        )

    def _generator(self, decoding: Decoding) -> TextGeneration:
        try:
            return self.state.engine.generator(decoding)  # type: ignore[union-attr]
        except (ValueError, TypeError) as exc:
            param = "max_tokens" if "max_new_tokens" in str(exc) else None
            raise OpenAIError(
                400, "invalid_value", str(exc).replace("max_new_tokens", "max_tokens"), param
            ) from None

    def _check_prompt(self, generator: TextGeneration, ids: list[int], decoding: Decoding) -> list[int]:
        if len(ids) > generator.prompt_budget:
            raise OpenAIError(
                400,
                "context_length_exceeded",
                f"the prompt has {len(ids)} tokens and max_tokens is {decoding.max_new_tokens}: together they exceed "
                f"the model's {generator.prompt_budget + decoding.max_new_tokens} positions",
                "messages",
            )
        return ids

    def chat_prompt(self, generator: TextGeneration, messages: list[Message]) -> list[int]:
        tok = generator.tokenizer
        turns = [
            {"role": "system" if m.role == "developer" else m.role, "content": clean_surrogates(m.text())}
            for m in messages
        ]
        with generator.loaded.lock:
            template = chat_template_for(tok)
            text = tok.apply_chat_template(
                turns, chat_template=template, add_generation_prompt=True, tokenize=False
            )
            return list(tok(text, add_special_tokens=False)["input_ids"])

    def completion_prompt(self, generator: TextGeneration, prompt: str) -> list[int]:
        tok = generator.tokenizer
        with generator.loaded.lock:
            enc = tok(
                [clean_surrogates(prompt)],
                add_special_tokens=True,
                return_special_tokens_mask=True,
                return_attention_mask=False,
                split_special_tokens=True,
                verbose=False,
            )
        ids, special = list(enc["input_ids"][0]), list(enc["special_tokens_mask"][0])
        while generator.wordpiece and len(ids) > 1 and special[-1] and ids[-1] == tok.sep_token_id:
            ids.pop()  # BERT-style prompt: [CLS] text, without the closing [SEP] (as text_generation does)
            special.pop()
        if not ids:
            if tok.bos_token_id is None:
                raise OpenAIError(400, "invalid_value", "the prompt is empty", "prompt")
            ids = [tok.bos_token_id]
        return ids

    async def chat(self, body: ChatRequest) -> Any:
        _check_unsupported(body)
        task = self._task_for(body.model, self.generation, "text_generation")
        self.state.check_limits([m.text() for m in body.messages])
        default_tokens = task.flow(task.default_key)._task.options.max_new_tokens  # type: ignore[attr-defined]
        max_tokens = body.max_completion_tokens or body.max_tokens or default_tokens
        decoding = self._decoding(body, max_tokens)
        generator = self._generator(decoding)
        stops = _stops(body.stop)
        prompt = self._check_prompt(generator, self.chat_prompt(generator, body.messages), decoding)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return self._stream(
                head, "chat.completion.chunk", generator, [prompt], decoding, stops, include_usage
            )
        (outs,) = await self._generate(generator, [prompt], decoding, stops)
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": out.sent},
                "logprobs": None,
                "finish_reason": out.finish_reason,
            }
            for i, out in enumerate(outs)
        ]
        return {**head, "object": "chat.completion", "choices": choices, "usage": _usage([prompt], [outs])}

    async def completions(self, body: CompletionRequest) -> Any:
        _check_unsupported(body)
        self._task_for(body.model, self.generation, "text_generation")
        decoding = self._decoding(body, body.max_tokens or DEFAULT_COMPLETION_TOKENS)
        generator = self._generator(decoding)
        stops = _stops(body.stop)
        texts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if not texts:
            raise OpenAIError(400, "invalid_value", "prompt is an empty list", "prompt")
        self.state.check_limits(texts)
        prompts = [
            self._check_prompt(generator, self.completion_prompt(generator, t), decoding) for t in texts
        ]
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return self._stream(head, "text_completion", generator, prompts, decoding, stops, include_usage)
        outs = await self._generate(generator, prompts, decoding, stops)
        choices = [
            {
                "index": p * decoding.n + i,
                "text": out.sent,
                "logprobs": None,
                "finish_reason": out.finish_reason,
            }
            for p, prompt_outs in enumerate(outs)
            for i, out in enumerate(prompt_outs)
        ]
        return {**head, "object": "text_completion", "choices": choices, "usage": _usage(prompts, outs)}

    async def _generate(
        self, generator: TextGeneration, prompts: list[list[int]], decoding: Decoding, stops: list[str]
    ) -> list[list[TextOut]]:
        engine = self.state.engine
        assert engine is not None
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(engine.generate(p, decoding) for p in prompts)),
                self.state.config.request_timeout_s,
            )
        except QueueFull as exc:
            raise OpenAIError(503, "overloaded", str(exc)) from None
        except ShuttingDown as exc:
            raise OpenAIError(503, "shutting_down", str(exc)) from None
        except TimeoutError:
            raise OpenAIError(
                504,
                "timeout",
                f"no answer within {self.state.config.request_timeout_s:g} s (request_timeout_s)",
            ) from None
        outs = []
        for sequences in results:
            row = []
            for ids in sequences:
                out = TextOut(generator, stops, decoding.max_new_tokens)
                out.push(list(ids))
                out.finish()
                row.append(out)
            outs.append(row)
        return outs

    def _stream(
        self,
        head: dict[str, Any],
        kind: str,
        generator: TextGeneration,
        prompts: list[list[int]],
        decoding: Decoding,
        stops: list[str],
        include_usage: bool,
    ) -> StreamingResponse:
        """Server-sent events: chunks as the text grows, one per choice and step, then [DONE]. A greedy request's n
        choices are one generation sent n times; sampled choices run one after the other (seed + i each)."""
        engine = self.state.engine
        assert engine is not None
        if self.state.streams >= self.state.config.max_queue:
            message = f"{self.state.streams} streams are running (max_queue); retry shortly"
            raise OpenAIError(503, "overloaded", message)
        chat = kind == "chat.completion.chunk"
        state = self.state

        def chunk(index: int, piece: str | None, finish: str | None, role: bool = False) -> bytes:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
                if piece:
                    delta["content"] = piece
                choice: dict[str, Any] = {
                    "index": index,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": finish,
                }
            else:
                choice = {"index": index, "text": piece or "", "logprobs": None, "finish_reason": finish}
            body: dict[str, Any] = {**head, "object": kind, "choices": [choice]}
            if include_usage:
                body["usage"] = None
            return _sse(body)

        async def run_one(prompt: list[int], d: Decoding, indices: list[int]) -> AsyncIterator[bytes]:
            out = TextOut(generator, stops, d.max_new_tokens)
            stream = engine.stream(prompt, d)
            try:
                async for new in stream:
                    piece = out.push(new)
                    if piece:
                        for i in indices:
                            yield chunk(i, piece, None)
                    if out.finish_reason is not None:
                        break  # a stop string or the end token: closing the stream ends the generation
            finally:
                await stream.aclose()
            rest = out.finish()
            for i in indices:
                yield chunk(i, rest or None, out.finish_reason)
            used.append(out.used)

        used: list[int] = []

        async def events() -> AsyncIterator[bytes]:
            state.streams += 1
            try:
                for p, prompt in enumerate(prompts):
                    base = p * decoding.n
                    if chat:
                        for i in range(decoding.n):
                            yield chunk(base + i, None, None, role=True)
                    if not decoding.sampling:
                        async for event in run_one(
                            prompt,
                            Decoding(**{**decoding.__dict__, "n": 1}),
                            [base + i for i in range(decoding.n)],
                        ):
                            yield event
                        used.extend([used[-1]] * (decoding.n - 1))
                        continue
                    for i in range(decoding.n):
                        seed = None if decoding.seed is None else decoding.seed + i
                        one = Decoding(**{**decoding.__dict__, "n": 1, "seed": seed})
                        async for event in run_one(prompt, one, [base + i]):
                            yield event
                if include_usage:
                    prompt_tokens = sum(len(p) for p in prompts)
                    usage = {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": sum(used),
                        "total_tokens": prompt_tokens + sum(used),
                    }
                    yield _sse({**head, "object": kind, "choices": [], "usage": usage})
                yield b"data: [DONE]\n\n"
            except Exception as exc:  # the stream has begun: report in-band, as OpenAI does
                if isinstance(exc, TimeoutError):
                    status, err = openai_error(504, "timeout", "no new text within request_timeout_s")
                else:
                    status, err = openai_error(
                        500, "model_error", f"the model failed on this request ({type(exc).__name__})"
                    )
                yield _sse(err)
            finally:
                state.streams -= 1

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    # -- embeddings
    async def embeddings(self, body: EmbeddingRequest) -> Any:
        _check_unsupported(body)
        task = self._task_for(body.model, self.embedding, "feature_extraction")
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts:
            raise OpenAIError(400, "invalid_value", "input is an empty list", "input")
        if any(not t for t in texts):
            raise OpenAIError(400, "invalid_value", "input must not contain empty strings", "input")
        self.state.check_limits(texts)
        key = task.options_key({"normalize": True})
        try:
            results = await asyncio.wait_for(
                task.batcher.submit(key, texts), self.state.config.request_timeout_s
            )
        except QueueFull as exc:
            raise OpenAIError(503, "overloaded", str(exc)) from None
        except TimeoutError:
            raise OpenAIError(504, "timeout", "no answer within request_timeout_s") from None
        tokenizer = task.flow(key)._task.loaded.tokenizer  # type: ignore[attr-defined]
        tokens = sum(len(ids) for ids in tokenizer(texts, verbose=False)["input_ids"])
        data = []
        for i, result in enumerate(results):
            vector = np.asarray(result["embedding"], dtype=np.float32)
            embedding: Any = (
                base64.b64encode(vector.tobytes()).decode("ascii")
                if body.encoding_format == "base64"
                else vector.tolist()
            )
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        return {
            "object": "list",
            "data": data,
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _usage(prompts: list[list[int]], outs: list[list[TextOut]]) -> dict[str, int]:
    prompt_tokens = sum(len(p) for p in prompts)
    completion = sum(out.used for row in outs for out in row)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


def add_routes(app: FastAPI, state: ServingState, dependencies: list) -> None:
    """Register the OpenAI endpoints on `app` (before the `/v1/{task}` catch-all)."""
    server = OpenAIServer(state)

    def answer(result: Any) -> Any:
        return result if isinstance(result, StreamingResponse) else ResultsResponse(result)

    @app.get("/v1/models", tags=["openai"], dependencies=dependencies)
    async def models() -> Any:
        """OpenAI: the served models."""
        return ResultsResponse(server.models())

    @app.post("/v1/chat/completions", tags=["openai"], dependencies=dependencies)
    async def chat_completions(body: ChatRequest, request: Request) -> Any:
        """OpenAI chat completions over the served text_generation model."""
        return answer(await server.chat(body))

    @app.post("/v1/completions", tags=["openai"], dependencies=dependencies)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        """OpenAI (legacy) completions over the served text_generation model."""
        return answer(await server.completions(body))

    @app.post("/v1/embeddings", tags=["openai"], dependencies=dependencies)
    async def embeddings(body: EmbeddingRequest) -> Any:
        """OpenAI embeddings from the served feature_extraction model (mean pooling, unit length)."""
        return ResultsResponse(await server.embeddings(body))


__all__ = ["OPENAI_PATHS", "OpenAIError", "OpenAIServer", "add_routes", "is_openai_path", "openai_error"]
