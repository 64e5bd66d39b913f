"""Every ZeRO stage the docs name checkpoints, resumes and consolidates (#50): `ernie-pretrain` with
`distributed.backend: deepspeed` on 2 gloo ranks, the encoder's tiny-cpu recipe and the ERNIE 4.5 tiny decoder
(dense; MoE at stage 2), and the encoder at TP 2 x ZeRO-2 (what `ernie-zoo plan` picks for tiny-cpu on 8 GPUs).

Per stage 0-2: a run of 4 steps (checkpoints at 2 and 4), and a second run resumed from the first one's
checkpoint-2, log bit-identical losses and grad norms at steps 3-4 and write bit-identical checkpoint-4 files
(every rank's fp32 masters and Adam moments, the exported model). Under ZeRO 1-2 each rank's file holds half of
the fp32 masters (sharding happened); stage 0 holds them whole on every rank. `consolidate_checkpoint` turns
checkpoint-4 into the fp32 model: the exported weights bit for bit (fp32 on CPU: the exported model is the
masters), and (but for MoE) the whole model a ZeRO-3 run of the same recipe consolidates to (same seed, same
batches; 1e-6).
Before #50 the first checkpoint of stages 0-2 raised "sharded checkpoints are implemented for ZeRO stage 3".

bf16 (the GPU recipes' precision) steps through other DeepSpeed wrappers at stages 0-2; the last test saves and
restores each of them on 2 ranks.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
CPU_CONFIG = REPO / "recipes" / "deepspeed" / "zero3-cpu-test.json"
ENCODER = "recipes/pretrain/tiny-cpu.yaml"
DECODER = "recipes/pretrain/ernie4.5-tiny-cpu.yaml"


def _pretrain(out: Path, recipe: str, tok: Path, stage: int, *extra: str) -> None:
    from ernie_zoo.parallel.distributed import run_local_ranks

    run_local_ranks(
        ["-m", "ernie_zoo.training.pretrain", str(REPO / recipe), "--output_dir", str(out)]
        + ["--tokenizer.path", str(tok), "--max_steps", "4", "--micro_batch_size", "2"]
        + ["--data.max_seq_len", "16", "--distributed.backend", "deepspeed"]
        + ["--distributed.deepspeed_config", str(CPU_CONFIG), "--distributed.zero_stage", str(stage)]
        + ["--checkpoint.interval", "2", "--checkpoint.keep_last", "2", "--eval.interval", "0"]
        + ["--logging.interval", "1", "--logging.progress_bar", "false", "--logging.tensorboard", "false"]
        + ["--optim.warmup_steps", "1", *extra],
        nproc=2,
        timeout=900,
        cwd=REPO,
    )


def _losses(out: Path) -> dict[int, tuple[float, float]]:
    from ernie_zoo.training.logging_utils import read_metrics

    rows = read_metrics(out / "metrics.jsonl")
    return {r["step"]: (r["train/loss"], r["train/grad_norm"]) for r in rows if "train/loss" in r}


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def _consolidated(checkpoint: Path, out: Path) -> dict[str, torch.Tensor]:
    from ernie_zoo.parallel.consolidate import consolidate_checkpoint

    report = consolidate_checkpoint(checkpoint, out)
    assert report["compared_with"] is not None and report["max_logit_diff"] < 1e-4
    return _tensors(out / "model.safetensors")


@pytest.fixture(scope="module")
def tok(tmp_path_factory, tiny_tokenizer) -> Path:
    path = tmp_path_factory.mktemp("zero-stages") / "tok"
    tiny_tokenizer.save_pretrained(path)
    return path


_ZERO3: dict[tuple[str, str], dict[str, torch.Tensor]] = {}


def _zero3_model(recipe: str, tok: Path, *extra: str) -> dict[str, torch.Tensor]:
    """The whole fp32 model a ZeRO-3 run of the same recipe consolidates to (one run per recipe and module)."""
    key = (recipe, " ".join(extra))
    if key not in _ZERO3:
        out = tok.parent / f"zero3-{recipe.rpartition('/')[2]}-{'-'.join(extra)}"
        _pretrain(out, recipe, tok, 3, *extra)
        _ZERO3[key] = _consolidated(out / "checkpoint-4", out / "consolidated")
    return _ZERO3[key]


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe, stage, extra",
    [
        (ENCODER, 0, ()),
        (ENCODER, 1, ()),
        (ENCODER, 2, ()),
        (ENCODER, 2, ("--distributed.tp_size", "2")),
        # stages 0 and 1 run the same engine code for a decoder as for the encoder (CI time): the decoder at 2
        (DECODER, 2, ()),
        (DECODER, 2, ("--model.preset", "ernie4.5-moe-tiny")),
    ],
    ids=[
        "encoder-0",
        "encoder-1",
        "encoder-2",
        "encoder-tp2-2",
        "decoder-2",
        "moe-2",
    ],
)
def test_stage_checkpoints_resumes_exactly_and_consolidates(tmp_path, tok, recipe, stage, extra):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _pretrain(straight, recipe, tok, stage, *extra)
    _pretrain(resumed, recipe, tok, stage, "--resume", str(straight / "checkpoint-2"), *extra)

    # the resumed run continues exactly: losses, grad norms, every rank's optimizer state, the exported model
    first, second = _losses(straight), _losses(resumed)
    assert sorted(first) == [1, 2, 3, 4] and sorted(second) == [3, 4]
    assert {s: first[s] for s in (3, 4)} == second
    assert all(
        math.isfinite(norm) and norm > 0 for _, norm in first.values()
    )  # stage 0 logged NaN before #50
    a, b = straight / "checkpoint-4", resumed / "checkpoint-4"
    files = ["model.safetensors"] + [f"zero/rank0000{r}.safetensors" for r in (0, 1)]
    for name in files:
        x, y = _tensors(a / name), _tensors(b / name)
        assert x.keys() == y.keys(), name
        assert all(torch.equal(x[k], y[k]) for k in x), name
    assert any(k.endswith(".exp_avg_sq") for k in _tensors(a / files[1]))  # the Adam moments travel

    # ZeRO 1-2: each rank holds its half of every flat group; stage 0: the whole model on every rank. Under TP 2
    # (DP 1) each rank holds its TP shard of the weights whole.
    metas = [json.loads((a / "zero" / f"rank0000{r}.json").read_text()) for r in (0, 1)]
    tp = 2 if "--distributed.tp_size" in extra else 1
    for rank, meta in enumerate(metas):
        assert meta["zero_stage"] == stage and meta["layout"]["kind"] == "flat"
        assert (meta["tp_size"], meta["layout"]["tp_rank"]) == (tp, rank if tp == 2 else 0)
        total = sum(p[2] for g in meta["layout"]["groups"] for p in g["params"])  # this rank's parameters
        held = sum(g["partition_numel"] for g in meta["layout"]["groups"])
        parts = {(g["partition_rank"], g["partition_count"]) for g in meta["layout"]["groups"]}
        if stage == 0 or tp == 2:
            assert parts == {(0, 1)} and held >= total
        else:
            assert parts == {(rank, 2)} and total * 0.45 < held < total * 0.55

    # consolidate: the exported fp32 weights exactly, and the model a ZeRO-3 run trains to
    exported = _tensors(a / "model.safetensors")
    whole = _consolidated(a, tmp_path / "consolidated")
    for name, value in whole.items():
        assert torch.equal(value, exported[name]), name
    moved = max((whole[k] - _initial(a, k)).abs().max().item() for k in whole if "weight" in k)
    assert moved > 1e-4  # training changed the weights, so agreeing with ZeRO-3 means something
    if "ernie4.5-moe-tiny" in extra:  # the dense decoder's case compares the decoder with ZeRO-3 (CI time)
        return
    reference = _zero3_model(recipe, tok, *extra)
    assert whole.keys() == reference.keys()
    diff = max((whole[k] - reference[k]).abs().max().item() for k in whole)
    # fp32 tolerance after 4 AdamW steps at lr 2e-3 (ZeRO-3 reduces in another order): measured 2.8e-7 on one
    # machine, 3.7e-6 on a fresh CI venv, the same for stages 0, 1 and 2
    assert diff < 2e-5, diff


def _initial(checkpoint: Path, name: str) -> torch.Tensor:
    """`name` as the run's step-2 checkpoint exported it (the weights two steps before)."""
    return _tensors(checkpoint.parent / "checkpoint-2" / "model.safetensors")[name]


@pytest.mark.distributed
@pytest.mark.slow
def test_16_bit_wrappers_save_and_restore_exactly(tmp_path):
    """bf16 on 2 gloo ranks: DeepSpeed steps through another wrapper at each of stages 0, 1 and 2 (per-weight
    fp32 copies, BF16_Optimizer's partitioned flat buffer, ZeRO-2's); the saved state, loaded back after 2
    more steps, restores the bf16 weights bit for bit, and those 2 steps run again give the same losses and grad
    norms. (The recipes' bf16 is a GPU setting; the CPU engine runs bf16 too.)"""
    from ernie_zoo.parallel.distributed import run_local_ranks

    run_local_ranks([__file__, "--worker", str(tmp_path)], nproc=2, timeout=600)
    wrappers = {0: "FP16_UnfusedOptimizer", 1: "BF16_Optimizer", 2: "DeepSpeedZeroOptimizer"}
    for rank in (0, 1):
        results = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for stage, wrapper in wrappers.items():
            res = results[str(stage)]
            assert res["optimizer"] == wrapper and res["dtype"] == "torch.bfloat16"
            assert res["partitions"] == (1 if stage == 0 else 2)
            assert res["weights_restored"] and res["again"] == res["first"]
            assert res["moved"] > 0  # the 2 steps between saving and loading changed the weights


def _worker(out: str) -> None:
    import os
    import tempfile

    from ernie_zoo.models.decoder import DECODER_CLASSES, decoder_config
    from ernie_zoo.training.deepspeed_engine import DeepSpeedEngine

    torch.set_num_threads(1)
    results = {}
    for stage in (0, 1, 2):
        torch.manual_seed(0)
        config = decoder_config(False, num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=300,
                                max_position_embeddings=64)  # fmt: skip
        model = DECODER_CLASSES[type(config)](config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
        ds_config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
                     "zero_optimization": {"stage": stage}, "bf16": {"enabled": True}, "steps_per_print": 10**9}  # fmt: skip
        if stage == 1:  # fp32 gradient accumulation: DeepSpeed's BF16_Optimizer
            ds_config["data_types"] = {"grad_accum_dtype": "fp32"}
        engine = DeepSpeedEngine(model, optimizer, schedule, ds_config)

        def step(i: int, engine: DeepSpeedEngine = engine) -> list[float]:
            ids = torch.randint(1, 300, (4, 16), generator=torch.Generator().manual_seed(i))
            loss = engine.forward(engine.shard({"input_ids": ids, "labels": ids})).loss
            engine.backward(loss)
            return [loss.item(), engine.step()]

        for i in range(2):
            step(i)
        saved = tempfile.mkdtemp(dir=out)
        engine.save_optimizer_state(saved)
        before = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
        first = [step(i) for i in (2, 3)]
        moved = max((v - before[k]).abs().max().item() for k, v in engine.model.state_dict().items())
        engine.load_optimizer_state(saved)
        restored = all(torch.equal(before[k], v) for k, v in engine.model.state_dict().items())
        meta = json.loads((Path(saved) / "zero" / f"rank{engine.rank:05d}.json").read_text())
        results[stage] = {
            "optimizer": type(engine.optimizer).__name__,
            "dtype": str(next(engine.model.parameters()).dtype),
            "partitions": max(g["partition_count"] for g in meta["layout"]["groups"]),
            "first": first,
            "moved": float(moved),
            "weights_restored": restored,
            "again": [step(i) for i in (2, 3)],
        }
    Path(out, f"rank{os.environ['RANK']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    import sys

    from ernie_zoo.parallel.distributed import finish_distributed

    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
        finish_distributed()  # every rank, after its last collective (a live group can abort at exit)
