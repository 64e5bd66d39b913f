"""Corpus-scale inference on Ray (#39 item 5): `ernie-zoo taskflow TASK -i FILE -o OUT --engine ray --workers 2` on a
local single-node Ray cluster writes the local engine's file byte for byte (one Taskflow per actor, blocks in input
order), and a --resume job SIGKILLed halfway and started again neither loses nor duplicates a line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

TEXTS = [f"第{i}家餐厅的服务{'非常棒！' if i % 3 else '太差了，再也不来了。'}" for i in range(1, 241)]


def _cli(src, out, *extra):
    return [sys.executable, "-m", "ernie_zoo.cli", "taskflow", "sentiment_analysis", "-i", str(src), "-o", str(out),
            "--batch-size", "2", "--digits", "6", "--no-progress", *extra]  # fmt: skip


def ray_processes(tmpdir: str) -> list:
    """The running processes of the Ray instances started under `tmpdir` (this test's RAY_TMPDIR): named in their
    command line or holding a file there open (the agents retitle themselves "ray::DashboardAgent", but keep their
    logs open in the session directory). Never another Ray on the machine."""
    import psutil

    found = []
    for process in psutil.process_iter():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if tmpdir in " ".join(process.cmdline()) or any(
                f.path.startswith(tmpdir) for f in process.open_files()
            ):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_for_no_ray_processes(tmpdir: str, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while (left := ray_processes(tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [f"{p.pid} {p.name()}" for p in left]


@pytest.fixture
def env(tmp_path):
    import shutil
    import tempfile

    import psutil

    short = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    try:
        yield {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1", "RAY_TMPDIR": short}
    finally:
        # only this test's Ray (a failed test may leave one); `ray stop --force` would stop a user's cluster too
        left = ray_processes(short)
        for process in left:
            process.kill()
        psutil.wait_procs(left, timeout=10)
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.slow
def test_ray_engine_writes_the_local_file_and_resumes_after_kill(tmp_path, env):
    import ray  # noqa: F401  (a dev dependency: the test runs, it is not skipped)

    src = tmp_path / "big.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    local = tmp_path / "local.jsonl"
    subprocess.run(_cli(src, local), env=env, check=True, capture_output=True)
    on_ray = tmp_path / "ray.jsonl"
    run = subprocess.run(_cli(src, on_ray, "--engine", "ray", "--workers", "2"), env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert wait_for_no_ray_processes(env["RAY_TMPDIR"], timeout=10) == []  # a finished job leaves nothing
    assert on_ray.read_bytes() == local.read_bytes()
    rows = [json.loads(line) for line in local.read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in rows] == TEXTS and {r["label"] for r in rows} == {"positive", "negative"}

    whole = tmp_path / "whole.jsonl"
    subprocess.run(_cli(src, whole, "--resume"), env=env, check=True, capture_output=True)
    part = tmp_path / "part.jsonl"
    job = subprocess.Popen(_cli(src, part, "--resume", "--engine", "ray", "--workers", "2"), env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while (not part.exists() or part.read_bytes().count(b"\n") < 40) and time.monotonic() < deadline:
        time.sleep(0.01)
    # the driver alone, as `kill -9 PID` does (a kill of its process group took Ray's helpers with it and hid that
    # they outlived it: the raylet's DashboardAgent and RuntimeEnvAgent, parent PID 1)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    # nothing the killed job started outlives it (the agents used to stay for a minute and more)
    assert wait_for_no_ray_processes(env["RAY_TMPDIR"], timeout=10) == []
    written = part.read_bytes()
    assert 40 <= written.count(b"\n") < len(TEXTS)  # killed halfway
    part.write_bytes(written + '{"text": "半'.encode())  # as if killed mid-line
    again = subprocess.run(_cli(src, part, "--resume", "--engine", "ray", "--workers", "2"), env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert part.read_bytes() == whole.read_bytes()
    assert wait_for_no_ray_processes(env["RAY_TMPDIR"], timeout=10) == []  # nor the resumed job


def test_ray_engine_needs_an_input_file(capsys):
    from ernie_zoo.cli import main

    assert main(["taskflow", "word_segmentation", "--engine", "ray", "你好"]) == 2
    assert "--engine ray reads --input FILE" in capsys.readouterr().err
