"""A prompt that does not fit text_generation's window beside max_new_tokens (issue #50): it keeps its start token
and its tail, and where not even one prompt token would be left it is refused with the numbers (over HTTP: 422),
never generated from the start token alone, which gave every prompt the same text.

The model is conftest's random-weight decoder (2 layers of hidden 64, 256 positions, [CLS] start token)."""

from __future__ import annotations

import threading

import pytest

from ernie_zoo.taskflow import Taskflow


def test_no_room_for_the_prompt_is_refused_with_the_numbers(decoder_dir):
    flow = Taskflow("text_generation", task_path=decoder_dir, max_seq_len=16, max_new_tokens=15)
    with pytest.raises(ValueError) as refused:
        flow("今天")
    message = str(refused.value)
    assert "input 0 has 2 prompt tokens" in message and "max_new_tokens=15" in message
    assert "16-token window" in message and "max_new_tokens <= 14" in message
    assert len(flow("")["generated"][0]) > 0  # the empty prompt is its start token alone: it fits
    fits = Taskflow("text_generation", task_path=decoder_dir, max_seq_len=16, max_new_tokens=14)
    assert fits("今天")["generated"] == fits("天")["generated"]  # [CLS] + the last token


def test_a_long_prompt_keeps_its_start_token_and_its_tail(decoder_dir, caplog):
    flow = Taskflow("text_generation", task_path=decoder_dir, max_seq_len=16, max_new_tokens=12)
    long, tail = "据新华社报道今天天气很好", "气很好"  # budget 4: [CLS] + the last 3 characters
    with caplog.at_level("WARNING", logger="ernie_zoo.taskflow.text_generation"):
        assert flow(long)["generated"] == flow(tail)["generated"]
    assert "keeping its start token and its last 3 (a 16-token window - max_new_tokens 12)" in caplog.text


def test_http_refuses_a_prompt_with_no_room(decoder_dir):
    from fastapi.testclient import TestClient

    from ernie_zoo.serving.app import create_app
    from ernie_zoo.serving.config import ServeConfig

    config = ServeConfig(tasks=["text_generation"], task_paths={"text_generation": str(decoder_dir)})
    with TestClient(create_app(config)) as client:
        for _ in range(2400):
            if client.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.05)
        r = client.post("/v1/text_generation", json={"texts": ["今天"], "options": {"max_new_tokens": 255}})
        assert r.status_code == 422, r.text
        assert "max_new_tokens=255" in r.text and "256-token window" in r.text
        r = client.post("/v1/text_generation", json={"texts": ["今天"], "options": {"max_new_tokens": 3}})
        assert r.status_code == 200 and len(r.json()["results"]) == 1
