"""Process-group helpers: start torch.distributed from the launcher's environment, and run a script on
several local CPU ranks (gloo) -- what the multi-process tests and CPU smoke runs use.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from ernie_zoo.utils import CACHE_ROOT

logger = logging.getLogger(__name__)

#: DeepSpeed JIT-compiles a C++ op on its first CPU start (~60 s); a fixed directory makes that a one-off.
TORCH_EXTENSIONS_DIR = CACHE_ROOT / "torch_extensions"


def default_backend() -> str:
    """`nccl` when CUDA is available, else `gloo`."""
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def init_from_env(backend: str | None = None) -> tuple[int, int, int]:
    """Initialise the default process group from RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT
    (set by torchrun, the DeepSpeed launcher or srun + torchrun); returns (rank, world size, local rank).

    A process started without a launcher is rank 0 of 1. With CUDA, the local rank's GPU becomes current.
    """
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
        if world == 1 and "MASTER_ADDR" not in os.environ:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(free_port()))
        dist.init_process_group(backend=backend or default_backend(), rank=rank, world_size=world)
    return dist.get_rank(), dist.get_world_size(), local_rank


def free_port() -> int:
    """A TCP port that was free a moment ago on localhost."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local_ranks(
    args: list[str],
    nproc: int,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """Run `python <args>` on `nproc` local ranks with torchrun (`--standalone`: a free port, no clashes).

    One torch thread per rank, the fixed `TORCH_EXTENSIONS_DIR`, CUDA hidden (gloo on CPU). Raises
    RuntimeError with the tail of the output when any rank fails.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    full_env = dict(os.environ)
    full_env.update(
        OMP_NUM_THREADS="1",
        TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR", str(TORCH_EXTENSIONS_DIR)),
        CUDA_VISIBLE_DEVICES="",
        PYTHONUNBUFFERED="1",
    )
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    logger.info("running %s", " ".join(cmd))
    proc = subprocess.run(cmd, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-6000:]
        raise RuntimeError(f"{nproc}-rank run failed with exit code {proc.returncode}:\n{tail}")
    return proc


__all__ = ["TORCH_EXTENSIONS_DIR", "default_backend", "free_port", "init_from_env", "run_local_ranks"]
