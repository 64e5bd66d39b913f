"""Streaming generation (#37 item 5): `Taskflow("text_generation", stream=True)` yields text pieces as the model
produces them, joined they equal the non-streamed continuation (greedy and seeded sampling, the shipped poetry
model with its verse processors and an ERNIE 4.5 decoder); closing the stream stops the generation thread; bad
combinations are refused by name; `ernie-zoo serve` streams the same pieces as server-sent events."""

from __future__ import annotations

import json
import threading

import pytest

from ernie_zoo.taskflow import Taskflow

PROMPTS = ["今天天气很好，", "据新华社报道，", "春眠不觉晓，"]


@pytest.mark.parametrize(
    "options",
    [{}, {"decode_strategy": "sampling", "seed": 3, "top_k": 20}, {"repetition_penalty": 1.3, "min_new_tokens": 5}],
    ids=["greedy", "sampling", "penalty"],
)
def test_decoder_stream_joins_to_the_batch_result(decoder_dir, options):
    batch = Taskflow("text_generation", task_path=decoder_dir, max_new_tokens=16, **options)
    stream = Taskflow("text_generation", task_path=decoder_dir, max_new_tokens=16, stream=True, **options)
    for prompt in PROMPTS:
        pieces = list(stream(prompt))
        assert all(isinstance(p, str) and p for p in pieces)
        assert len(pieces) > 1  # streamed, not one block at the end
        assert "".join(pieces) == batch(prompt)["generated"][0]


def test_shipped_poetry_model_streams_its_verse():
    batch = Taskflow("text_generation", model="ernie-zoo-mini-poetry")
    stream = Taskflow("text_generation", model="ernie-zoo-mini-poetry", stream=True)
    for prompt in ["春眠不觉晓，", "登高"]:
        assert "".join(stream(prompt)) == batch(prompt)["generated"][0]


def test_closing_the_stream_stops_generation(decoder_dir):
    flow = Taskflow("text_generation", task_path=decoder_dir, max_new_tokens=200, min_new_tokens=200, stream=True)
    before = {t.name for t in threading.enumerate()}
    pieces = flow("今天天气很好，")
    first = next(pieces)
    assert first
    pieces.close()  # the generation thread sees the stop and ends; close() waits for it
    assert not [t for t in threading.enumerate() if t.name == "text_generation-stream" and t.name not in before]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"decode_strategy": "beam_search"}, "stream=True yields one continuation"),
        ({"decode_strategy": "sampling", "num_return_sequences": 2}, "stream=True yields one continuation"),
        ({"stream": "yes"}, "stream"),
    ],
)
def test_bad_stream_options_are_refused(decoder_dir, options, message):
    options = {"stream": True, **options}
    with pytest.raises((ValueError, TypeError), match=message):
        Taskflow("text_generation", task_path=decoder_dir, **options)


def test_stream_takes_one_text(decoder_dir):
    flow = Taskflow("text_generation", task_path=decoder_dir, stream=True)
    with pytest.raises(ValueError, match="one text"):
        flow(["a", "b"])
    with pytest.raises(TypeError, match="str"):
        flow(None)


def test_an_error_in_the_generation_thread_reaches_the_caller(decoder_dir, monkeypatch):
    flow = Taskflow("text_generation", task_path=decoder_dir, stream=True)

    def broken(*args, **kwargs):
        raise RuntimeError("boom in generate")

    monkeypatch.setattr(flow._task.model, "generate", broken)
    with pytest.raises(RuntimeError, match="boom in generate"):
        list(flow("今天"))


# ------------------------------------------------------------------------------------------------ serve (SSE)
def _events(body: str) -> list[tuple[str, dict]]:
    events = []
    for block in body.strip().split("\n\n"):
        name, data = "message", None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
        events.append((name, data))
    return events


@pytest.fixture(scope="module")
def client(decoder_dir):
    from fastapi.testclient import TestClient

    from ernie_zoo.serving.app import create_app
    from ernie_zoo.serving.config import ServeConfig

    config = ServeConfig(tasks=["text_generation"], task_paths={"text_generation": str(decoder_dir)})
    with TestClient(create_app(config)) as c:
        for _ in range(600):
            if c.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.05)
        yield c


def test_serve_streams_server_sent_events(client, decoder_dir):
    options = {"max_new_tokens": 12}
    expected = Taskflow("text_generation", task_path=decoder_dir, **options)(PROMPTS[0])
    r = client.post("/v1/text_generation", json={"texts": [PROMPTS[0]], "options": {**options, "stream": True}})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    pieces = [data["text"] for name, data in events if name == "message"]
    assert len(pieces) > 1
    assert "".join(pieces) == expected["generated"][0]
    assert events[-1] == ("done", {"task": "text_generation", "results": [expected]})
    # the same request without stream is answered as before
    plain = client.post("/v1/text_generation", json={"texts": [PROMPTS[0]], "options": options})
    assert plain.json() == {"task": "text_generation", "results": [expected]}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"texts": ["a", "b"], "options": {"stream": True}}, 422, "invalid_input"),
        ({"texts": ["a"], "options": {"stream": True, "decode_strategy": "beam_search"}}, 422, "invalid_option"),
        ({"texts": ["字" * 100_000], "options": {"stream": True}}, 413, "text_too_long"),
    ],
)
def test_serve_stream_errors_keep_the_json_shape(client, body, status, code):
    r = client.post("/v1/text_generation", json=body)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code


def test_cli_streams_each_text_on_its_own_line(decoder_dir):
    import subprocess
    import sys

    flow = Taskflow("text_generation", task_path=decoder_dir, max_new_tokens=8)
    out = subprocess.run(
        [sys.executable, "-m", "ernie_zoo.cli", "taskflow", "text_generation", "--task-path", str(decoder_dir),
         "-O", "stream=true", "-O", "max_new_tokens=8", "--no-progress", PROMPTS[0], PROMPTS[1]],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [flow(p)["generated"][0] for p in PROMPTS[:2]]
    bad = subprocess.run(
        [sys.executable, "-m", "ernie_zoo.cli", "taskflow", "text_generation", "--task-path", str(decoder_dir),
         "-O", "stream=true", "--input", __file__],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "stream=true prints to the terminal" in bad.stderr
