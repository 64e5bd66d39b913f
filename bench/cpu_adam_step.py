"""DeepSpeed's CPU Adam (the optimizer ZeRO-Offload steps on the host) against torch's AdamW on this CPU: one
optimizer step over the same parameters, same threads, same run. Its throughput (parameters updated per second
per core) grounds the planner's `host_adam_params_per_s` assumption (`ernie_zoo.parallel.planner`).

    OMP_NUM_THREADS=1 python bench/cpu_adam_step.py --out bench/results/cpu_adam_step.json

Writes ratios and rates, no pass/fail: the numbers depend on the host's SIMD units and memory bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch


def _time_steps(optimizer: torch.optim.Optimizer, steps: int) -> float:
    optimizer.step()  # warm-up: state allocation
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=8_000_000, help="parameters per step")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=Path("bench/results/cpu_adam_step.json"))
    args = parser.parse_args()
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/work/torch_ext")
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    results = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        row = {}
        for name, make in {
            "deepspeed_cpu_adam": lambda ps: DeepSpeedCPUAdam(
                ps, lr=1e-3, weight_decay=0.01, adamw_mode=True
            ),
            "torch_adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, fused=True),
            "torch_adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, foreach=True),
        }.items():
            g = torch.Generator().manual_seed(0)
            params = [torch.nn.Parameter(torch.randn(args.params // 8, generator=g)) for _ in range(8)]
            for p in params:
                p.grad = torch.randn(p.shape, generator=g)
            seconds = _time_steps(make(params), args.steps)
            row[name] = {"seconds_per_step": seconds, "params_per_s": args.params / seconds}
        row["cpu_adam_speedup_over_fused_adamw"] = (
            row["torch_adamw_fused"]["seconds_per_step"] / row["deepspeed_cpu_adam"]["seconds_per_step"]
        )
        row["cpu_adam_params_per_s_per_thread"] = row["deepspeed_cpu_adam"]["params_per_s"] / threads
        results[f"threads_{threads}"] = row
    record = {
        "command": "OMP_NUM_THREADS=1 python bench/cpu_adam_step.py",
        "params": args.params,
        "steps": args.steps,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "note": "shared 2-core machine: other jobs ran alongside, so rates are lower bounds",
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
