"""Process-group helpers: start torch.distributed from the launcher's environment (with a collective timeout,
so a dead or hung peer raises instead of blocking forever), and run a script on several local CPU ranks
(gloo) -- what the multi-process tests and CPU smoke runs use.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from ernie_zoo.utils import CACHE_ROOT, free_port

logger = logging.getLogger(__name__)

#: Seconds a collective waits for the other ranks before it raises (recipe key `distributed.timeout_s`).
DEFAULT_TIMEOUT_S = 600.0

#: DeepSpeed JIT-compiles a C++ op on its first CPU start (~60 s); a fixed directory makes that a one-off.
TORCH_EXTENSIONS_DIR = CACHE_ROOT / "torch_extensions"


def default_backend() -> str:
    """`nccl` when CUDA is available, else `gloo`."""
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def init_from_env(backend: str | None = None, timeout_s: float | None = None) -> tuple[int, int, int]:
    """Initialise the default process group from RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT
    (set by torchrun, the DeepSpeed launcher or srun + torchrun); returns (rank, world size, local rank).

    A process started without a launcher is rank 0 of 1. With CUDA, the local rank's GPU becomes current.
    timeout_s (None: `DEFAULT_TIMEOUT_S`): how long a collective waits for a peer before it raises (gloo) or
    NCCL's watchdog ends the process, so a rank that died or hangs ends the step on every rank and the launcher
    (torchrun's elastic agent, Slurm) can restart the job. Only the first call, which creates the group, sets it.
    """
    import datetime

    import torch
    import torch.distributed as dist

    # Without a launcher: rank 0 of 1 (DeepSpeed also insists on finding LOCAL_RANK in the environment).
    for key in ("RANK", "LOCAL_RANK"):
        os.environ.setdefault(key, "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and rank == 0:
            if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0:
                logger.warning(
                    "torchrun shares its rendezvous store with the ranks: a restarted group reads the old "
                    "ranks' addresses from it and cannot connect (pytorch/pytorch#135712); launch torchrun "
                    "with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (recipes/launch/common.sh sets it)"
                )
        if world == 1 and "MASTER_ADDR" not in os.environ:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(free_port()))
        timeout = datetime.timedelta(seconds=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
        dist.init_process_group(
            backend=backend or default_backend(), rank=rank, world_size=world, timeout=timeout
        )
    return dist.get_rank(), dist.get_world_size(), local_rank


def finish_distributed() -> None:
    """Destroy the default process group, if any, once a run has finished (every rank, after its last collective):
    a process that exits with a live group leaves its communication threads to the interpreter's teardown, where
    a rank can abort ("terminate called without an active exception") and fail a run that had finished. Objects
    left in reference cycles (ZeRO-3 partitioned parameters, an engine, a caught exception's frames) are collected
    first, while the group they may still talk to is alive: destroying it under them aborts the same way."""
    import gc

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def local_ranks_command(
    args: list[str], nproc: int, env: dict[str, str] | None = None, max_restarts: int = 0
) -> tuple[list[str], dict[str, str]]:
    """The torchrun command line and environment that run `python <args>` on `nproc` local ranks
    (`--standalone`: c10d rendezvous on a free port, no clashes; `max_restarts`: how often torchrun's elastic
    agent restarts the whole group after a rank fails). One torch thread per rank, the fixed
    `TORCH_EXTENSIONS_DIR`, CUDA hidden (gloo on CPU)."""
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    full_env = dict(os.environ)
    full_env.update(
        # a fresh rendezvous store per restart (a shared one hands restarted ranks stale addresses)
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
        OMP_NUM_THREADS="1",
        TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR", str(TORCH_EXTENSIONS_DIR)),
        CUDA_VISIBLE_DEVICES="",
        PYTHONUNBUFFERED="1",
    )
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += [f"--max-restarts={max_restarts}", *args]
    return cmd, full_env


def run_local_ranks(
    args: list[str],
    nproc: int,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """Run `python <args>` on `nproc` local ranks with torchrun (`local_ranks_command`, no restarts).

    Raises RuntimeError with the tail of the output when any rank fails.
    """
    cmd, full_env = local_ranks_command(args, nproc, env)
    logger.info("running %s", " ".join(cmd))
    proc = subprocess.run(cmd, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-6000:]
        raise RuntimeError(f"{nproc}-rank run failed with exit code {proc.returncode}:\n{tail}")
    return proc


__all__ = [
    "finish_distributed",
    "DEFAULT_TIMEOUT_S",
    "TORCH_EXTENSIONS_DIR",
    "default_backend",
    "init_from_env",
    "local_ranks_command",
    "run_local_ranks",
]
