"""Step time with and without a checkpoint save in flight (`checkpoint.async_save`, the pipeline backend's logical
checkpoints: `parallel.resharding`), in one run.

Two gloo ranks on the CPU run `PipelineEngine` at PP 2 on an encoder big enough that writing its checkpoint (weights
+ AdamW moments, fp32) spans several steps; every step is one micro batch of random token ids, 15% masked. In one
process group, one after the other:

    steps without a save            (--steps, after --warmup)
    save asynchronously, then the same number of steps: those that start before the save is complete on rank 0
                                     are the steps "with a save in flight"
    steps without a save again       (drift check)
    save synchronously               (what a step would wait for without async save)

Reported (rank 0's clock; every rank waits for the slowest in the step's collectives): median step time without a
save and with one in flight, their ratio, how many steps overlapped the save, the time the loop stopped for the
asynchronous save (the copy into CPU memory) and for the synchronous one, and the checkpoint's size. On a CPU the
writer threads share the cores with the training ranks, so the ratio is an upper bound of what a GPU run (compute
on the device, the copy and the write on the host) would see.

    python bench/async_save.py          # writes bench/results/async_save.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULT = REPO / "bench" / "results" / "async_save.json"


def _recipe(args):
    from ernie_zoo.training.recipe import DistributedArgs, OptimArgs, PretrainRecipe

    return PretrainRecipe(
        sparse_last_layer=False,
        max_steps=10_000,
        micro_batch_size=args.micro_batch,
        optim=OptimArgs(lr=1e-4, warmup_steps=0, decay="constant"),
        distributed=DistributedArgs(backend="pipeline", pp_size=2),
    )


def _model(args):
    import torch

    from ernie_zoo import ErnieZooConfig
    from ernie_zoo.training.build import build_model

    config = ErnieZooConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                            num_attention_heads=args.hidden // 64, intermediate_size=4 * args.hidden,
                            max_position_embeddings=args.seq_len, feature_fusion="add")  # fmt: skip
    tables = {
        k: torch.zeros(args.vocab, dtype=torch.long)
        for k in ("default_pinyin_ids", "radical_ids", "stroke_counts")
    }
    tables["stroke_seqs"] = torch.zeros(args.vocab, 32, dtype=torch.long)
    return build_model(config, tables, seed=0, meta=True)


def _worker(args) -> None:
    import torch
    import torch.distributed as dist

    from ernie_zoo.training.pipeline_engine import PipelineEngine

    torch.set_num_threads(1)
    engine = PipelineEngine(_recipe(args), _model(args), torch.device("cpu"))
    g = torch.Generator().manual_seed(0)

    def step() -> float:
        ids = torch.randint(5, args.vocab, (args.micro_batch, args.seq_len), generator=g)
        labels = torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, -100)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
        t0 = time.perf_counter()
        loss, _, _ = engine.forward(batch)
        engine.backward(loss)
        engine.step()
        engine.dp_sum([float(loss)])
        return time.perf_counter() - t0

    for _ in range(args.warmup):
        step()
    quiet = [step() for _ in range(args.steps)]
    out = Path(args.out_dir)
    t0 = time.perf_counter()
    pending = engine.save(out / "async", asynchronous=True)
    blocked_async = time.perf_counter() - t0
    in_flight, after = [], []
    for _ in range(args.steps):
        busy = not pending.done()
        (in_flight if busy else after).append(step())
    t0 = time.perf_counter()
    pending.result()
    waited = time.perf_counter() - t0
    dist.barrier()
    quiet_again = [step() for _ in range(args.steps)]
    t0 = time.perf_counter()
    engine.save(out / "sync")
    blocked_sync = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in (out / "sync").rglob("*") if p.is_file())
    result = {
        "rank": dist.get_rank(),
        "quiet": quiet,
        "in_flight": in_flight,
        "after_save_done": after,
        "quiet_again": quiet_again,
        "blocked_async_s": blocked_async,
        "waited_after_steps_s": waited,
        "blocked_sync_s": blocked_sync,
        "checkpoint_bytes": size,
        "parameters": engine.num_parameters(),
    }
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=21128)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        from ernie_zoo.parallel.distributed import finish_distributed

        finish_distributed()
        return 0

    from ernie_zoo.parallel.distributed import run_local_ranks

    with tempfile.TemporaryDirectory() as tmp:
        forwarded = [a for a in sys.argv[1:] if not a.startswith("--out")]
        run_local_ranks([__file__, *forwarded, "--worker", "--out-dir", tmp], nproc=2, timeout=1800, cwd=REPO)
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(2)]
    r0 = ranks[0]
    if not r0["in_flight"]:
        raise SystemExit("the save finished before the first step after it: raise --hidden or --layers")
    quiet = statistics.median(r0["quiet"] + r0["quiet_again"])
    busy = statistics.median(r0["in_flight"])
    result = {
        "command": "python bench/async_save.py " + shlex.join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch 1 thread per rank, 2 gloo ranks (PP 2)",
        "model": {
            "parameters": r0["parameters"],
            "hidden": args.hidden,
            "layers": args.layers,
            "vocab": args.vocab,
        },
        # the whole checkpoint directory (every rank's pieces in the shared directory, and model.safetensors)
        "checkpoint_mb": round(r0["checkpoint_bytes"] / 2**20, 1),
        "step_s_without_save": round(quiet, 4),
        "step_s_with_save_in_flight": round(busy, 4),
        "ratio_in_flight_over_without": round(busy / quiet, 3),
        "steps_with_save_in_flight": len(r0["in_flight"]),
        "step_s_without_save_before_after": [
            round(statistics.median(r0["quiet"]), 4),
            round(statistics.median(r0["quiet_again"]), 4),
        ],  # fmt: skip
        "loop_stopped_s": {
            "async_save": round(max(r["blocked_async_s"] for r in ranks), 4),
            "sync_save": round(max(r["blocked_sync_s"] for r in ranks), 4),
        },
        "note": "rank 0's clock; CPU: the writer threads share 2 cores with the 2 training ranks",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
