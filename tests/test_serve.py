"""`ernie-zoo serve`: every endpoint, every limit and bad input, merged batches (order, options, size), timeouts,
a failing request among merged ones, the API key, batch-size invariance over HTTP with the shipped sentiment
and NER models, the CLI arguments, graceful shutdown of a real uvicorn process on SIGTERM, and a real uvicorn
process under load and bad input (lone surrogates, malformed and oversize bodies, bad HTTP, slow clients, too many
connections) on keep-alive connections.

Most tests serve `serve_test_echo`, a model-free task defined here whose forward pass can be held at a gate, so
that requests pile up in the queue and the batches they form are known exactly.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import httpx
import pytest
from fastapi.testclient import TestClient

from ernie_zoo.serving import ServeConfig, create_app
from ernie_zoo.serving.app import begin_draining, encode_json
from ernie_zoo.taskflow import TASKS, Taskflow
from ernie_zoo.taskflow.task import ALIASES, Result, Task, register_task

ECHO = "serve_test_echo"
SENTENCES = Path(__file__).parent / "data" / "zh_sentences.txt"


# ------------------------------------------------------------------------------------------- a fake task
@dataclass
class EchoOptions:
    """upper: answer in upper case. pause: seconds forward sleeps (for the shutdown test)."""

    upper: bool = False
    pause: float = 0.0


@dataclass
class EchoResult(Result):
    text: str
    echo: str
    length: int


class Echo(Task):
    """Model-free: `echo` is the text (upper-cased with upper=True). A text containing "boom" raises
    RuntimeError (a model failure), "bad-input" ValueError (Taskflow's bad-input contract); the text
    "unjsonable" gets an echo that JSON cannot encode (a failure after the model, while answering)."""

    auto_class = None
    Options = EchoOptions
    calls: ClassVar[list[list[str]]] = []  # the texts of every forward call (one per model batch)
    gate: ClassVar[threading.Event] = threading.Event()  # forward waits here
    load_gate: ClassVar[threading.Event] = threading.Event()  # __init__ (model loading) waits here

    def __init__(self, settings, options, loaded=None):
        super().__init__(settings, options, loaded)
        assert Echo.load_gate.wait(10)

    def preprocess(self, texts: list[str]) -> list[str]:
        return list(texts)

    def forward(self, texts: list[str]) -> list[str]:
        Echo.calls.append(list(texts))
        assert Echo.gate.wait(10)
        time.sleep(self.options.pause)
        if any("boom" in t for t in texts):
            raise RuntimeError("the model broke")
        if any("bad-input" in t for t in texts):
            raise ValueError("this text is not accepted")
        return [object() if t == "unjsonable" else t.upper() if self.options.upper else t for t in texts]

    def postprocess(self, texts: list[str], outputs: list[str]) -> list[EchoResult]:
        return [EchoResult(t, o, len(t)) for t, o in zip(texts, outputs)]


def register_echo() -> None:
    """Register the echo task (also called by the uvicorn subprocess of the SIGTERM test)."""
    if ECHO not in TASKS:
        register_task(ECHO, aliases=("serve_test_alias",))(Echo)


@pytest.fixture(scope="module", autouse=True)
def _echo_task():
    """The echo task exists only while this module's tests run: other modules list the registered tasks."""
    register_echo()
    yield
    TASKS.pop(ECHO, None)
    ALIASES.pop("serve_test_alias", None)


@pytest.fixture(autouse=True)
def _open_gates():
    Echo.calls.clear()
    Echo.gate.set()
    Echo.load_gate.set()
    yield
    Echo.gate.set()
    Echo.load_gate.set()


def wait_for(condition, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@contextmanager
def serving(tasks=(ECHO,), wait_ready: bool = True, **options: Any):
    app = create_app(ServeConfig(tasks=list(tasks), **options))
    with TestClient(app) as client:
        client.state = app.state.serving  # type: ignore[attr-defined]
        if wait_ready:
            wait_for(lambda: client.get("/ready").status_code == 200, what="/ready")
            Echo.calls.clear()  # forget the warm-up call
        yield client


def post(client, texts, options=None, task=ECHO, **kwargs) -> httpx.Response:
    body: dict[str, Any] = {"texts": texts}
    if options is not None:
        body["options"] = options
    # json.dumps escapes non-ASCII, so that a text with a lone surrogate can be sent (as "\\ud800")
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
    return client.post(f"/v1/{task}", content=json.dumps(body).encode(), headers=headers, **kwargs)


def error(response: httpx.Response) -> dict:
    return response.json()["error"]


@contextmanager
def held(client, task=ECHO, first_status=200):
    """Hold the model: a first request enters forward and waits at the gate; requests sent meanwhile queue up.
    Yields (queued texts, submit(texts, options) -> Future[Response]), which queues requests in call order."""
    Echo.gate.clear()
    pool = ThreadPoolExecutor(16)
    first = pool.submit(post, client, ["first"])
    wait_for(lambda: len(Echo.calls) == 1, what="the first batch to start")
    batcher = client.state.tasks[task].batcher

    def submit(texts, options=None, **kwargs):
        """Send a request from a thread and wait until it is queued, so that requests queue in call order."""
        before = batcher.queued
        future = pool.submit(post, client, texts, options, **kwargs)
        wait_for(lambda: batcher.queued == before + len(texts) or future.done(), what="the request to queue")
        return future

    try:
        yield (lambda: batcher.queued), submit
    finally:
        Echo.gate.set()
        assert first.result(10).status_code == first_status
        pool.shutdown(wait=True)


def metric(client, name: str, **labels: str) -> float:
    """The value of one sample of /metrics (0 if absent)."""
    text = client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


# ------------------------------------------------------------------------------------------- endpoints
def test_endpoints_health_ready_tasks_openapi_metrics():
    with serving() as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/ready").json() == {"ready": True, "tasks": [ECHO]}
        tasks = client.get("/v1/tasks").json()
        assert tasks == {
            ECHO: {"aliases": ["serve_test_alias"], "options": ["upper", "pause"], "model": None}
        }
        schema = client.get("/openapi.json").json()
        assert f"/v1/{ECHO}" in schema["paths"] and "/v1/serve_test_alias" not in schema["paths"]
        assert "upper: answer in upper case" in schema["paths"][f"/v1/{ECHO}"]["post"]["description"]
        assert client.get("/docs").status_code == 200

        texts = ["你好", "银行行长在会上发表了重要讲话", ""]
        response = post(client, texts)
        assert response.status_code == 200
        assert response.json() == {"task": ECHO, "results": Taskflow(ECHO)(texts)}
        assert post(client, ["ab"], task="serve_test_alias").json()["results"] == [
            {"text": "ab", "echo": "ab", "length": 2}
        ]
        assert post(client, []).json() == {"task": ECHO, "results": []}
        assert post(client, ["x"], {"upper": True}).json()["results"][0]["echo"] == "X"

        metrics = client.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        assert metric(client, "ernie_zoo_requests_total", task=ECHO, status="200") == 4
        assert metric(client, "ernie_zoo_texts_total", task=ECHO) == 5
        # 3 model batches: the empty request never reaches the model
        assert metric(client, "ernie_zoo_batch_size_count", task=ECHO) == 3
        assert metric(client, "ernie_zoo_batch_size_sum", task=ECHO) == 3 + 1 + 1
        assert metric(client, "ernie_zoo_request_latency_seconds_count", task=ECHO) == 4
        assert "ernie_zoo_queue_depth" in metrics.text and metric(client, "ernie_zoo_ready") == 1
        assert client.state.arriving == {ECHO: 0}  # every request left the "arriving" count once


def test_ready_is_503_until_the_models_are_loaded():
    Echo.load_gate.clear()
    with serving(wait_ready=False) as client:
        assert client.get("/health").status_code == 200
        ready = client.get("/ready")
        assert ready.status_code == 503 and ready.json() == {"ready": False, "reason": "loading"}
        response = post(client, ["x"])
        assert response.status_code == 503 and error(response)["code"] == "not_ready"
        assert response.headers["Retry-After"] == "1"
        Echo.load_gate.set()
        wait_for(lambda: client.get("/ready").status_code == 200, what="/ready")
        assert post(client, ["x"]).status_code == 200


def test_load_failure_fails_health():
    with serving(tasks=["sentiment_analysis"], task_paths={"sentiment_analysis": "/"}, wait_ready=False) as c:
        wait_for(lambda: c.get("/health").status_code == 503, what="the load to fail")
        assert c.get("/health").json()["status"] == "failed"
        assert c.get("/ready").json()["reason"] == "load_failed"
        assert error(post(c, ["x"], task="sentiment_analysis"))["code"] == "load_failed"


# ------------------------------------------------------------------------------------- dynamic batching
def test_concurrent_requests_merge_into_one_batch_in_order():
    with serving(max_batch_size=64, max_wait_ms=1) as client:
        with held(client) as (queued, submit):
            requests = [[f"r{i}-t{j}" for j in range(1 + i % 3)] for i in range(8)]
            futures = [submit(texts) for texts in requests]
            wait_for(lambda: queued() == sum(map(len, requests)), what="the requests to queue")
        for texts, future in zip(requests, futures):
            response = future.result(10)
            assert response.status_code == 200
            assert [r["text"] for r in response.json()["results"]] == texts
            assert [r["echo"] for r in response.json()["results"]] == texts
        assert Echo.calls[0] == ["first"]
        assert len(Echo.calls) == 2 and sorted(Echo.calls[1]) == sorted(t for r in requests for t in r)
        assert metric(client, "ernie_zoo_batch_requests_sum", task=ECHO) == 1 + 8  # first, then all merged


def test_a_lone_request_does_not_wait_for_company():
    """max_wait_ms is spent only while other requests are arriving: a lone client is answered at once."""
    with serving(max_wait_ms=3000) as client:
        started = time.perf_counter()
        assert post(client, ["alone"]).status_code == 200
        assert time.perf_counter() - started < 1.5
        assert client.state.arriving == {ECHO: 0}


def test_only_requests_with_identical_options_merge():
    with serving(max_batch_size=64) as client:
        with held(client) as (queued, submit):
            plan = [
                ("a", None),
                ("b", {"upper": True}),
                ("c", {"upper": False}),
                ("d", {}),
                ("e", {"upper": True}),
            ]
            futures = [submit([text], options) for text, options in plan]
            wait_for(lambda: queued() == len(plan), what="the requests to queue")
        echoes = [f.result(10).json()["results"][0]["echo"] for f in futures]
        assert echoes == ["a", "B", "c", "d", "E"]
        # defaults filled in: None, {} and {"upper": False} are the same options and share one batch
        assert Echo.calls[1:] == [["a", "c", "d"], ["b", "e"]]


def test_batches_hold_at_most_max_batch_size_texts():
    with serving(max_batch_size=4) as client:
        with held(client) as (queued, submit):
            futures = [submit([f"t{i}"]) for i in range(10)] + [submit([f"big{i}" for i in range(6)])]
            wait_for(lambda: queued() == 16, what="the requests to queue")
        assert all(f.result(10).status_code == 200 for f in futures)
        sizes = [len(call) for call in Echo.calls[1:]]
        assert sizes == [4, 4, 2, 6]  # the 6-text request is never split, and runs on its own
        assert Echo.calls[1] == ["t0", "t1", "t2", "t3"]  # first come, first served


def test_a_failing_request_does_not_fail_the_others_merged_with_it():
    with serving(max_batch_size=64) as client:
        with held(client) as (queued, submit):
            good = [submit([f"ok{i}", f"fine{i}"]) for i in range(3)]
            bad = submit(["ok", "boom"])
            invalid = submit(["bad-input"])
            wait_for(lambda: queued() == 9, what="the requests to queue")
        for i, future in enumerate(good):
            assert future.result(10).json()["results"][1]["echo"] == f"fine{i}"
        response = bad.result(10)
        assert response.status_code == 500 and error(response)["code"] == "model_error"
        assert "RuntimeError" in error(response)["message"]
        response = invalid.result(10)
        assert response.status_code == 422 and error(response)["code"] == "invalid_input"
        assert "not accepted" in error(response)["message"]
        assert metric(client, "ernie_zoo_batch_failures_total", task=ECHO) == 3  # merged batch + 2 alone
        assert post(client, ["still alive"]).status_code == 200
        assert client.get("/health").status_code == 200


# ---------------------------------------------------------------------------------------- limits, errors
def test_size_limits_answer_413_naming_the_limit():
    limits = dict(max_texts_per_request=3, max_chars_per_text=10, max_chars_per_request=25)
    with serving(**limits) as client:
        cases = [
            (["a"] * 4, "too_many_texts", "max_texts_per_request"),
            (["short", "x" * 11], "text_too_long", "texts[1] has 11 characters"),
            (["x" * 10, "y" * 10, "z" * 6], "request_too_long", "26 characters"),
        ]
        for texts, code, fragment in cases:
            response = post(client, texts)
            assert response.status_code == 413, texts
            assert error(response)["code"] == code and fragment in error(response)["message"]
        assert error(post(client, ["short", "x" * 11]))["fields"] == ["texts.1"]
        assert post(client, ["x" * 10, "y" * 10, "z" * 5]).status_code == 200  # exactly at the limits
        # a body larger than any valid request is refused from its Content-Length, before it is parsed
        body = json.dumps({"texts": ["x" * 400_000]}).encode()
        response = client.post(f"/v1/{ECHO}", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 413 and error(response)["code"] == "body_too_large"
        assert Echo.calls == [["x" * 10, "y" * 10, "z" * 5]]  # nothing else reached the model


def test_streamed_body_over_the_limit_is_refused():
    with serving(max_chars_per_request=10, max_texts_per_request=2, max_queue=2) as client:

        def chunks():
            for _ in range(100):
                yield b" " * 10_000

        response = client.post(f"/v1/{ECHO}", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413 and error(response)["code"] == "body_too_large"


BAD_BODIES = [
    # (body, status, code, fields or message fragment)
    (b'{"texts": ["a"', 422, "malformed_json", "not valid JSON"),
    (b"", 422, "invalid_request", "body is empty"),
    (b'["a", "b"]', 422, "invalid_request", ["body"]),
    (b'{"texts": "abc"}', 422, "invalid_request", ["texts"]),
    (b'{"texts": ["a", 2, null]}', 422, "invalid_request", ["texts.1", "texts.2"]),
    (b'{"texts": ["a"], "extra": 1}', 422, "invalid_request", ["extra"]),
    (b'{"options": {}}', 422, "invalid_request", ["texts"]),
    (b'{"texts": ["a"], "options": [1]}', 422, "invalid_request", ["options"]),
    (b'{"texts": ["a"], "options": {"uper": true}}', 422, "invalid_option", "unknown option(s) 'uper'"),
    (b'{"texts": ["a"], "options": {"upper": "yes"}}', 422, "invalid_option", "option 'upper' of task"),
    (b'{"texts": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", 422, "malformed_json", "nested too deeply"),
    (b'{"texts": ["a\xff"]}', 422, "malformed_json", "not valid UTF-8: byte 0xff at position 13"),
]


@pytest.mark.parametrize("body,status,code,expect", BAD_BODIES)
def test_bad_requests_answer_json_errors_naming_the_field(body, status, code, expect):
    with serving() as client:
        response = client.post(f"/v1/{ECHO}", content=body, headers={"content-type": "application/json"})
        assert response.status_code == status and error(response)["code"] == code
        if isinstance(expect, list):
            assert error(response)["fields"] == expect
        else:
            assert expect in error(response)["message"]
        assert Echo.calls == []  # nothing bad reached the model


def test_lone_surrogates_are_answered_as_u_fffd():
    """`"\\ud800"` is valid JSON but cannot be encoded as UTF-8: the model sees U+FFFD in its place (one
    character for one) and the results echo it."""
    with serving() as client:
        body = b'{"texts": ["\\ud800abc", "ok", "x\\udfff"]}'
        response = client.post(f"/v1/{ECHO}", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 200
        assert [r["echo"] for r in response.json()["results"]] == ["\ufffdabc", "ok", "x\ufffd"]
        assert Echo.calls == [["\ufffdabc", "ok", "x\ufffd"]]
        # a surrogate pair is one character (json joins it), not two lone surrogates
        response = post(client, ["\U0001f600"])
        assert response.json()["results"][0] == {"text": "\U0001f600", "echo": "\U0001f600", "length": 1}
    # anything else holding one (an error message, a result) is written with U+FFFD too, never a 500
    assert encode_json({"a": ["x\ud800"]}) == '{"a":["x\ufffd"]}'.encode()


def test_a_failure_while_answering_is_a_json_500_and_the_connection_survives():
    with serving() as client:
        response = post(client, ["unjsonable"])
        assert response.status_code == 500 and error(response)["code"] == "internal_error"
        assert "TypeError" in error(response)["message"]
        assert "connection" not in response.headers  # keep-alive: the connection is not closed
        assert metric(client, "ernie_zoo_requests_total", task=ECHO, status="500") == 1
        assert post(client, ["next"]).status_code == 200


def test_unknown_task_wrong_method_and_content_type():
    with serving() as client:
        response = post(client, ["a"], task="sentiment_analysis")  # a real task, but not served here
        assert response.status_code == 404 and error(response)["code"] == "unknown_task"
        assert ECHO in error(response)["message"]
        assert client.get(f"/v1/{ECHO}").status_code == 405
        response = client.post(
            f"/v1/{ECHO}", content=b'{"texts": ["a"]}', headers={"content-type": "text/plain"}
        )
        assert response.status_code == 415 and "application/json" in error(response)["message"]
        assert metric(client, "ernie_zoo_requests_total", task="unknown", status="404") == 1


def test_full_queue_answers_503_with_retry_after():
    with serving(max_queue=4, max_texts_per_request=4) as client:
        with held(client) as (queued, submit):
            waiting = [submit(["a", "b"]), submit(["c", "d"])]
            wait_for(lambda: queued() == 4, what="the queue to fill")
            response = post(client, ["e"])
            assert response.status_code == 503 and error(response)["code"] == "overloaded"
            assert int(response.headers["Retry-After"]) >= 1
        assert [f.result(10).status_code for f in waiting] == [200, 200]
        assert post(client, ["e"]).status_code == 200


def test_timeout_answers_504_and_drops_the_abandoned_request():
    with serving(request_timeout_s=0.3) as client:
        with held(client, first_status=504) as (queued, submit):
            late = submit(["never run"])
            response = late.result(10)  # waited behind the held batch past the timeout
            assert response.status_code == 504 and error(response)["code"] == "timeout"
        assert post(client, ["next"]).status_code == 200
        assert ["never run"] not in Echo.calls  # its caller gave up, so it never took model time


def test_config_rejects_impossible_limits():
    with pytest.raises(ValueError, match="could never be queued"):
        ServeConfig(tasks=[ECHO], max_texts_per_request=10, max_queue=5)
    with pytest.raises(ValueError, match="not served"):
        ServeConfig(tasks=[ECHO], task_paths={"ner": "x"})
    with pytest.raises(ValueError, match="unknown task"):
        ServeConfig(tasks=["nope"])
    with pytest.raises(ValueError, match="batch_size must be"):
        ServeConfig(tasks=[ECHO], batch_size=0)
    for port in (99999, 0, -1, 65536):  # uvicorn would listen on some other port
        with pytest.raises(ValueError, match=f"port must be an int from 1 to 65535, got {port}"):
            ServeConfig(tasks=[ECHO], port=port)
    for name in ("max_connections", "header_timeout_s", "body_timeout_s", "drain_timeout_s"):
        with pytest.raises(ValueError, match=name):
            ServeConfig(tasks=[ECHO], **{name: 0})


# ---------------------------------------------------------------------------------------- operations
def test_api_key_guards_the_task_endpoints_only():
    with serving(api_key="s3cret") as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-API-Key": "s3cre"}):
            response = post(client, ["a"], headers=headers)
            assert response.status_code == 401 and error(response)["code"] == "unauthorized"
            assert response.headers["WWW-Authenticate"] == "Bearer"
        assert post(client, ["a"], headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert post(client, ["a"], headers={"X-API-Key": "s3cret"}).status_code == 200
        assert client.get("/v1/tasks").status_code == 401
        # 401 comes before validation: a caller without the key learns nothing about the API
        assert (
            client.post(f"/v1/{ECHO}", content=b"{", headers={"content-type": "application/json"}).status_code
            == 401
        )
        assert client.get("/health").status_code == 200 and client.get("/ready").status_code == 200
        assert client.get("/metrics").status_code == 200


def test_draining_refuses_new_requests():
    with serving() as client:
        begin_draining()  # what SIGTERM does first
        response = post(client, ["a"])
        assert response.status_code == 503 and error(response)["code"] == "shutting_down"
        assert client.get("/ready").json() == {"ready": False, "reason": "shutting_down"}
        assert client.get("/health").status_code == 200


def test_cli_arguments_build_the_config(tmp_path):
    from ernie_zoo.commands.serve import ALIASES, Args, check_models
    from ernie_zoo.recipe_cli import cli_args, parse_recipe

    def config_from_args(argv):  # what `ernie-zoo serve ARGV` parses
        return parse_recipe(Args, cli_args(argv, ALIASES, Args, positionals=True), positionals=True)

    argv = ["--task", "sentiment", "--task", "ner", "--task_path", f"ner={tmp_path}", "--max-batch-size", "8"]
    config = config_from_args(argv + ["--max-wait-ms", "2", "--api-key", "k"])
    assert config.tasks == ["sentiment_analysis", "ner"] and config.task_paths == {"ner": str(tmp_path)}
    assert (config.host, config.port, config.max_batch_size, config.max_wait_ms) == (
        "127.0.0.1",
        8000,
        8,
        2.0,
    )
    assert config.api_key == "k"
    import torch

    assert config.forward_batch_size == (32 if torch.cuda.is_available() else 2)  # the device's default
    assert config.taskflow_kwargs("sentiment_analysis")["batch_size"] == config.forward_batch_size
    assert config.taskflow_kwargs("ner")["task_path"] == str(tmp_path)
    with pytest.raises(ValueError, match="--task_path expects KEY=VALUE"):
        config_from_args(["--task", "ner", "--task_path", "ner"])
    with pytest.raises(OSError, match="is not a directory"):
        check_models(config_from_args(["--task", "ner", "--task_path", "ner=/no/such/dir"]))
    with pytest.raises(ValueError, match="port must be an int from 1 to 65535, got 99999"):
        config_from_args(["--task", ECHO, "--port", "99999"])
    assert config_from_args(["--task", ECHO]).workers == 1


# ------------------------------------------------------------------------------- a real model over HTTP
def _scores(task: str, result: dict) -> list[float]:
    if task == "ner":
        return [e["score"] for e in result["entities"]]
    return list(result["scores"].values())


def _without_scores(task: str, result: dict) -> Any:
    if task == "ner":
        return [{k: v for k, v in e.items() if k != "score"} for e in result["entities"]]
    return result["label"]


@pytest.mark.parametrize(
    "task,options,precision",
    [("sentiment_analysis", {"return_all_scores": True}, None), ("ner", {}, "fp32"), ("ner", {}, None)],
)
def test_batch_size_invariance_over_http_with_the_shipped_models(task, options, precision):
    """A text gets the same answer alone, merged with others, and from Taskflow in process (floats within 1e-5:
    padding changes the summation order of the matmuls by a few ulps). NER runs in fp32 and in its default int8:
    int8 forward batches hold chunks of one padded width only (taskflow EncoderTask.batches), so a text's int8
    scores do not depend on what it is batched with, in process or over HTTP. A lone surrogate is answered as
    U+FFFD, with Taskflow's results for the raw text."""
    lines = [line for line in SENTENCES.read_text(encoding="utf-8").splitlines() if line][:12]
    texts = lines + ["。".join(lines) * 2, "\ud800abc北京"]  # one text longer than max_seq_len, one surrogate
    reference = Taskflow(task, max_seq_len=64, precision=precision, **options)(texts)
    with serving(
        tasks=[task], max_seq_len=64, precision=precision, max_batch_size=64, max_wait_ms=300
    ) as client:
        alone = [post(client, [t], options, task=task).json()["results"][0] for t in texts]
        batches_before = metric(client, "ernie_zoo_batch_size_count", task=task)
        with ThreadPoolExecutor(len(texts)) as pool:
            merged = [
                r.json()["results"][0]
                for r in pool.map(lambda t: post(client, [t], options, task=task), texts)
            ]
        batches = metric(client, "ernie_zoo_batch_size_count", task=task) - batches_before
        assert batches < len(texts)  # requests were merged
    for a, m, ref in zip(alone, merged, reference):
        assert a["text"] == m["text"] == ref["text"].replace("\ud800", "\ufffd")
        assert _without_scores(task, a) == _without_scores(task, m) == _without_scores(task, ref)
        assert len(_scores(task, ref)) > 0 or task == "ner"
        for x, y, r in zip(_scores(task, a), _scores(task, m), _scores(task, ref)):
            assert abs(x - r) <= 1e-5 and abs(y - r) <= 1e-5


# --------------------------------------------------------------------------------- real uvicorn, SIGTERM
SERVER_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
import test_serve
test_serve.register_echo()
test_serve.Echo.gate.set()
test_serve.Echo.load_gate.set()
from ernie_zoo.serving import ServeConfig, serve
sys.exit(serve(ServeConfig(tasks=[test_serve.ECHO], **json.loads({options!r}))))
"""


@contextmanager
def uvicorn_server(tmp_path: Path, **options: Any):
    """A real `serve(ServeConfig(tasks=[echo], **options))` process on a free port; yields (url, process, log)."""
    from ernie_zoo.utils import free_port

    port = free_port()
    script = tmp_path / f"server_{port}.py"
    script.write_text(
        SERVER_SCRIPT.format(tests=str(Path(__file__).parent), options=json.dumps({"port": port, **options}))
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log_path = tmp_path / f"server_{port}.log"
    log_file = open(log_path, "w")  # noqa: SIM115  (closed in finally)
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stderr=log_file)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: _get(f"{url}/ready") == 200 or proc.poll() is not None, timeout=60, what="the server"
        )
        assert proc.poll() is None, log_path.read_text()
        yield url, proc, log_path
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log_file.close()


def test_sigterm_finishes_requests_in_flight_and_refuses_new_ones(tmp_path):
    with uvicorn_server(tmp_path, graceful_timeout_s=20) as (url, proc, log_path):
        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(
                httpx.post,
                f"{url}/v1/{ECHO}",
                json={"texts": ["slow"], "options": {"pause": 2.0}},
                timeout=30,
            )
            time.sleep(0.5)  # the slow request is in the model now
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            with pytest.raises(httpx.ConnectError):  # the listening socket is closed
                httpx.post(f"{url}/v1/{ECHO}", json={"texts": ["new"]}, timeout=5)
            response = slow.result(30)
        assert response.status_code == 200 and response.json()["results"][0]["echo"] == "slow"
        proc.wait(30)
        assert proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after a clean shutdown
        log = log_path.read_text()
        assert "Waiting for connections to close" in log or "Shutting down" in log
        assert "Finished server process" in log


def _get(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.TransportError:
        return 0


# ------------------------------------------------------------------- real uvicorn under load and bad input
# Small limits: a body over max_body_bytes (12 * 1000 + 4 * 8 + 65,536 = 77,568 bytes) is refused from its
# Content-Length; short timeouts and a low connection cap so that slow clients are cut within the test.
EDGE = dict(
    max_chars_per_request=1000,
    max_texts_per_request=8,
    max_queue=512,
    header_timeout_s=1.5,
    body_timeout_s=1.5,
    drain_timeout_s=3.0,
    max_connections=40,
)


@pytest.fixture(scope="module")
def edge_server(tmp_path_factory):
    with uvicorn_server(tmp_path_factory.mktemp("edge"), **EDGE) as (url, _, log_path):
        yield url, log_path


def _raw(url: str, data: bytes, then: bytes = b"", pause: float = 0.0, timeout: float = 10.0) -> bytes:
    """Send `data` on a new connection (then `then` byte by byte, `pause` seconds apart) and read until the
    server closes; the bytes it answered."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        try:
            for byte in then:
                time.sleep(pause)
                sock.sendall(bytes([byte]))
        except OSError:  # the server cut us off: read its answer
            pass
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def _json_answer(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), raw[:300]
    return int(head.split()[1]), json.loads(body)


def test_413_reaches_urllib_and_curl_while_they_still_send(edge_server):
    """2M characters (6 MB) against a 77 KB body limit: the server answers 413 from the Content-Length, then
    reads and discards the rest while the client is still sending, so the client reads the 413 instead of a
    connection reset."""
    url, _ = edge_server
    body = json.dumps({"texts": ["中" * 2_000_000]}, ensure_ascii=False).encode()
    request = Request(f"{url}/v1/{ECHO}", data=body, headers={"Content-Type": "application/json"})
    with pytest.raises(HTTPError) as caught:
        urlopen(request, timeout=30)
    assert caught.value.code == 413
    assert json.loads(caught.value.read())["error"]["code"] == "body_too_large"
    curl = shutil.which("curl")
    assert curl, "curl is needed for this test (apt-get install -y curl)"
    out = subprocess.run(
        [curl, "-sS", "-w", "\n%{http_code}", "-H", "Content-Type: application/json", "--data-binary", "@-"]
        + [f"{url}/v1/{ECHO}"],
        input=body,
        capture_output=True,
        timeout=60,
    )
    answer, _, status = out.stdout.decode().rpartition("\n")
    assert out.returncode == 0 and status == "413", out.stderr
    assert json.loads(answer)["error"]["code"] == "body_too_large"


@pytest.mark.parametrize("length", [b"-5", b"abc", b"1e3"])
def test_a_bad_content_length_is_a_json_400(edge_server, length):
    url, _ = edge_server
    raw = _raw(
        url, b"POST /v1/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n{}" % (ECHO.encode(), length)
    )
    status, answer = _json_answer(raw)
    assert status == 400 and answer["error"]["code"] == "bad_http_request"
    assert "Content-Length" in answer["error"]["message"]


def test_slow_clients_are_cut_and_connections_are_capped(edge_server):
    url, _ = edge_server
    start = f"POST /v1/{ECHO} HTTP/1.1\r\nHost: x\r\n".encode()
    # headers trickled one byte every 0.2 s: 408 once header_timeout_s (1.5 s) has passed
    began = time.monotonic()
    status, answer = _json_answer(_raw(url, start, then=b"X-Slow: " + b"a" * 100, pause=0.2))
    assert status == 408 and answer["error"]["code"] == "header_timeout"
    assert "header_timeout_s" in answer["error"]["message"] and time.monotonic() - began < 10
    # a body trickled after complete headers: 408 once body_timeout_s has passed
    headers = start + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    status, answer = _json_answer(_raw(url, headers, then=b'{"texts": ["' + b"a" * 80, pause=0.2))
    assert status == 408 and answer["error"]["code"] == "body_timeout"
    # a connection that sends nothing is closed without an answer
    assert _raw(url, b"") == b""
    # max_connections (40) idle connections are held; one more is refused with a JSON 503 at once
    host, port = url.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(EDGE["max_connections"])]
    try:
        time.sleep(0.2)  # all accepted
        status, answer = _json_answer(_raw(url, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert status == 503 and answer["error"]["code"] == "too_many_connections"
        # the idle ones are cut after header_timeout_s, which frees the slots
        for sock in idle:
            assert sock.recv(100) == b""
    finally:
        for sock in idle:
            sock.close()
    wait_for(lambda: _get(f"{url}/health") == 200, what="a free connection slot")


def _mixed_requests(n: int, seed: int = 0) -> list[tuple[str, bytes, int, str | None]]:
    """(kind, body, expected status, expected error code or echo) for n requests: about 2/3 good, the rest
    lone surrogates, malformed bodies, oversize bodies and characters, and a failure while answering."""
    rng = random.Random(seed)
    bad = [
        ("surrogate", b'{"texts": ["\\ud800x%d"]}', 200, "\ufffdx%d"),
        ("malformed", b'{"texts": ["a%d"', 422, "malformed_json"),
        ("utf8", b'{"texts": ["\xff%d"]}', 422, "malformed_json"),
        ("nested", b'{"texts": ' + b"[" * 1000 + b"%d" + b"]" * 1000 + b"}", 422, "malformed_json"),
        ("types", b'{"texts": [%d]}', 422, "invalid_request"),
        ("oversize", b'{"texts": ["' + b"x" * 100_000 + b'%d"]}', 413, "body_too_large"),
        ("too_long", b'{"texts": ["' + b"y" * 1200 + b'%d"]}', 413, "request_too_long"),
        ("server_error", b'{"texts": ["unjsonable"]}', 500, "internal_error"),
    ]
    requests = []
    for i in range(n):
        if rng.random() < 2 / 3:
            text = f"好{i}" * rng.randint(1, 20)
            requests.append(("good", json.dumps({"texts": [text, str(i)]}).encode(), 200, text))
        else:
            kind, body, status, expect = rng.choice(bad)
            expect = expect % i if "%d" in expect else expect
            requests.append((kind, body % i if b"%d" in body else body, status, expect))
    return requests


def test_mixed_load_on_keep_alive_connections_loses_no_good_request(edge_server):
    """2,000 requests at concurrency 32 over 32 keep-alive connections, a third of them bad (lone surrogates,
    malformed JSON, invalid UTF-8, deep nesting, wrong types, bodies over the limit, too many characters, a
    server error while answering): every good request is answered 200 with its own results, every bad one
    with its JSON error; no request sees a dropped connection."""
    url, _ = edge_server
    requests = _mixed_requests(2000)
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    failures: list[str] = []
    with httpx.Client(base_url=url, limits=limits, timeout=60) as client:

        def send(request):
            kind, body, status, expect = request
            try:
                r = client.post(f"/v1/{ECHO}", content=body, headers={"content-type": "application/json"})
            except httpx.TransportError as exc:
                return f"{kind}: {type(exc).__name__}: {exc}"
            if r.status_code != status or not r.headers["content-type"].startswith("application/json"):
                return f"{kind}: {r.status_code} {r.text[:200]}"
            answer = r.json()
            if status == 200:
                if answer["results"][0]["echo"] != expect:
                    return f"{kind}: wrong result {answer['results'][0]}"
            elif answer["error"]["code"] != expect:
                return f"{kind}: {answer}"
            return None

        with ThreadPoolExecutor(32) as pool:
            failures = [f for f in pool.map(send, requests) if f is not None]
    kinds = {kind for kind, *_ in requests}
    assert len(kinds) == 9 and sum(kind == "good" for kind, *_ in requests) > 1200
    good = sum(f.startswith("good") for f in failures)
    assert failures == [], f"{len(failures)} of {len(requests)} failed ({good} good ones): {failures[:5]}"
