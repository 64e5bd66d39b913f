"""Multi-node launch scripts, run as DRY_RUN=1: the printed commands parse with the real launchers' own
argument parsers (DeepSpeed's runner, torchrun) and carry the right nodes, GPUs, rendezvous, restarts and
recipe. Failures: a collective with a silent peer raises after `timeout_s` (2 gloo ranks), and `ernie-pretrain`
under torchrun's elastic agent survives a SIGKILLed rank and ends with the weights of an uninterrupted run.

The hang worker is this file run under torchrun (`--hang-worker`)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "recipes" / "launch"
SCRIPTS = ("deepspeed_hostfile.sh", "torchrun_rendezvous.sh", "slurm.sbatch", "common.sh")


def _dry_run(script: str, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SLURM_", "MASTER_"))}
    full_env.update(DRY_RUN="1", **env)
    return subprocess.run(
        ["bash", str(LAUNCH / script), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _command(stdout: str) -> list[str]:
    lines = [line for line in stdout.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 1, stdout
    return shlex.split(lines[0])


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_are_valid_bash(script):
    assert subprocess.run(["bash", "-n", str(LAUNCH / script)], capture_output=True).returncode == 0


def test_deepspeed_hostfile_dry_run(tmp_path):
    from deepspeed.launcher.runner import parse_args

    proc = _dry_run(
        "deepspeed_hostfile.sh",
        str(LAUNCH / "hostfile.example"),
        "recipes/pretrain/ernie-100b.yaml",
        "--max_steps",
        "10",
        cwd=tmp_path,
        NCCL_IB_HCA="mlx5_0,mlx5_1",
        GPUS_PER_NODE="4",
    )
    assert proc.returncode == 0, proc.stderr
    cmd = _command(proc.stdout)
    assert cmd[0] == "deepspeed"
    args = parse_args(cmd[1:])
    assert args.num_nodes == 2  # two hosts in hostfile.example
    assert args.num_gpus == 4
    assert args.master_addr == "gpu-node-001"  # the first host
    assert args.master_port == 29500
    assert args.module and args.no_local_rank
    assert args.user_script == "ernie_zoo.training.pretrain"
    assert args.user_args == ["recipes/pretrain/ernie-100b.yaml", "--max_steps", "10"]
    # the env file the launcher forwards to every node: printed, not written, in a dry run
    env_lines = [line[2:] for line in proc.stdout.splitlines() if line.startswith("# ") and "=" in line]
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1" in env_lines
    assert any(line.startswith("TORCH_EXTENSIONS_DIR=") for line in env_lines)
    assert not any(line.startswith("NCCL_SOCKET_IFNAME=") for line in env_lines)  # unset: NCCL detects it
    assert not (tmp_path / ".deepspeed_env").exists()


def test_deepspeed_hostfile_errors(tmp_path):
    proc = _dry_run("deepspeed_hostfile.sh", str(tmp_path / "missing"), "r.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "hostfile" in proc.stderr and "not found" in proc.stderr
    empty = tmp_path / "hosts"
    empty.write_text("# nothing here\n\n")
    proc = _dry_run("deepspeed_hostfile.sh", str(empty), "r.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "lists no hosts" in proc.stderr


def test_torchrun_rendezvous_dry_run(tmp_path):
    from torch.distributed.run import get_args_parser

    proc = _dry_run(
        "torchrun_rendezvous.sh",
        "recipes/pretrain/ernie-100b.yaml",
        "--optim.lr",
        "1e-4",
        cwd=tmp_path,
        NUM_NODES="64",
        MASTER_ADDR="gpu-node-001",
        MASTER_PORT="29600",
        RDZV_ID="job42",
    )
    assert proc.returncode == 0, proc.stderr
    cmd = _command(proc.stdout)
    assert cmd[0] == "torchrun"
    args = get_args_parser().parse_args(cmd[1:])
    assert (args.nnodes, args.nproc_per_node) == ("64", "8")
    assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == ("c10d", "gpu-node-001:29600", "job42")
    assert args.max_restarts == 3  # the documented default (common.sh)
    # ... which works only with a fresh rendezvous store per restart (pytorch/pytorch#135712)
    env = subprocess.run(
        ["bash", "-c", f"source {LAUNCH / 'common.sh'}; echo $TORCH_DISABLE_SHARE_RDZV_TCP_STORE"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"},
    )
    assert env.stdout.strip() == "1"
    assert args.module and args.training_script == "ernie_zoo.training.pretrain"
    assert args.training_script_args == ["recipes/pretrain/ernie-100b.yaml", "--optim.lr", "1e-4"]
    proc = _dry_run("torchrun_rendezvous.sh", "r.yaml", cwd=tmp_path, MASTER_ADDR="x")
    assert proc.returncode == 2 and "NUM_NODES" in proc.stderr
    proc = _dry_run(
        "torchrun_rendezvous.sh", "r.yaml", cwd=tmp_path, NUM_NODES="1", MASTER_ADDR="x", MAX_RESTARTS="0"
    )
    assert get_args_parser().parse_args(_command(proc.stdout)[1:]).max_restarts == 0


def test_slurm_dry_run(tmp_path):
    from torch.distributed.run import get_args_parser

    proc = _dry_run(
        "slurm.sbatch",
        "recipes/pretrain/ernie-100b.yaml",
        "--output_dir",
        "runs/a b",
        cwd=tmp_path,
        SLURM_JOB_NODELIST="gpu-node-[001-002]",
        SLURM_NNODES="2",
        SLURM_JOB_ID="4242",
        MASTER_ADDR="gpu-node-001",
        ERNIE_ZOO_REPO=str(LAUNCH.parents[1]),
    )
    assert proc.returncode == 0, proc.stderr
    cmd = _command(proc.stdout)
    assert cmd[0] == "srun" and "--kill-on-bad-exit=1" in cmd
    assert cmd[cmd.index("--nodes") + 1] == "2"
    torchrun = cmd.index("torchrun")
    args = get_args_parser().parse_args(cmd[torchrun + 1 :])
    assert args.nnodes == "2" and args.rdzv_id == "4242" and args.rdzv_endpoint == "gpu-node-001:29500"
    assert args.max_restarts == 3
    # a failed job requeues itself (SLURM_RESTART_COUNT counts the requeues), and Slurm requeues on node failure
    assert "# on failure: scontrol requeue 4242 (requeued 0 of 2 times so far)" in proc.stdout
    assert "#SBATCH --requeue" in (LAUNCH / "slurm.sbatch").read_text()
    # an argument with a space survives the quoting
    assert args.training_script_args == ["recipes/pretrain/ernie-100b.yaml", "--output_dir", "runs/a b"]
    proc = _dry_run("slurm.sbatch", "r.yaml", cwd=tmp_path, ERNIE_ZOO_REPO=str(LAUNCH.parents[1]))
    assert proc.returncode == 2 and "SLURM_JOB_NODELIST is not set" in proc.stderr


# ------------------------------------------------------------------------------------------- failures
@pytest.mark.distributed
def test_a_silent_peer_makes_the_collective_raise_after_the_timeout(tmp_path):
    """Rank 1 never joins the all-reduce: with `init_from_env(timeout_s=2)` rank 0's collective raises a
    timeout error instead of waiting forever (what lets torchrun restart a job with a hung rank)."""
    from ernie_zoo.parallel.distributed import run_local_ranks

    run_local_ranks([__file__, "--hang-worker", str(tmp_path)], nproc=2, timeout=180, cwd=REPO)
    result = json.loads((tmp_path / "result.json").read_text())
    assert "timed out" in result["error"].lower(), result
    assert result["seconds"] >= 1.5  # it waited for the peer (the 2 s timeout), it did not fail at once


def _hang_worker(out: Path) -> None:
    import torch
    import torch.distributed as dist

    from ernie_zoo.parallel.distributed import init_from_env

    rank, _, _ = init_from_env("gloo", timeout_s=2)
    if rank == 1:  # the hung rank: never joins, leaves once rank 0 has its verdict
        while not (out / "done").exists():
            time.sleep(0.05)
        return
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1))
        error = "no error"
    except Exception as e:  # noqa: BLE001  (the point: which error, reported to the test)
        error = f"{type(e).__name__}: {e}"
    result = {"error": error, "seconds": time.monotonic() - t0}
    (out / "result.json").write_text(json.dumps(result))
    (out / "done").touch()


def _pretrain_args(out: Path, tok: Path) -> list[str]:
    """The tiny-cpu recipe on the deepspeed backend (ZeRO-3 over gloo): 12 steps, a checkpoint every 4."""
    return [
        *("-m", "ernie_zoo.training.pretrain", str(REPO / "recipes/pretrain/tiny-cpu.yaml")),
        *("--output_dir", str(out), "--tokenizer.path", str(tok), "--max_steps", "12"),
        *("--data.files", f"[{REPO / 'tests/data/zh_sentences.txt'}]", "--distributed.backend", "deepspeed"),
        *("--distributed.deepspeed_config", str(REPO / "recipes/deepspeed/zero3-cpu-test.json")),
        *("--distributed.timeout_s", "60", "--checkpoint.interval", "4", "--checkpoint.keep_last", "5"),
        *("--eval.interval", "0", "--logging.interval", "1", "--logging.progress_bar", "false"),
        *("--logging.tensorboard", "false", "--optim.warmup_steps", "1"),
    ]


def _worker_pid(agent: int, rank: int) -> int | None:
    """The pid of the torchrun worker of `rank` under the agent process `agent` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # after "pid (comm)": state, ppid
            children.setdefault(ppid, []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    todo = list(children.get(agent, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            env = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and any(e.startswith(b"TORCHELASTIC_RUN_ID=") for e in env):
            return pid
    return None


@pytest.mark.distributed
@pytest.mark.slow
def test_torchrun_restarts_a_killed_rank_and_ends_with_the_uninterrupted_weights(tmp_path, tiny_tokenizer):
    """`torchrun --standalone --nproc-per-node 2 --max-restarts 2 -m ernie_zoo.training.pretrain`: rank 1 is
    SIGKILLed once a checkpoint exists; the elastic agent restarts both ranks, they resume from the newest
    valid checkpoint, the job exits 0 by itself, and every tensor of the final model.safetensors and of both
    ZeRO partitions (fp32 master weights, Adam moments) equals an uninterrupted run's bit for bit, as does
    every step's logged loss."""
    import torch
    from safetensors.torch import load_file

    from ernie_zoo.parallel.distributed import local_ranks_command, run_local_ranks
    from ernie_zoo.training.logging_utils import read_metrics

    tok = tmp_path / "tok"
    tiny_tokenizer.save_pretrained(tok)
    straight, elastic = tmp_path / "straight", tmp_path / "elastic"
    run_local_ranks(_pretrain_args(straight, tok), nproc=2, timeout=600, cwd=REPO)

    cmd, env = local_ranks_command(_pretrain_args(elastic, tok), 2, max_restarts=2)
    log = tmp_path / "elastic.log"
    with open(log, "w") as f:
        agent = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not (elastic / "checkpoint-4").is_dir():
            assert agent.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "no checkpoint-4 after 300 s"
            time.sleep(0.05)
        victim = _worker_pid(agent.pid, rank=1)
        assert victim is not None, "rank 1's process not found"
        os.kill(victim, signal.SIGKILL)
        killed_after = [p.name for p in sorted(elastic.glob("checkpoint-*"))]
        assert agent.wait(timeout=600) == 0, log.read_text()[-6000:]
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=60)
    text = log.read_text()
    assert "checkpoint-12" not in killed_after, "the run ended before the kill: no restart was tested"
    # the agent saw rank 1 die (SIGKILL: -9), restarted the group, and rank 0 resumed from a checkpoint
    assert "exitcode: -9) local_rank: 1" in text and "resumed from" in text, text[-6000:]

    for name in ("model.safetensors", "zero/rank00000.safetensors", "zero/rank00001.safetensors"):
        a, b = (load_file(str(run / "checkpoint-12" / name)) for run in (straight, elastic))
        assert a.keys() == b.keys() and a, name
        assert all(torch.equal(a[k], b[k]) for k in a), name

    def losses(run: Path) -> list[tuple[int, float]]:
        return [
            (r["step"], r["train/loss"]) for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r
        ]

    assert losses(straight) == losses(elastic) and len(losses(straight)) == 12


if __name__ == "__main__" and sys.argv[1:2] == ["--hang-worker"]:
    _hang_worker(Path(sys.argv[2]))
