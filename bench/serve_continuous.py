#!/usr/bin/env python
"""Generation serving: transformers' continuous batching vs today's dynamic batching vs one request at a time.

`ernie-zoo serve --task text_generation` in a subprocess on loopback, driven through `POST /v1/completions` (greedy,
`max_tokens` tokens each; prompts of 4-40 characters from tests/data/zh_sentences.txt) by an httpx async client at
concurrency 1 / 8 / 32, for two models:

* **generator**: the shipped ernie-zoo-mini-generator (ERNIE 4.5 dense, 4 layers, hidden 256, 7M parameters);
* **0.3b-replica**: ERNIE 4.5 0.3B's body (18 layers, hidden 1024, GQA 16 / 2 heads, SwiGLU 3072) with random
  seeded weights and the zoo's 16,000-character vocabulary (the published 103k vocabulary would make the random
  model emit ids the zoo tokenizer cannot decode): ~0.2B parameters, the decode cost of the real 0.3B per layer.

Server modes (one server process each, `--threads` torch threads):

* **one_at_a_time**: `--max_batch_size 1`, every request is its own `generate()` call, the others queue;
* **dynamic**: today's server, `--max_batch_size 64`: requests waiting while the model is busy run as one
  `generate()` (text_generation batches equal-length prompts only, it never pads); a streamed request runs its own
  `generate()` on a thread;
* **continuous**: `--continuous_batching true`: transformers' manager, requests join and leave the decode batch
  at each step.

Two request kinds: non-streamed (tokens/s, p50 / p99 latency; the first token arrives with the answer, so TTFT is
the latency) and streamed (`stream: true`: TTFT is the first text chunk), the latter for dynamic and continuous
only (one_at_a_time does not apply to streams: today each stream runs on its own thread). Tokens are the server's
`usage.completion_tokens`. Every request of a level must succeed; failures are counted and reported.

The client runs on the same machine (shared CPU): ratios between modes on the same run are the result, not absolute
times. Usage::

    .venv/bin/python bench/serve_continuous.py [--models generator,0.3b-replica] [--concurrency 1,8,32]
        [--requests 4,16,32] [--max-tokens 32] [--threads 1] [--out bench/results/serve_continuous.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

GENERATOR = REPO / "ernie_zoo" / "zoo" / "ernie-zoo-mini-generator"
SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"
MODES = {
    "one_at_a_time": ["--max_batch_size", "1"],
    "dynamic": ["--max_batch_size", "64"],
    "continuous": ["--continuous_batching", "true"],
}


def prompts(n: int, seed: int = 0) -> list[str]:
    text = "".join(SENTENCES.read_text(encoding="utf-8").split())
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(4, 40)
        start = rng.randrange(0, len(text) - length)
        out.append(text[start : start + length])
    return out


def replica(directory: Path) -> Path:
    """ERNIE 4.5 0.3B's shape with seeded random weights and the generator's tokenizer, saved as a model dir."""
    import torch

    from ernie_zoo.models.decoder import build_decoder, decoder_config
    from ernie_zoo.models.presets import DECODER_PRESETS

    fields = {**DECODER_PRESETS["ernie4.5-0.3b"], "vocab_size": 16000, "max_position_embeddings": 1024}
    config = decoder_config(
        **fields, bos_token_id=2, eos_token_id=3, pad_token_id=0, tie_word_embeddings=True
    )
    torch.manual_seed(0)
    model = build_decoder(config)
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(GENERATOR / name, directory / name)
    return directory


def start_server(model_dir: Path, mode: str, port: int, threads: int, log: Path) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "ernie_zoo.cli", "serve", "--task", "text_generation",
        "--task_path", f"text_generation={model_dir}", "--port", str(port), "--threads", str(threads),
        "--request_timeout_s", "600", *MODES[mode],
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not become ready")


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def one_request(
    client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int, stream: bool
) -> dict:
    body = {"model": "text_generation", "prompt": prompt, "max_tokens": max_tokens}
    started = time.perf_counter()
    if not stream:
        r = await client.post(f"{url}/v1/completions", json=body)
        r.raise_for_status()
        done = time.perf_counter() - started
        return {"ttft": done, "latency": done, "tokens": r.json()["usage"]["completion_tokens"]}
    body.update(stream=True, stream_options={"include_usage": True})
    first = None
    tokens = 0
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(event["error"]["message"])
            if first is None and event["choices"] and event["choices"][0]["text"]:
                first = time.perf_counter() - started
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    latency = time.perf_counter() - started
    return {"ttft": first if first is not None else latency, "latency": latency, "tokens": tokens}


async def level(url: str, texts: list[str], concurrency: int, max_tokens: int, stream: bool) -> dict:
    queue = list(texts)
    results: list[dict] = []
    failures: list[str] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while queue:
            prompt = queue.pop()
            try:
                results.append(await one_request(client, url, prompt, max_tokens, stream))
            except Exception as exc:  # counted, reported
                failures.append(f"{type(exc).__name__}: {exc}"[:200])

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await one_request(client, url, texts[0], 4, stream)  # warm-up (first-call costs, oneDNN, allocator)
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - started
    tokens = sum(r["tokens"] for r in results)

    def pct(key: str, q: float) -> float | None:
        values = sorted(r[key] for r in results)
        if not values:
            return None
        return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 1)

    return {
        "requests": len(texts),
        "failures": len(failures),
        "failure_examples": failures[:3],
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_p50_ms": pct("ttft", 0.5),
        "ttft_p99_ms": pct("ttft", 0.99),
        "latency_p50_ms": pct("latency", 0.5),
        "latency_p99_ms": pct("latency", 0.99),
        "latency_mean_ms": round(1000 * statistics.mean(r["latency"] for r in results), 1)
        if results
        else None,
        "wall_s": round(wall, 2),
    }


def ratios(modes: dict, levels: list[int]) -> dict:
    """Continuous over the other modes, per concurrency level (tokens/s; TTFT: dynamic's over continuous's)."""
    out = {}
    for c in (str(c) for c in levels if str(c) in modes["continuous"]["non_streamed"]):
        cont, cont_stream = modes["continuous"]["non_streamed"][c], modes["continuous"]["streamed"][c]
        dyn, dyn_stream = modes["dynamic"]["non_streamed"][c], modes["dynamic"]["streamed"][c]
        one = modes["one_at_a_time"]["non_streamed"][c]
        out[c] = {
            "continuous_vs_dynamic_tokens_per_s": round(cont["tokens_per_s"] / dyn["tokens_per_s"], 2),
            "continuous_vs_one_at_a_time_tokens_per_s": round(cont["tokens_per_s"] / one["tokens_per_s"], 2),
            "streamed_continuous_vs_dynamic_tokens_per_s": round(
                cont_stream["tokens_per_s"] / dyn_stream["tokens_per_s"], 2
            ),
            "latency_p50_dynamic_over_continuous": round(dyn["latency_p50_ms"] / cont["latency_p50_ms"], 2),
            "streamed_ttft_p50_dynamic_over_continuous": round(
                dyn_stream["ttft_p50_ms"] / cont_stream["ttft_p50_ms"], 2
            ),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="generator,0.3b-replica")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument(
        "--requests", default="4,16,32", help="requests per concurrency level, in the same order"
    )
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "serve_continuous.json"))
    args = parser.parse_args()
    from ernie_zoo.utils import free_port

    levels = [int(c) for c in args.concurrency.split(",")]
    counts = [int(n) for n in args.requests.split(",")]
    if len(counts) != len(levels):
        parser.error("--requests needs one count per --concurrency level")
    runs: dict = {}
    work = Path(tempfile.mkdtemp(prefix="serve_continuous_"))
    try:
        for model in args.models.split(","):
            model_dir = GENERATOR if model == "generator" else replica(work / "replica")
            runs[model] = {}
            for mode in MODES:
                log = work / f"{model}-{mode}.log"
                proc = start_server(model_dir, mode, free_port(), args.threads, log)
                url = f"http://127.0.0.1:{proc.args[proc.args.index('--port') + 1]}"
                try:
                    kinds = ["non_streamed"] + (["streamed"] if mode != "one_at_a_time" else [])
                    for kind in kinds:
                        for concurrency, n in zip(levels, counts):
                            result = asyncio.run(
                                level(
                                    url,
                                    prompts(n, seed=concurrency),
                                    concurrency,
                                    args.max_tokens,
                                    kind == "streamed",
                                )
                            )
                            runs[model].setdefault(mode, {}).setdefault(kind, {})[str(concurrency)] = result
                            print(model, mode, kind, concurrency, json.dumps(result), flush=True)
                finally:
                    stop_server(proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    # Merge into the results file: each model keeps the settings and command of the run that measured it.
    path = Path(args.out)
    saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    all_runs = saved.get("runs", {})
    for model, modes in runs.items():
        all_runs[model] = {
            "command": "python bench/serve_continuous.py " + " ".join(sys.argv[1:]),
            "max_tokens": args.max_tokens,
            "threads": args.threads,
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            **modes,
        }
    out = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "runs": all_runs,
        "ratios": {model: ratios(modes, levels) for model, modes in all_runs.items()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(out["ratios"], indent=2))


if __name__ == "__main__":
    main()
