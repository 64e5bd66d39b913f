#!/usr/bin/env python
"""`ernie-zoo serve` under load: a real HTTP client (httpx, asyncio) against uvicorn on loopback.

For each task (default: sentiment_analysis and ner, shipped models), on the same texts:

* **in-process**: `Taskflow(task, batch_size=32)(texts)` in this process, the ceiling a server can approach;
* **server**: `ernie-zoo serve` (one uvicorn worker, dynamic batching) at concurrency 1, 8 and 64, one text per
  request (the hard case for a server: every text pays the HTTP cost);
* **naive**: a one-request-at-a-time server (stdlib `http.server`, one thread, HTTP/1.0, `Taskflow(task)([text])`
  per request): what a user writes when they wrap Taskflow in a Flask view without batching.

Every level sends `--requests` requests (at most `--max-seconds` seconds) after a short warm-up and records
texts/s, p50/p99 latency, errors (limit errors 413/503 counted apart from the rest) and the server's RSS
before and after. `--rss-requests N` adds one long run of N requests at the highest concurrency with RSS sampled
every 1000 requests. `--kill-worker` starts a `--workers 2` server, SIGKILLs one worker mid-load and records
the errors the client saw and how long until the supervisor replaced it. `--sweep` records Taskflow's CPU time
per text on texts arriving in groups of 4/16/64 for forward batch sizes 1/2/4/8 (the server's --batch-size
default rests on it).

Texts: the real sentences of tests/data/zh_sentences.txt, joined and cut to lengths log-uniform over 8-256
characters (random.Random(0)). Server, naive server and in-process all use `--threads` torch threads; the
client runs in this process, on the same machine (loopback), so it competes with the server for the CPU: the
ratios are what one machine gives, client included. The result file records the machine's load average.

Usage::

    .venv/bin/python bench/bench_serve.py [--tasks sentiment_analysis,ner] [--requests 640] [--threads 2]
        [--concurrency 1,8,64] [--rss-requests 10000] [--kill-worker] [--sweep] [--out bench/results/serve.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
import psutil  # noqa: E402

SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"

try:  # the client's event loop: uvloop when installed (uvicorn[standard] brings it), as the server uses
    import uvloop

    run_async = uvloop.run
except ImportError:  # pragma: no cover
    run_async = asyncio.run


def make_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = [line for line in SENTENCES.read_text(encoding="utf-8").splitlines() if line]
    pool = "".join(rng.sample(lines, len(lines)) * 8)
    texts = []
    for _ in range(n):
        length = int(math.exp(rng.uniform(math.log(8), math.log(256))))
        start = rng.randrange(0, len(pool) - length)
        texts.append(pool[start : start + length])
    return texts


# --------------------------------------------------------------------------------------------- naive
def naive_server(task: str, port: int, threads: int) -> None:
    """One request at a time: HTTPServer (one thread), HTTP/1.0 (a connection per request), no batching."""
    import torch

    from ernie_zoo.taskflow import Taskflow

    torch.set_num_threads(threads)
    flow = Taskflow(task)
    flow(["热身"])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._reply(200, {"ready": True})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self._reply(200, {"task": task, "results": flow(body["texts"])})

        def _reply(self, status: int, content: dict) -> None:
            data = json.dumps(content, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    HTTPServer.request_queue_size = 256  # the default backlog of 5 would refuse most of 64 concurrent clients
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


# --------------------------------------------------------------------------------------------- client
async def load(
    url: str, texts: list[str], concurrency: int, n: int, max_seconds: float, per_request: int = 1
):
    """Send n requests of `per_request` texts with `concurrency` in flight; returns stats."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors: list[str] = []
    counter = iter(range(n))
    deadline = time.perf_counter() + max_seconds
    # httpx's pool costs CPU per request that grows with its number of connections (~4 ms at 64 on this
    # machine, more than the server spends): one client per 8 connections keeps the client cheap.
    per_client = min(concurrency, 8)
    limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
    clients = [
        httpx.AsyncClient(limits=limits, timeout=60) for _ in range(math.ceil(concurrency / per_client))
    ]
    async with contextlib.AsyncExitStack() as stack:
        for client in clients:
            await stack.enter_async_context(client)

        async def worker(client: httpx.AsyncClient) -> None:
            for i in counter:
                if time.perf_counter() > deadline:
                    return
                batch = [texts[(i * per_request + k) % len(texts)] for k in range(per_request)]
                started = time.perf_counter()
                try:
                    response = await client.post(url, json={"texts": batch})
                    key = str(response.status_code)
                    if response.status_code == 200:
                        results = response.json()["results"]
                        if [r["text"] for r in results] != batch:
                            key = "wrong_results"
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                    if len(errors) < 5:
                        errors.append(repr(exc))
                latencies.append(time.perf_counter() - started)
                statuses[key] = statuses.get(key, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(clients[i // per_client]) for i in range(concurrency)))
        wall = time.perf_counter() - started
    ok = statuses.get("200", 0)
    latencies.sort()
    return {
        "requests": len(latencies),
        "texts_per_s": round(ok * per_request / wall, 1),
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 1) if latencies else None,
        "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1)
        if latencies
        else None,
        "seconds": round(wall, 2),
        "statuses": statuses,
        "limit_errors": sum(v for k, v in statuses.items() if k in ("413", "503")),
        "other_errors": sum(v for k, v in statuses.items() if k not in ("200", "413", "503")),
        **({"error_samples": errors} if errors else {}),
    }


def rss_mb(pid: int) -> float:
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return round(total / 2**20, 1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children (the server's work, whatever else runs)."""
    proc = psutil.Process(pid)
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout} s")


def start(cmd: list[str], threads: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))  # noqa: SIM115


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    from ernie_zoo.utils import free_port

    return free_port()


# --------------------------------------------------------------------------------------------- runs
def in_process(task: str, texts: list[str], threads: int, batch_size: int, rounds: int = 2) -> dict:
    import torch

    from ernie_zoo.taskflow import Taskflow

    torch.set_num_threads(threads)
    flow = Taskflow(task, batch_size=batch_size)
    flow(texts[:32])
    best = math.inf
    cpu = math.inf
    for _ in range(rounds):
        c0, t0 = time.process_time(), time.perf_counter()
        flow(texts)
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return {
        "batch_size": batch_size,
        "texts_per_s": round(len(texts) / best, 1),
        "cpu_ms_per_text": round(1000 * cpu / len(texts), 2),
    }


def sweep(task: str, texts: list[str], threads: int) -> dict:
    """CPU ms per text of Taskflow on texts arriving in groups of 4/16/64 (as merged from requests, unsorted
    across groups) for forward batch sizes 1/2/4/8: what the server's --batch-size default rests on."""
    import torch

    from ernie_zoo.taskflow import Taskflow

    torch.set_num_threads(threads)
    table = {}
    for bs in (1, 2, 4, 8):
        flow = Taskflow(task, batch_size=bs)
        flow(texts[:16])
        row = {}
        for group in (4, 16, 64):
            c0 = time.process_time()
            for i in range(0, len(texts), group):
                flow(texts[i : i + group])
            row[f"groups_of_{group}"] = round(1000 * (time.process_time() - c0) / len(texts), 2)
        table[f"batch_size_{bs}"] = row
        print(f"  sweep {task} batch_size {bs}: {row}", flush=True)
    return table


def run_levels(url: str, pid: int, texts, levels, args) -> dict:
    out = {"rss_mb_start": rss_mb(pid)}
    run_async(load(url, texts, 8, 64, 30))  # warm-up: connections, kernel caches
    out["rss_mb_after_warmup"] = rss_mb(pid)
    for c in levels:
        n = args.requests if c > 1 else max(50, args.requests // 4)
        server_cpu, client_cpu = cpu_seconds(pid), time.process_time()
        out[f"c{c}"] = stats = run_async(load(url, texts, c, n, args.max_seconds))
        texts_done = stats["statuses"].get("200", 0)
        stats["server_cpu_ms_per_text"] = round(
            1000 * (cpu_seconds(pid) - server_cpu) / max(texts_done, 1), 2
        )
        stats["client_cpu_ms_per_text"] = round(
            1000 * (time.process_time() - client_cpu) / max(texts_done, 1), 2
        )
        stats["rss_mb_after"] = rss_mb(pid)
        print(f"  c={c}: {out[f'c{c}']}", flush=True)
    return out


def bench_task(task: str, texts: list[str], args, logs: Path) -> dict:
    levels = [int(c) for c in args.concurrency.split(",")]
    result: dict = {}
    print(f"{task}: in-process Taskflow", flush=True)
    result["in_process"] = in_process(task, texts, args.threads, 32)  # Taskflow's default batch size
    result["in_process_bs2"] = in_process(task, texts, args.threads, 2)  # the server's forward batch
    print(f"  {result['in_process']} {result['in_process_bs2']}", flush=True)

    port = free_port()
    cmd = [sys.executable, "-m", "ernie_zoo.cli", "serve", "--task", task, "--port", str(port)]
    cmd += ["--threads", str(args.threads), "--max-wait-ms", str(args.max_wait_ms)]
    print(f"{task}: server ({shlex.join(cmd[1:])})", flush=True)
    proc = start(cmd, args.threads, logs / f"serve-{task}.log")
    try:
        wait_ready(f"http://127.0.0.1:{port}/ready", proc)
        url = f"http://127.0.0.1:{port}/v1/{task}"
        result["server"] = run_levels(url, proc.pid, texts, levels, args)
        if args.rss_requests and task == args.tasks.split(",")[0]:  # one long run, on the first task
            result["rss_run"] = rss_run(url, proc.pid, texts, max(levels), args.rss_requests)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        result["server"]["mean_batch_size"] = mean_batch(metrics, task)
    finally:
        stop(proc)
        result.setdefault("server", {})["exit_code"] = proc.returncode

    if not args.no_naive:
        port = free_port()
        cmd = [
            sys.executable,
            __file__,
            "--naive-server",
            task,
            "--port",
            str(port),
            "--threads",
            str(args.threads),
        ]
        print(f"{task}: naive server", flush=True)
        proc = start(cmd, args.threads, logs / f"naive-{task}.log")
        try:
            wait_ready(f"http://127.0.0.1:{port}/ready", proc)
            result["naive"] = run_levels(f"http://127.0.0.1:{port}/v1/{task}", proc.pid, texts, levels, args)
        finally:
            stop(proc)
    top = f"c{max(levels)}"
    server = result["server"][top]["texts_per_s"]
    result["ratios_at_top_concurrency"] = {
        "concurrency": max(levels),
        "server_vs_in_process": round(server / result["in_process"]["texts_per_s"], 3),
        "server_vs_in_process_bs2": round(server / result["in_process_bs2"]["texts_per_s"], 3),
        "cpu_per_text_in_process_over_server": round(
            result["in_process"]["cpu_ms_per_text"] / result["server"][top]["server_cpu_ms_per_text"], 3
        ),
        **(
            {"server_vs_naive": round(server / result["naive"][top]["texts_per_s"], 3)}
            if "naive" in result
            else {}
        ),
    }
    print(f"  ratios: {result['ratios_at_top_concurrency']}", flush=True)
    return result


def mean_batch(metrics: str, task: str) -> float | None:
    values = {}
    for line in metrics.splitlines():
        for kind in ("sum", "count"):
            if line.startswith(f"ernie_zoo_batch_size_{kind}{{") and f'task="{task}"' in line:
                values[kind] = float(line.rsplit(" ", 1)[1])
    return round(values["sum"] / values["count"], 2) if values.get("count") else None


def rss_run(url: str, pid: int, texts: list[str], concurrency: int, n: int) -> dict:
    """n requests in blocks of 1000, RSS after each block."""
    samples, totals = [], {"requests": 0, "other_errors": 0, "limit_errors": 0}
    started = time.perf_counter()
    for done in range(0, n, 1000):
        stats = run_async(load(url, texts, concurrency, min(1000, n - done), 600))
        for key in totals:
            totals[key] += stats[key]
        samples.append(rss_mb(pid))
        print(
            f"  rss run: {done + min(1000, n - done)} requests, RSS {samples[-1]} MB, {stats['statuses']}",
            flush=True,
        )
    return {
        **totals,
        "concurrency": concurrency,
        "seconds": round(time.perf_counter() - started, 1),
        "rss_mb_every_1000_requests": samples,
        "rss_growth_mb_after_first_block": round(samples[-1] - samples[0], 1),
    }


def kill_worker(task: str, texts: list[str], args, logs: Path) -> dict:
    """--workers 2 under load at concurrency 8; SIGKILL one worker; count the errors the client sees."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "ernie_zoo.cli",
        "serve",
        "--task",
        task,
        "--port",
        str(port),
        "--workers",
        "2",
    ]
    cmd += ["--threads", "1"]
    proc = start(cmd, 1, logs / f"kill-{task}.log")
    try:
        wait_ready(f"http://127.0.0.1:{port}/ready", proc)
        time.sleep(5)  # both workers up
        workers = [
            c.pid for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())
        ]
        victim = workers[0]
        box: dict = {}

        def killer() -> None:
            time.sleep(3)
            os.kill(victim, signal.SIGKILL)
            box["killed_at"] = time.monotonic()

        threading.Thread(target=killer, daemon=True).start()
        url = f"http://127.0.0.1:{port}/v1/{task}"
        stats = run_async(load(url, texts, 8, args.kill_requests, 120))
        replaced = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = [
                c.pid for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())
            ]
            if len(now) == 2 and victim not in now:
                replaced = round(time.monotonic() - box["killed_at"], 1)
                break
            time.sleep(0.5)
        after = run_async(load(url, texts, 8, 200, 60))
        return {"workers": 2, "during": stats, "replaced_after_s": replaced, "after_replacement": after}
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="sentiment_analysis,ner")
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--requests", type=int, default=640, help="requests per level (a quarter at c=1)")
    parser.add_argument("--max-seconds", type=float, default=60, help="cap per level")
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the client gets a core)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--rss-requests", type=int, default=0, help="one long run of this many requests")
    parser.add_argument("--kill-worker", action="store_true", help="--workers 2, one SIGKILLed mid-load")
    parser.add_argument("--kill-requests", type=int, default=1500)
    parser.add_argument("--no-naive", action="store_true")
    parser.add_argument(
        "--sweep", action="store_true", help="CPU ms/text by forward batch size and group size"
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "serve.json"))
    parser.add_argument("--naive-server", metavar="TASK", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.naive_server:
        naive_server(args.naive_server, args.port, args.threads)
        return

    texts = make_texts(args.texts)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_serve_logs"
    logs.mkdir(exist_ok=True)
    load_before = os.getloadavg()
    started = time.time()
    out: dict = {
        "command": shlex.join([sys.executable.replace(str(REPO) + "/", ""), *sys.argv]),
        "torch_threads": args.threads,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_before": [round(x, 2) for x in load_before],
        },
        "texts": {
            "n": len(texts),
            "chars_min_mean_max": [
                min(map(len, texts)),
                round(sum(map(len, texts)) / len(texts), 1),
                max(map(len, texts)),
            ],
            "source": "tests/data/zh_sentences.txt joined and cut to log-uniform 8-256 chars, random.Random(0)",
        },
        "requests": f"{args.requests} per level ({max(50, args.requests // 4)} at c=1), one text per request, "
        f"at most {args.max_seconds:g} s per level",
        "server": "ernie-zoo serve, 1 uvicorn worker, max_batch_size 64 (texts merged), batch_size 2 (forward), "
        f"max_wait_ms {args.max_wait_ms:g}",
        "naive": "stdlib http.server, one thread, HTTP/1.0, Taskflow([text]) per request",
        "tasks": {},
    }
    for task in args.tasks.split(","):
        out["tasks"][task] = bench_task(task, texts, args, logs)
        if args.sweep:
            out["tasks"][task]["forward_batch_sweep_cpu_ms_per_text"] = sweep(task, texts[:256], args.threads)
    if args.kill_worker:
        task = args.tasks.split(",")[0]
        print(f"{task}: kill one of 2 workers mid-load", flush=True)
        out["kill_worker"] = {"task": task, **kill_worker(task, texts, args, logs)}
        print(f"  {out['kill_worker']}", flush=True)
    out["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    out["seconds"] = round(time.time() - started, 1)
    Path(args.out).write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
