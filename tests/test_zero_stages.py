"""Every ZeRO stage the docs name checkpoints, resumes and consolidates (#50): `ernie-pretrain` with
`distributed.backend: deepspeed` on 2 gloo ranks, the encoder's tiny-cpu recipe and the ERNIE 4.5 tiny decoder
(dense; MoE at stage 2).

Per stage 0-2: a run of 4 steps (checkpoints at 2 and 4), and a second run resumed from the first one's
checkpoint-2, log bit-identical losses and grad norms at steps 3-4 and write bit-identical checkpoint-4 files
(every rank's fp32 masters and Adam moments, the exported model). Under ZeRO 1-2 each rank's file holds half of
the fp32 masters (sharding happened); stage 0 holds them whole on every rank. `consolidate_checkpoint` turns
checkpoint-4 into the fp32 model: the exported weights bit for bit (fp32 on CPU: the exported model is the
masters), and the whole model a ZeRO-3 run of the same recipe consolidates to (same seed, same batches; 1e-6).
Before #50 the first checkpoint of stages 0-2 raised "sharded checkpoints are implemented for ZeRO stage 3".
"""

from __future__ import annotations

import json
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
        out = tok.parent / f"zero3-{len(_ZERO3)}"
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
        (DECODER, 0, ()),
        (DECODER, 1, ()),
        (DECODER, 2, ()),
        (DECODER, 2, ("--model.preset", "ernie4.5-moe-tiny")),
    ],
    ids=[
        "encoder-0",
        "encoder-1",
        "encoder-2",
        "encoder-tp2-2",
        "decoder-0",
        "decoder-1",
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
    reference = _zero3_model(recipe, tok, *extra)
    assert whole.keys() == reference.keys()
    diff = max((whole[k] - reference[k]).abs().max().item() for k in whole)
    assert diff < 1e-6, diff
    moved = max((whole[k] - _initial(a, k)).abs().max().item() for k in whole if "weight" in k)
    assert moved > 1e-4  # training changed the weights, so agreeing with ZeRO-3 means something


def _initial(checkpoint: Path, name: str) -> torch.Tensor:
    """`name` as the run's step-2 checkpoint exported it (the weights two steps before)."""
    return _tensors(checkpoint.parent / "checkpoint-2" / "model.safetensors")[name]
