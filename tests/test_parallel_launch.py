"""Multi-node launch scripts, run as DRY_RUN=1: the printed commands parse with the real launchers' own
argument parsers (DeepSpeed's runner, torchrun) and carry the right nodes, GPUs, rendezvous and recipe."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

LAUNCH = Path(__file__).resolve().parents[1] / "recipes" / "launch"
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
    assert args.module and args.training_script == "ernie_zoo.training.pretrain"
    assert args.training_script_args == ["recipes/pretrain/ernie-100b.yaml", "--optim.lr", "1e-4"]
    proc = _dry_run("torchrun_rendezvous.sh", "r.yaml", cwd=tmp_path, MASTER_ADDR="x")
    assert proc.returncode == 2 and "NUM_NODES" in proc.stderr


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
    # an argument with a space survives the quoting
    assert args.training_script_args == ["recipes/pretrain/ernie-100b.yaml", "--output_dir", "runs/a b"]
    proc = _dry_run("slurm.sbatch", "r.yaml", cwd=tmp_path, ERNIE_ZOO_REPO=str(LAUNCH.parents[1]))
    assert proc.returncode == 2 and "SLURM_JOB_NODELIST is not set" in proc.stderr
