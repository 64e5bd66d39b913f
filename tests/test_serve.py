"""`ernie-zoo serve`: every endpoint, every limit and bad input, merged batches (order, options, size), timeouts,
a failing request among merged ones, the API key, batch-size invariance over HTTP with the shipped sentiment
model, the CLI arguments, and graceful shutdown of a real uvicorn process on SIGTERM.

Most tests serve `serve_test_echo`, a model-free task defined here whose forward pass can be held at a gate, so
that requests pile up in the queue and the batches they form are known exactly.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from fastapi.testclient import TestClient

from ernie_zoo.serving import ServeConfig, create_app
from ernie_zoo.serving.app import begin_draining
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
    RuntimeError (a model failure), "bad-input" ValueError (Taskflow's bad-input contract)."""

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
        return [t.upper() if self.options.upper else t for t in texts]

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
    return client.post(f"/v1/{task}", json=body, **kwargs)


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
    from ernie_zoo.training.recipe import cli_args, parse_recipe

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
    assert config_from_args(["--task", ECHO]).workers == 1


# ------------------------------------------------------------------------------- a real model over HTTP
def test_batch_size_invariance_over_http_with_the_shipped_sentiment_model():
    """A text gets the same answer alone, merged with others, and from Taskflow in process (floats within 1e-5:
    padding changes the summation order of the matmuls by a few ulps)."""
    lines = [line for line in SENTENCES.read_text(encoding="utf-8").splitlines() if line][:12]
    texts = lines + ["。".join(lines) * 2]  # one text longer than max_seq_len: split into chunks and joined
    reference = Taskflow("sentiment_analysis", max_seq_len=64, return_all_scores=True)(texts)
    options = {"return_all_scores": True}
    with serving(tasks=["sentiment_analysis"], max_seq_len=64, max_batch_size=64, max_wait_ms=300) as client:
        alone = [post(client, [t], options, task="sentiment_analysis").json()["results"][0] for t in texts]
        batches_before = metric(client, "ernie_zoo_batch_size_count", task="sentiment_analysis")
        with ThreadPoolExecutor(len(texts)) as pool:
            merged = [
                r.json()["results"][0]
                for r in pool.map(lambda t: post(client, [t], options, task="sentiment_analysis"), texts)
            ]
        batches = metric(client, "ernie_zoo_batch_size_count", task="sentiment_analysis") - batches_before
        assert batches < len(texts)  # requests were merged
    for a, m, ref in zip(alone, merged, reference):
        assert a["text"] == m["text"] == ref["text"] and a["label"] == m["label"] == ref["label"]
        for label, score in ref["scores"].items():
            assert abs(a["scores"][label] - score) <= 1e-5 and abs(m["scores"][label] - score) <= 1e-5


# --------------------------------------------------------------------------------- real uvicorn, SIGTERM
SERVER_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import test_serve
test_serve.register_echo()
test_serve.Echo.gate.set()
test_serve.Echo.load_gate.set()
from ernie_zoo.serving import ServeConfig, serve
sys.exit(serve(ServeConfig(tasks=[test_serve.ECHO], port={port}, graceful_timeout_s=20)))
"""


def test_sigterm_finishes_requests_in_flight_and_refuses_new_ones(tmp_path):
    from ernie_zoo.serving.server import free_port

    port = free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT.format(tests=str(Path(__file__).parent), port=port))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log_path = tmp_path / "server.log"
    log_file = open(log_path, "w")  # noqa: SIM115  (closed in finally)
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stderr=log_file)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _get(f"{url}/ready") == 200, timeout=60, what="the server to start")
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
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log_file.close()


def _get(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.TransportError:
        return 0
