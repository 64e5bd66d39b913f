#!/usr/bin/env python
"""Activation recompute none / selective / full (`distributed.recompute`, `models.recompute`): the activations a
training step keeps for backward and its step time, on the encoder `mini` preset (6 layers x 384, 12 heads, the
preset's 40,000-token vocabulary, dropout as the preset: 0.1) and the `ernie4.5-tiny` decoder (2 layers x 64, 4
query / 2 key-value heads), each under sdpa and eager attention, in one process.

The step is the pretraining engine's (`PlainEngine` from a recipe: the encoder's masked-LM loss on the sparse last
layer, or the decoder's causal-LM loss on packed rows of two documents; backward; clipping; fused AdamW), fp32 on
the CPU. The three recompute settings start from the same weights and see the same batches with the same dropout
draws (the losses must agree: recompute changes no number). Kept activations: the bytes of every storage autograd
saves for backward during the forward pass (torch.autograd.graph.saved_tensors_hooks, each storage once,
parameters left out), measured on the first batch; that is the peak of what is kept -- all of it is alive when
backward starts -- but not the transient working set a recompute rematerialises during one layer's backward (one
layer under full recompute, one attention core under selective), which the hooks do not see. Step time: median
of `--steps` steps, the three settings alternating step by step so load from other processes on this shared
machine hits them alike; the ratios use the process's CPU time per step (one thread: what the step computed,
little moved by the other processes' load), the wall-clock medians are recorded beside them. Ratios are to no
recompute, from the same run.

`planner_per_layer_ratio`: the planner's 16-bit per-layer formula (Korthikanti et al. 2022, Table 2;
`parallel.planner.activation_bytes_per_layer`) at the same s, b, h, a: selective s*b*h*34, full 2*s*b*h, against
s*b*h*(34 + 5*a*s/h); the measured ratios also hold the embeddings, the head and the loss, and fp32 on the CPU
(dropout keeps a 4-byte mask there, 1 byte on GPUs).

    OMP_NUM_THREADS=1 python bench/recompute.py                # writes bench/results/recompute.json
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
from pathlib import Path

from _pretrain_step import alternate, mlm_batch, random_feature_tables, timed_step

REPO = Path(__file__).resolve().parents[1]
MODES = ("none", "selective", "full")


def _saved_bytes(model, run) -> tuple[float, int]:
    """The loss of `run()` and the bytes of the activations autograd keeps for backward (each storage once)."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            kept.setdefault(ptr, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = run()
    return loss, sum(kept.values())


def _encoder(batch: int, seq: int):
    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.training.build import build_model

    config = preset_config("mini")
    vocab = config.vocab_size
    tables = random_feature_tables(config, vocab)

    def batch_of(step: int) -> dict:
        return mlm_batch(step, batch, seq, vocab)

    # a config each: the attention implementation (selective recompute's switch) lives on the model's config
    return config, (lambda: build_model(copy.deepcopy(config), tables, seed=0)), batch_of


def _decoder(batch: int, seq: int):
    import torch

    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.training.causal_lm import build_decoder_model

    config = preset_config("ernie4.5-tiny", max_position_embeddings=max(seq, 512))

    def batch_of(step: int) -> dict:
        gen = torch.Generator().manual_seed(step)
        ids = torch.randint(5, config.vocab_size, (batch, seq), generator=gen)
        cut = seq // 3  # two documents per row: per-document causal attention (a real mask)
        positions = torch.cat([torch.arange(cut), torch.arange(seq - cut)]).expand(batch, seq).clone()
        labels = ids.masked_fill(positions == 0, -100)
        return {
            "input_ids": ids,
            "position_ids": positions,
            "labels": labels,
            "attention_mask": torch.ones_like(ids),
        }

    return config, (lambda: build_decoder_model(copy.deepcopy(config), seed=0)), batch_of


def _bench(name: str, attention: str, batch: int, seq: int, steps: int) -> dict:
    import torch

    from ernie_zoo.models.recompute import apply_recompute
    from ernie_zoo.parallel.planner import activation_bytes_per_layer
    from ernie_zoo.training.backends import engine_for_recipe
    from ernie_zoo.training.recipe import OptimArgs, PretrainRecipe

    config, build, batch_of = (_encoder if name == "encoder" else _decoder)(batch, seq)
    engines = {}
    for mode in MODES:
        model = build()
        model.set_attn_implementation(attention)
        apply_recompute(model, mode)  # before the engine builds its optimizer, as engine_for_recipe does
        recipe = PretrainRecipe(
            max_steps=1000,
            micro_batch_size=batch,
            precision="fp32",
            optim=OptimArgs(lr=5e-4, warmup_steps=10),
        )
        engines[mode] = engine_for_recipe(recipe, model, torch.device("cpu"))

    def step(engine, i: int, forward=None) -> tuple[float, float, float]:
        b = batch_of(i)
        torch.manual_seed(100 + i)  # the same dropout draws for every setting
        return timed_step(engine, b, forward)

    kept, losses = {}, {}
    for mode, engine in engines.items():  # first step: the kept bytes (hooks on), not timed

        def hooked(b: dict, engine=engine, mode=mode):
            loss, kept[mode] = _saved_bytes(engine.model, lambda: engine.forward(b)[0])
            return loss

        losses[mode] = [step(engine, 0, hooked)[2]]
    times, cpu_times, timed_losses = alternate(engines, range(1, steps + 1), step)
    for mode in MODES:
        losses[mode] += timed_losses[mode]
    median = {m: statistics.median(cpu_times[m]) for m in MODES}
    wall = {m: statistics.median(times[m]) for m in MODES}
    s, b, h, a = seq, batch, config.hidden_size, config.num_attention_heads
    per_layer = {m: activation_bytes_per_layer(s, b, h, a, recompute=m) for m in MODES}
    return {
        "kept_activation_bytes": kept,
        "kept_ratio_to_none": {m: kept[m] / kept["none"] for m in MODES},
        "step_cpu_s_median": median,
        "step_time_ratio_to_none": {m: median[m] / median["none"] for m in MODES},
        "step_wall_s_median": wall,
        "step_wall_time_ratio_to_none": {m: wall[m] / wall["none"] for m in MODES},
        "planner_per_layer_ratio": {m: per_layer[m] / per_layer["none"] for m in MODES},
        "max_rel_loss_diff_to_none": max(
            abs(x - y) / abs(y) for m in MODES for x, y in zip(losses[m], losses["none"])
        ),
        "step_cpu_times_s": cpu_times,
        "step_wall_times_s": times,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per setting")
    parser.add_argument("--encoder-shape", type=int, nargs=2, default=(2, 256), metavar=("BATCH", "SEQ"))
    parser.add_argument("--decoder-shape", type=int, nargs=2, default=(2, 256), metavar=("BATCH", "SEQ"))
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "recompute.json")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    import torch

    torch.set_num_threads(1)
    results = {}
    for name, (batch, seq) in (("encoder", args.encoder_shape), ("decoder", args.decoder_shape)):
        for attention in ("sdpa", "eager"):
            results[f"{name}/{attention}"] = _bench(name, attention, batch, seq, args.steps)
            row = results[f"{name}/{attention}"]
            print(name, attention, row["kept_ratio_to_none"], row["step_time_ratio_to_none"], flush=True)
    out = {
        "command": " ".join(["OMP_NUM_THREADS=1 python bench/recompute.py", *sys.argv[1:]]),
        "models": {
            "encoder": "mini preset (6 layers x 384, 12 heads, FFN 1536, vocab 40000), dropout 0.1, masked-LM loss "
            f"on the sparse last layer; batch {args.encoder_shape[0]} x {args.encoder_shape[1]} tokens",
            "decoder": "ernie4.5-tiny preset (2 layers x 64, 4 query / 2 KV heads, head_dim 16, vocab 1000), "
            f"causal-LM loss on packed rows of 2 documents; batch {args.decoder_shape[0]} x "
            f"{args.decoder_shape[1]} tokens",
        },
        "precision": "fp32, CPU, 1 thread",
        "steps_timed_per_setting": args.steps,
        "torch": torch.__version__,
        "cpu": platform.machine(),
        "note": "shared 2-core machine (load average ~9): other jobs ran alongside; the three settings alternate "
        "step by step; step_time_ratio_to_none uses process CPU time (1 thread), the wall-clock ratios are beside it",
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
