"""What the pretraining-step benches share (bench/compile_step.py, bench/recompute.py): random character-feature
tables and masked-LM batches for the encoder, one timed optimizer step of an engine, and the loop that times
several engines taking turns step by step, so load from other processes on this shared machine hits them alike.

Imported as `_pretrain_step` (a bench script's own folder is on sys.path when it runs as `python bench/x.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def random_feature_tables(config, vocab: int) -> dict[str, torch.Tensor]:
    """Per-token pinyin, radical, stroke-count and stroke-sequence tables drawn at random (seed 1): the shapes
    `build_model` takes, no real characters behind them."""
    g = torch.Generator().manual_seed(1)
    return {
        "default_pinyin_ids": torch.randint(0, config.pinyin_vocab_size, (vocab,), generator=g),
        "radical_ids": torch.randint(0, 215, (vocab,), generator=g),
        "stroke_counts": torch.randint(0, 30, (vocab,), generator=g),
        "stroke_seqs": torch.randint(0, 6, (vocab, 32), generator=g),
    }


def mlm_batch(step: int, batch: int, length: int, vocab: int) -> dict[str, torch.Tensor]:
    """A masked-LM batch of random tokens (seeded by `step`), 15% of the positions labelled."""
    gen = torch.Generator().manual_seed(step)
    ids = torch.randint(5, vocab, (batch, length), generator=gen)
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(batch, length, generator=gen) < 0.15
    labels[chosen] = ids[chosen]
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
        "pinyin_ids": torch.randint(0, 400, (batch, length), generator=gen),
        "labels": labels,
    }


def timed_step(
    engine, batch: dict, forward: Callable[[dict], torch.Tensor] | None = None
) -> tuple[float, float, float]:
    """One optimizer step of `engine` (forward, backward, step, zero_grad): wall seconds, this process's CPU
    seconds, the loss. `forward(batch)` replaces `engine.forward(batch)[0]` (to wrap it in hooks, say)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    loss = forward(batch) if forward is not None else engine.forward(batch)[0]
    engine.backward(loss)
    engine.step()
    engine.zero_grad()
    return time.perf_counter() - start, time.process_time() - cpu_start, loss.item()


def alternate(
    engines: dict, steps: range, step: Callable[[object, int], tuple[float, float, float]]
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    """`step(engine, i)` (returning wall s, CPU s, loss, as `timed_step`) for each i of `steps`, the engines
    taking turns at every i; per engine name: the wall times, the CPU times and the losses, in order."""
    times: dict[str, list[float]] = {name: [] for name in engines}
    cpu_times: dict[str, list[float]] = {name: [] for name in engines}
    losses: dict[str, list[float]] = {name: [] for name in engines}
    for i in steps:
        for name, engine in engines.items():
            seconds, cpu_seconds, loss = step(engine, i)
            times[name].append(seconds)
            cpu_times[name].append(cpu_seconds)
            losses[name].append(loss)
    return times, cpu_times, losses
