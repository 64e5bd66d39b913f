#!/usr/bin/env python
"""GPU pretraining throughput and MFU of a ~1B ErnieZoo encoder (preset `1b`): DeepSpeed ZeRO-3 against the
single-device engine, bf16, one GPU, in one process one after the other.

* baseline: `ernie_zoo.training.engine.PlainEngine` as `ernie-pretrain` builds it (`backends.engine_for_recipe`:
  bf16 autocast, torch AdamW, gradient clipping) -- the reference engine.
* compiled: the baseline engine with the recipe's `torch_compile: true` (each encoder layer under
  `torch.compile(dynamic=True)`; issue #38 item 4): eager vs compiled MFU on one GPU. The first steps compile, so
  `--warmup` must cover them.
* deepspeed: `ernie_zoo.training.deepspeed_engine.DeepSpeedEngine` (from the recipe, as above) -- ZeRO-3 (bf16 parameters, fp32 master
  weights and Adam states in the partition, overlapped communication), the backend the 100B recipe uses.
  On one GPU ZeRO-3 partitions nothing, so the ratio measures its bookkeeping overhead.

Both run the loop's own loss (`masked_lm_loss`, masked-only MLM head, sparse last layer) on the same synthetic
batches: random token ids, every sequence full length, 15% of positions masked. Each step is timed from
`torch.cuda.synchronize()` to `torch.cuda.synchronize()`; the first `--warmup` steps are dropped; tokens/s is
tokens per step / median step time. MFU uses `ernie_zoo.training.mfu.training_flops` (what `ernie-pretrain`
reports) over the GPU's bf16 dense peak. Results: bench/results/gpu_pretrain.json, with the exact command.

Without CUDA it exits with status 1 and writes nothing (numbers measured on a CPU would not be GPU numbers).
`--smoke` runs the same code on the CPU with the `tiny` preset to check it works, writing only to `--out`.

Usage::

    .venv/bin/python bench/gpu_pretrain.py [--preset 1b] [--micro-batch 8] [--seq-len 512] [--steps 20]
        [--warmup 5] [--backends baseline,compiled,deepspeed]
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
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

RESULT = REPO / "bench" / "results" / "gpu_pretrain.json"


def make_recipe(args, compiled: bool = False):
    from ernie_zoo.training.recipe import OptimArgs, PretrainRecipe

    return PretrainRecipe(
        torch_compile=compiled,
        max_steps=args.warmup + args.steps,
        micro_batch_size=args.micro_batch,
        grad_accum_steps=1,
        precision="bf16",
        seed=0,
        sparse_last_layer=True,
        optim=OptimArgs(lr=1e-4, warmup_steps=2, grad_clip=1.0),
    )


def make_model(preset: str, seq_len: int):
    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.training.build import build_model

    config = preset_config(preset, max_position_embeddings=max(seq_len, 512))
    g = torch.Generator().manual_seed(1)
    vocab = config.vocab_size
    tables = {
        "default_pinyin_ids": torch.randint(0, config.pinyin_vocab_size, (vocab,), generator=g),
        "radical_ids": torch.randint(0, config.num_radicals + 1, (vocab,), generator=g),
        "stroke_counts": torch.randint(0, config.max_strokes + 1, (vocab,), generator=g),
    }
    return build_model(config, tables, seed=0)


def make_batches(n: int, micro_batch: int, seq_len: int, vocab: int, pinyin_vocab: int):
    g = torch.Generator().manual_seed(1234)
    batches = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (micro_batch, seq_len), generator=g)
        masked = torch.rand(micro_batch, seq_len, generator=g) < 0.15
        batches.append(
            {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "token_type_ids": torch.zeros_like(ids),
                "pinyin_ids": torch.randint(0, pinyin_vocab, (micro_batch, seq_len), generator=g),
                "labels": torch.where(masked, ids, -100),
            }
        )
    return batches


def run_backend(name: str, args, device: torch.device) -> dict:
    from ernie_zoo.training.mfu import peak_flops_for, training_flops

    recipe = make_recipe(args, compiled=name == "compiled")
    model = make_model(args.preset, args.seq_len)
    config = model.config
    batches = make_batches(
        args.warmup + args.steps, args.micro_batch, args.seq_len, config.vocab_size, config.pinyin_vocab_size
    )
    from ernie_zoo.training.backends import engine_for_recipe

    if name in ("baseline", "compiled"):
        engine = engine_for_recipe(recipe, model, device, backend="single")
    else:
        engine = engine_for_recipe(recipe, model, device, backend="deepspeed", tp_size=1, zero_stage=3)
    n_params = engine.num_parameters()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, flops, losses = [], [], []
    for i, batch in enumerate(batches):
        batch = {k: v.to(device) for k, v in batch.items()}
        sync()
        t0 = time.perf_counter()
        loss, n_masked, _ = engine.forward(batch)
        engine.backward(loss)
        engine.step()
        engine.zero_grad()
        sync()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= args.warmup:
            times.append(dt)
            flops.append(training_flops(config, args.micro_batch * args.seq_len, args.seq_len, n_masked))
    step_s = statistics.median(times)
    tokens = args.micro_batch * args.seq_len
    peak = peak_flops_for(device, "bf16") if device.type == "cuda" else None
    achieved = statistics.median(flops) / step_s
    result = {
        "parameters": n_params,
        "median_step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "model_flops_per_s": achieved,
        "mfu": achieved / peak if peak else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 1024**3 if device.type == "cuda" else None,
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    del engine, model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="1b")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backends", default="baseline,compiled,deepspeed")
    parser.add_argument("--smoke", action="store_true", help="CPU check of the code path (tiny preset)")
    parser.add_argument(
        "--out", type=Path, default=None, help="result path (default bench/results/gpu_pretrain.json)"
    )
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"baseline", "compiled", "deepspeed"}
    if unknown or not backends:
        parser.error(f"--backends takes baseline, compiled and/or deepspeed, got {args.backends!r}")

    if args.smoke:
        device = torch.device("cpu")
        torch.set_num_threads(1)
        args.preset = "tiny"
        if args.out is None or args.out.resolve() == RESULT.resolve():
            parser.error("--smoke needs --out outside bench/results (CPU numbers are not GPU results)")
    elif not torch.cuda.is_available():
        print(
            "gpu_pretrain: no CUDA device here. This benchmark measures GPU throughput and MFU, so it writes no "
            "numbers on a CPU; run it on a GPU machine (or use --smoke --out FILE to check the code path).",
            file=sys.stderr,
        )
        return 1
    else:
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    out = args.out or RESULT

    results = {name: run_backend(name, args, device) for name in backends}
    record = {
        "benchmark": "gpu_pretrain",
        "command": shlex.join([sys.executable, *sys.argv])
        if argv is None
        else shlex.join(["bench/gpu_pretrain.py", *argv]),
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "preset": args.preset,
        "micro_batch": args.micro_batch,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "warmup": args.warmup,
        "precision": "bf16",
        "smoke": args.smoke,
        "results": results,
    }
    if "baseline" in results and "compiled" in results:
        record["compiled_over_eager_tokens_per_s"] = (
            results["compiled"]["tokens_per_s"] / results["baseline"]["tokens_per_s"]
        )
    if "baseline" in results and "deepspeed" in results:
        record["deepspeed_over_baseline_tokens_per_s"] = (
            results["deepspeed"]["tokens_per_s"] / results["baseline"]["tokens_per_s"]
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, delete=False, suffix=".tmp") as f:
        json.dump(record, f, indent=2)
    os.replace(f.name, out)
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
