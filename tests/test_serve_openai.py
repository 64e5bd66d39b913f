"""The OpenAI-compatible endpoints of `ernie-zoo serve`, against a live uvicorn server on loopback, with the official
`openai` client (in the dev extra) and raw HTTP; continuous batching on transformers' manager.

One server (module fixture) serves the shipped generator and encoder with --continuous_batching: greedy requests run
on transformers' manager, sampled ones on the dynamic batcher, so both engines are exercised. References are computed
in-process with plain transformers / Taskflow, never copied from the server.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import torch
import uvicorn

from ernie_zoo.serving import ServeConfig, create_app
from ernie_zoo.serving.engines import ContinuousEngine
from ernie_zoo.serving.server import uvicorn_config
from ernie_zoo.taskflow import Taskflow
from ernie_zoo.utils import free_port

GENERATOR = "ernie-zoo-mini-generator"
ENCODER = "ernie-zoo-e5-small-zh-pieces"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "serving.md"


def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def live():
    """(base url, ServingState) of a real uvicorn server in a thread of this process."""
    config = ServeConfig(
        tasks=["text_generation", "feature_extraction"],
        port=free_port(),
        continuous_batching=True,
        max_running=32,
        torch_threads=1,
    )
    app = create_app(config)
    server = uvicorn.Server(uvicorn_config(config, app))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{config.port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/ready").status_code == 200
        except httpx.TransportError:
            return False

    wait_for(ready, 120, "the server")
    yield url, app.state.serving
    server.should_exit = True
    thread.join(30)


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live[0] + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def generator():
    """The generator's TextGeneration task in-process: its tokenizer and model make the references."""
    return Taskflow("text_generation")._task


def greedy_reference(generator, prompt_ids: list[int], max_new_tokens: int) -> tuple[str, int]:
    """Plain transformers `generate()` of the prompt, greedy, no repetition penalty: (text, generated tokens). With
    oneDNN off, as Taskflow runs its forward passes (its kernels differ in the last bits, which can flip a near-tie)."""
    from ernie_zoo.taskflow.task import without_onednn

    with torch.inference_mode(), without_onednn():
        out = generator.model.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            repetition_penalty=1.0,
            eos_token_id=generator.eos_id,
            pad_token_id=generator.pad_id,
        )
    ids = generator._trim(out[0, len(prompt_ids) :].tolist())
    return generator.decode(ids), len(ids)


def chat_ids(generator, messages: list[dict]) -> list[int]:
    """What a chat becomes for a tokenizer without a chat template: ERNIE 4.5's User / Assistant format."""
    from ernie_zoo.models.decoder import chat_template_for

    tok = generator.tokenizer
    text = tok.apply_chat_template(
        messages, chat_template=chat_template_for(tok), add_generation_prompt=True, tokenize=False
    )
    assert text == "[CLS]" + "".join(f"User: {m['content']}\n" for m in messages) + "Assistant: "
    return tok(text, add_special_tokens=False)["input_ids"]


def test_models_chat_completions_and_embeddings_with_the_openai_client(live, client, generator):
    assert [m.id for m in client.models.list().data] == [GENERATOR, ENCODER]

    messages = [{"role": "user", "content": "今天天气很好，"}]
    chat = client.chat.completions.create(model=GENERATOR, messages=messages, max_tokens=12)
    prompt = chat_ids(generator, messages)
    text, used = greedy_reference(generator, prompt, 12)
    assert chat.object == "chat.completion" and len(chat.choices) == 1
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == text
    assert chat.choices[0].finish_reason == ("length" if used == 12 else "stop")
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (len(prompt), used)
    assert chat.usage.total_tokens == len(prompt) + used

    # max_completion_tokens, n (greedy: the same answer n times), the task name as the model
    chat2 = client.chat.completions.create(
        model="text_generation", messages=messages, max_completion_tokens=5, n=2
    )
    assert [c.index for c in chat2.choices] == [0, 1]
    assert (
        chat2.choices[0].message.content
        == chat2.choices[1].message.content
        == greedy_reference(generator, prompt, 5)[0]
    )

    # completions: a list of prompts, n=2 each
    prompts = ["今天天气很好，", "成语“画蛇添足”是什么意思？答："]
    done = client.completions.create(model=GENERATOR, prompt=prompts, max_tokens=8, n=2)
    assert [c.index for c in done.choices] == [0, 1, 2, 3]
    for p, prompt_text in enumerate(prompts):
        ids = generator.preprocess([prompt_text]).ids[0]
        assert (
            done.choices[2 * p].text == done.choices[2 * p + 1].text == greedy_reference(generator, ids, 8)[0]
        )

    # embeddings: feature_extraction's, unit length; base64 carries the same float32 vector
    texts = ["长江是中国最长的河流", "你好"]
    embedded = client.embeddings.create(model=ENCODER, input=texts)
    expected = Taskflow("feature_extraction", normalize=True)(texts)
    assert [d.index for d in embedded.data] == [0, 1]
    for got, want in zip(embedded.data, expected):
        np.testing.assert_allclose(got.embedding, want["embedding"], rtol=1e-5, atol=1e-6)
        assert abs(np.linalg.norm(got.embedding) - 1) < 1e-5
    assert embedded.usage.prompt_tokens > len("".join(texts))  # [CLS]/[SEP] counted too
    raw = httpx.post(
        f"{live[0]}/v1/embeddings", json={"model": ENCODER, "input": texts, "encoding_format": "base64"}
    ).json()
    for got, want in zip(raw["data"], embedded.data):
        vector = np.frombuffer(base64.b64decode(got["embedding"]), dtype=np.float32)
        np.testing.assert_array_equal(vector, np.float32(want.embedding))


def test_streams_join_to_the_unstreamed_answer(client):
    messages = [
        {"role": "system", "content": "请回答。"},
        {"role": "user", "content": "成语“画蛇添足”是什么意思？"},
    ]
    whole = client.chat.completions.create(model=GENERATOR, messages=messages, max_tokens=16)
    chunks = list(
        client.chat.completions.create(
            model=GENERATOR,
            messages=messages,
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([p for p in pieces if p]) > 1  # really streamed, piece by piece
    assert "".join(pieces) == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens

    text = client.completions.create(model=GENERATOR, prompt="今天天气很好，", max_tokens=10)
    streamed = client.completions.create(model=GENERATOR, prompt="今天天气很好，", max_tokens=10, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == text.choices[0].text


def test_stop_seed_and_sampling(client):
    base = client.completions.create(model=GENERATOR, prompt="今天天气很好，", max_tokens=16).choices[0].text
    assert len(base) > 4
    stop = base[3:5]
    cut = client.completions.create(
        model=GENERATOR, prompt="今天天气很好，", max_tokens=16, stop=[stop, "zzz"]
    )
    assert cut.choices[0].text == base[: base.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(
        model=GENERATOR, prompt="今天天气很好，", max_tokens=16, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == cut.choices[0].text

    # sampling (the dynamic engine): seeded requests repeat, different seeds differ, n=3 choices
    def sample(seed: int, n: int = 1) -> list[str]:
        answer = client.completions.create(
            model=GENERATOR, prompt="今天", max_tokens=12, temperature=1.0, top_p=0.95, seed=seed, n=n
        )
        return [c.text for c in answer.choices]

    first = sample(7, n=3)
    assert first == sample(7, n=3) and len(first) == 3
    assert len(set(first)) > 1 and sample(8, n=3) != first


def test_errors_are_in_openai_shape_and_task_endpoints_are_unchanged(live, client):
    url = live[0]
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "你好"}])
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=GENERATOR, messages=[{"role": "user", "content": "你好"}], logprobs=True
        )
    assert info.value.body["param"] == "logprobs"

    cases = [  # (body, param, code)
        ({"model": GENERATOR, "messages": []}, "messages", "invalid_request"),
        ({"model": GENERATOR, "messages": "hi"}, "messages", "invalid_request"),
        (
            {"model": GENERATOR, "messages": [{"role": "user", "content": "x"}], "n": 0},
            "n",
            "invalid_request",
        ),
        (
            {"model": GENERATOR, "messages": [{"role": "tool", "content": "x"}]},
            "messages.0.role",
            "invalid_request",
        ),
        (
            {"model": GENERATOR, "messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 5},
            "stop",
            None,
        ),
        (
            {"model": GENERATOR, "messages": [{"role": "user", "content": "x"}], "max_tokens": 5000},
            "max_tokens",
            None,
        ),
        (
            {"model": GENERATOR, "messages": [{"role": "user", "content": "长" * 2000}], "max_tokens": 16},
            "messages",
            "context_length_exceeded",
        ),
    ]
    for body, param, code in cases:
        r = httpx.post(f"{url}/v1/chat/completions", json=body)
        assert r.status_code == 400, (body, r.text)
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
        assert error["param"] == param and error["message"], (body, error)
        if code is not None:
            assert error["code"] == code
    r = httpx.post(
        f"{url}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_json"
    r = httpx.post(f"{url}/v1/embeddings", json={"model": GENERATOR, "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"

    # the task endpoints keep their own shapes
    r = httpx.post(f"{url}/v1/text_generation", json={"texts": ["今天"], "options": {"max_new_tokens": 3}})
    assert r.status_code == 200 and r.json()["task"] == "text_generation"
    r = httpx.post(f"{url}/v1/text_generation", json={"texts": ["今天"], "options": {"max_new_tokens": 0}})
    assert r.status_code == 422 and set(r.json()["error"]) == {"code", "message", "fields"}


def test_32_concurrent_streams_and_a_disconnect_frees_its_slot(live, client):
    url, state = live
    engine = state.engine
    assert isinstance(engine, ContinuousEngine)

    def stream(i: int) -> str:
        chunks = client.chat.completions.create(
            model=GENERATOR, messages=[{"role": "user", "content": f"第{i}句："}], max_tokens=8, stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(stream, range(32)))
    assert len(answers) == 32 and all(answers)
    wait_for(lambda: engine.running() == 0, 10, "the batch to empty")

    # A client that goes away mid-stream: its request leaves the decode batch at the next step.
    body = {"model": GENERATOR, "prompt": "今天天气很好，", "max_tokens": 400, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = [line for line in (next(lines) for _ in range(6)) if line.startswith("data: ")]
        assert got and engine.running() == 1
    # The 400 tokens would take seconds more (~100 tokens/s on one CPU thread); cancelled, it leaves at once.
    wait_for(lambda: engine.running() == 0, 2, "the cancelled request to leave the batch")
    assert not engine.manager.output_router.result_handlers


# ------------------------------------------------------------------------------------------------ docs
def _block(marker: str, language: str) -> str:
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(rf"<!-- test: {marker} -->\s*```{language}\n(.*?)```", text, re.S)
    assert found, f"docs/serving.md has no block marked <!-- test: {marker} -->"
    return found.group(1)


def test_the_docs_examples_run(live):
    url = live[0]
    curl = _block("openai-curl", "bash").replace("http://127.0.0.1:8000", url)
    answer = json.loads(
        subprocess.run(["bash", "-c", curl], check=True, capture_output=True, text=True).stdout
    )
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]

    code = _block("openai-python", "python").replace("http://127.0.0.1:8000", url)
    out = subprocess.run(
        ["python", "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    expected = _block("openai-python-output", "text")
    assert out == expected


def test_streamed_text_holds_back_what_may_become_a_stop_string():
    """TextOut on a character-per-token toy decoder: a stop string split over tokens never reaches the client."""
    from ernie_zoo.serving.openai_api import TextOut

    class Chars:
        eos_id = 0

        @staticmethod
        def decode(ids: list[int]) -> str:
            return "".join(chr(i) for i in ids)

    def run(text: str, stops: list[str], max_new: int = 50) -> tuple[list[str], str, str | None]:
        out = TextOut(Chars(), stops, max_new)
        pieces = [out.push([ord(c)]) for c in text]
        pieces.append(out.finish())
        return pieces, "".join(pieces), out.finish_reason

    pieces, joined, reason = run("abcXYdef", ["XYZ", "de"])
    assert joined == "abcXY" and reason == "stop"
    assert pieces[3] == "" and pieces[4] == ""  # "X", "XY": held back while "XYZ" was possible
    assert pieces[5] == "XY"  # "XYd": XYZ ruled out, "d" may start "de"
    _, joined, reason = run("abcdefgh", ["zz"], max_new=5)
    assert joined == "abcde" and reason == "length"
    out = TextOut(Chars(), [], 50)
    assert out.push([ord("a"), ord("b"), 0, ord("c")]) == "ab" and out.finish_reason == "stop"
    assert out.finish() == "" and out.used == 2


def test_a_tokenizer_with_a_chat_template_is_served_with_its_own(tmp_path, generator):
    """A model directory whose tokenizer has a chat template (what `ernie-finetune --task instruction` saves): the
    chat prompt is that template's, as plain transformers' apply_chat_template gives it."""
    import shutil

    from fastapi.testclient import TestClient

    from ernie_zoo.zoo import __file__ as zoo_init

    source = Path(zoo_init).parent / GENERATOR
    model_dir = tmp_path / "chat-model"
    shutil.copytree(source, model_dir)
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    template = "[CLS]{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    config["chat_template"] = template
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))
    (model_dir / "manifest.json").unlink(missing_ok=True)  # the copy is no longer the shipped model

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    assert tok.chat_template == template
    messages = [{"role": "system", "content": "简短回答"}, {"role": "user", "content": "北京"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    expected, used = greedy_reference(generator, list(ids), 6)

    app = create_app(ServeConfig(tasks=["text_generation"], task_paths={"text_generation": str(model_dir)}))
    with TestClient(app) as client:
        wait_for(lambda: client.get("/ready").status_code == 200, 120, "/ready")
        r = client.post(
            "/v1/chat/completions", json={"model": "chat-model", "messages": messages, "max_tokens": 6}
        )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["usage"]["prompt_tokens"] == len(ids)
    assert answer["choices"][0]["message"]["content"] == expected
    assert answer["usage"]["completion_tokens"] == used


def test_without_continuous_batching_the_dynamic_engine_gives_the_same_answers(generator):
    """The default server (dynamic batching): greedy answers equal plain generate(), streamed or not; a seeded
    sampled stream joins to the seeded unstreamed answer."""
    from fastapi.testclient import TestClient

    from ernie_zoo.serving.engines import DynamicEngine

    prompt = "今天天气很好，"
    expected, used = greedy_reference(generator, generator.preprocess([prompt]).ids[0], 10)
    app = create_app(ServeConfig(tasks=["text_generation"]))
    with TestClient(app) as client:
        wait_for(lambda: client.get("/ready").status_code == 200, 120, "/ready")
        assert type(app.state.serving.engine) is DynamicEngine

        def complete(stream: bool, **extra) -> tuple[str, str]:
            body = {"model": GENERATOR, "prompt": prompt, "max_tokens": 10, "stream": stream, **extra}
            r = client.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            if not stream:
                choice = r.json()["choices"][0]
                return choice["text"], choice["finish_reason"]
            events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
            assert r.text.rstrip().endswith("data: [DONE]")
            return "".join(e["choices"][0]["text"] for e in events), events[-1]["choices"][0]["finish_reason"]

        reason = "length" if used == 10 else "stop"
        assert complete(False) == complete(True) == (expected, reason)
        sampled = complete(False, temperature=0.9, seed=11)
        assert complete(True, temperature=0.9, seed=11) == sampled
        assert complete(False, temperature=0.9, seed=12) != sampled
