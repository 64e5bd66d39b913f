"""Checkpoints that reshard (`parallel.resharding`, torch.distributed.checkpoint): a run saved under one layout
resumes under another and continues the loss curve of an uninterrupted single-process run.

Each pair trains the 4-layer encoder of tests/test_pipeline_parallel.py (same model, batches of 8 rows with padding
and changing lengths) for 3 steps under layout A on gloo CPU ranks, saves asynchronously and keeps training (a 4th
step that changes every weight while the save is in flight, so a save that did not snapshot the state would hold
the wrong weights), then a fresh process group under layout B loads the checkpoint and trains steps 4-6. The
reference is the single-device engine (`PlainEngine`) over all 6 steps. Pairs:

    PP 2 (2 ranks)            -> PP 1 x DP 2 with ZeRO-1 (2 ranks; each rank keeps AdamW state for half)
    PP 1 x TP 2 (2 ranks)     -> PP 1 x DP 2 (2 ranks)
    PP 2 (2 ranks)            -> one process (PlainEngine)
    PP 2 x TP 2 (4 ranks)     -> PP 1 x DP 4 (4 ranks)

Asserted: losses and grad norms of steps 1-3 (layout A) and 4-6 (layout B) within 1e-5 relative of the reference,
the LR schedule continuing, the final weights within 5e-5; each layout really sharded (TP halves, stages' layers,
ZeRO-1 shares); the checkpoint is a set of per-rank safetensors files with one logical key space.
The SIGKILL-during-save test runs `ernie-pretrain` itself (tests/test_resharding.py::test_a_save_killed...).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
from test_pipeline_parallel import (
    GLOBAL_BATCH,
    LOSS_RTOL,
    SEQS,
    WEIGHT_ATOL,
    _global_batch,
    _model,
    _recipe,
    _rows,
)

from ernie_zoo.parallel.distributed import finish_distributed

REPO = Path(__file__).resolve().parents[1]
BEFORE, AFTER = 3, 3  #: steps under layout A, then under layout B
TOTAL = BEFORE + AFTER

#: layout -> (ranks, distributed keys, micro batch, grad accumulation); every step is the same 8 rows
LAYOUTS = {
    "pp2": (2, {"pp_size": 2}, 4, 2),
    "tp2": (2, {"pp_size": 1, "tp_size": 2}, 8, 1),
    "dp2": (2, {"pp_size": 1}, 4, 1),
    "dp2-zero1": (2, {"pp_size": 1, "zero_stage": 1}, 2, 2),
    "pp2-tp2": (4, {"pp_size": 2, "tp_size": 2, "pp_microbatches": 4}, 8, 1),
    "dp4": (4, {"pp_size": 1}, 2, 1),
}


def _batch(step: int) -> dict[str, torch.Tensor]:
    """Step `step`'s 8 rows: the pipeline tests' batches, rolled by the step (new rows for each replica)."""
    return {k: torch.roll(v, step, dims=0) for k, v in _global_batch(step % len(SEQS)).items()}


def _layout_recipe(layout: str | None):
    """The recipe of a layout (None: one process on the whole batch), over all 6 steps (the LR schedule's)."""
    if layout is None:
        return dataclasses.replace(_recipe(GLOBAL_BATCH, 1), max_steps=TOTAL)
    _, keys, micro, accum = LAYOUTS[layout]
    return dataclasses.replace(_recipe(micro, accum, **keys), max_steps=TOTAL)  # keys: backend pipeline


def _train_step(engine, step: int, micro: int, accum: int) -> tuple[float, float]:
    """One optimizer step on this data-parallel rank's rows of step `step`'s batch: (mean loss, grad norm)."""
    batch = _batch(step)
    per_replica = GLOBAL_BATCH // engine.dp_world_size
    total = 0.0
    for m in range(accum):
        start = engine.dp_rank * per_replica + m * micro
        loss, _, _ = engine.forward(_rows(batch, slice(start, start + micro)))
        engine.backward(loss / accum, m == accum - 1)
        total += loss.item() / accum
    norm = engine.step()
    engine.zero_grad()
    (mean,) = engine.dp_sum([total])
    return mean / engine.dp_world_size, norm


@pytest.fixture(scope="module")
def reference() -> dict:
    from ernie_zoo.training.backends import engine_for_recipe

    engine = engine_for_recipe(_layout_recipe(None), _model(), torch.device("cpu"))
    losses, norms, lrs = [], [], []
    for step in range(TOTAL):
        loss, norm = _train_step(engine, step, GLOBAL_BATCH, 1)
        losses.append(loss)
        norms.append(norm)
        lrs.append(engine.lr)
    params = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    return {"losses": losses, "norms": norms, "lrs": lrs, "params": params}


def _launch(tmp_path: Path, layout: str, phase: str) -> list[dict]:
    from ernie_zoo.parallel.distributed import run_local_ranks

    ranks = LAYOUTS[layout][0]
    out = tmp_path / f"{phase}-{layout}"
    out.mkdir()
    run_local_ranks([__file__, "--worker", str(tmp_path), layout, phase], nproc=ranks, timeout=900)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def _check_steps(results: list[dict], reference: dict, steps: range) -> float:
    worst = 0.0
    for res in results:
        for key in ("losses", "norms"):
            assert res[key] == pytest.approx([reference[key][s] for s in steps], rel=LOSS_RTOL), key
            worst = max(worst, *(abs(a / reference[key][s] - 1) for a, s in zip(res[key], steps)))
        assert res["lrs"] == pytest.approx([reference["lrs"][s] for s in steps], rel=1e-12)
    return worst


def _check_weights(final: dict[str, torch.Tensor], reference: dict) -> float:
    ref = reference["params"]
    assert final and set(final) <= set(ref)
    diff = max((final[k] - ref[k]).abs().max().item() for k in final)
    assert diff < WEIGHT_ATOL, diff
    return diff


def _saved(tmp_path: Path, layout: str) -> tuple[Path, list[dict]]:
    """Layout A's 3 steps, checked against the reference's; the checkpoint written after step 3."""
    return tmp_path / "ckpt", _launch(tmp_path, layout, "save")


def _resharded(tmp_path: Path, reference: dict, saved: str, resumed: str) -> tuple[list[dict], list[dict]]:
    from safetensors.torch import load_file

    from ernie_zoo.parallel.resharding import DCP_DIR, saved_shapes

    _, first = _saved(tmp_path, saved)
    before = _check_steps(first, reference, range(BEFORE))
    ckpt = tmp_path / "ckpt"
    files = sorted(p.name for p in (ckpt / DCP_DIR).iterdir())
    assert all(f.endswith(".safetensors") for f in files) and len(files) >= 2  # one file per writing rank
    keys = saved_shapes(ckpt)
    ref = reference["params"]
    q = "ernie.encoder.layer.0.attention.self.query.weight"
    assert keys[f"model.{q}"][0] == list(ref[q].shape)  # full shapes, whatever the layout
    assert keys[f"optim.{q}.exp_avg"][0] == list(ref[q].shape)
    second = _launch(tmp_path, resumed, "resume")
    after = _check_steps(second, reference, range(BEFORE, TOTAL))
    weights = _check_weights(load_file(str(tmp_path / "final" / "model.safetensors")), reference)
    print({"pair": f"{saved} -> {resumed}", "rel_before": before, "rel_after": after, "weight_abs": weights})
    return first, second


@pytest.mark.distributed
@pytest.mark.slow
def test_pp2_resumes_on_dp2_with_zero1(tmp_path, reference):
    """PP 2 -> PP 1 x DP 2 with ZeRO-1: the stages' state is read by ranks that each hold the whole model but step
    (and keep AdamW state for) only half of it."""
    first, second = _resharded(tmp_path, reference, "pp2", "dp2-zero1")
    assert [r["layers"] for r in first] == [[0, 1], [2, 3]]
    assert all(r["layers"] == [0, 1, 2, 3] for r in second)
    held = [r["optimizer_numel"] for r in second]
    assert sum(held) == 2 * second[0]["param_numel"] and all(
        0 < h < 2 * second[0]["param_numel"] for h in held
    )


@pytest.mark.distributed
@pytest.mark.slow
def test_tp2_resumes_on_dp2(tmp_path, reference):
    """PP 1 x TP 2 -> PP 1 x DP 2: DTensor halves (weights and AdamW moments) joined into whole tensors."""
    first, second = _resharded(tmp_path, reference, "tp2", "dp2")
    q = "ernie.encoder.layer.0.attention.self.query.weight"
    assert all(r["shapes"][q] == [16, 32] for r in first) and all(r["shapes"][q] == [32, 32] for r in second)


@pytest.mark.distributed
@pytest.mark.slow
def test_pp2_resumes_in_one_process(tmp_path, reference):
    """PP 2 -> one process: `PlainEngine.load` reads the stages' logical checkpoint (weights, AdamW, schedule)."""
    from ernie_zoo.training.backends import engine_for_recipe

    ckpt, first = _saved(tmp_path, "pp2")
    _check_steps(first, reference, range(BEFORE))
    engine = engine_for_recipe(_layout_recipe(None), _model(), torch.device("cpu"))
    engine.load(ckpt)
    result = {"losses": [], "norms": [], "lrs": []}
    for step in range(BEFORE, TOTAL):
        loss, norm = _train_step(engine, step, GLOBAL_BATCH, 1)
        result["losses"].append(loss)
        result["norms"].append(norm)
        result["lrs"].append(engine.lr)
    after = _check_steps([result], reference, range(BEFORE, TOTAL))
    weights = _check_weights(dict(engine.model.state_dict()), reference)
    print({"pair": "pp2 -> one process", "rel_after": after, "weight_abs": weights})


@pytest.mark.distributed
@pytest.mark.slow
def test_pp2_tp2_resumes_on_dp4(tmp_path, reference):
    """PP 2 x TP 2 (4 ranks) -> PP 1 x DP 4 (4 ranks)."""
    first, second = _resharded(tmp_path, reference, "pp2-tp2", "dp4")
    assert sorted(map(tuple, (r["layers"] for r in first))) == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert all(r["layers"] == [0, 1, 2, 3] for r in second)


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    """Loading names what the checkpoint lacks or holds in another shape."""
    from ernie_zoo.parallel import resharding

    resharding.save({"model.w": torch.ones(2, 3)}, tmp_path)
    with pytest.raises(ValueError, match=r"does not hold 1 tensor.*model\.v"):
        resharding.load({"model.w": torch.zeros(2, 3), "model.v": torch.zeros(1)}, tmp_path)
    with pytest.raises(ValueError, match=r"model\.w: saved \[2, 3\], here \[3, 2\]"):
        resharding.load({"model.w": torch.zeros(3, 2)}, tmp_path)
    with pytest.raises(ValueError, match="not a logical"):
        resharding.load({"model.w": torch.zeros(2, 3)}, tmp_path / "nothing")
    state = {"model.w": torch.zeros(2, 3)}
    resharding.load(state, tmp_path)
    assert torch.equal(state["model.w"], torch.ones(2, 3))


def test_the_data_position_moves_to_the_same_example_under_another_dp_size():
    """Rank r of D reads the epoch's permutation at r, r + D, ...: 12 examples per rank on 2 ranks are the first 24,
    which 4 ranks reach after 6 each and one process after 24; a position that does not split is refused."""
    from ernie_zoo.training.pretrain import _move_data_position

    for dp, index in ((4, 6), (1, 24), (2, 12)):
        state = {"epoch": 1, "index": 12, "dp_world_size": 2}
        _move_data_position(state, dp, micro_batch_size=2)
        assert (state["index"], state["dp_world_size"], state["epoch"]) == (index, dp, 1)
    with pytest.raises(ValueError, match="keep the global batch"):
        _move_data_position({"epoch": 0, "index": 12, "dp_world_size": 2}, 4, micro_batch_size=4)


# ------------------------------------------------------------- ernie-pretrain killed in the middle of a save
TINY = REPO / "recipes" / "pretrain" / "tiny-cpu.yaml"
SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"


@pytest.mark.distributed
@pytest.mark.slow
def test_a_save_killed_midway_leaves_no_checkpoint_and_the_run_resumes_from_the_one_before(
    tmp_path, tiny_tokenizer
):
    """`ernie-pretrain` on the pipeline backend (PP 2, 2 gloo ranks) with asynchronous saves every 2 steps: both ranks
    SIGKILLed while checkpoint-4 is being saved (every rank's files written, nothing published yet). What is left is
    `.checkpoint-4.tmp` with the ranks' files but no manifest; resume picks checkpoint-2, removes the leftover and
    ends with the losses, grad norms and final weights of an uninterrupted run, bit for bit."""
    from safetensors.torch import load_file

    from ernie_zoo.parallel.distributed import run_local_ranks
    from ernie_zoo.parallel.resharding import DCP_DIR
    from ernie_zoo.training import checkpoint as ckpt
    from ernie_zoo.training.logging_utils import read_metrics

    tiny_tokenizer.save_pretrained(tmp_path / "tok")

    def pretrain(out: Path, env: dict | None = None) -> None:
        run_local_ranks(
            ["-m", "ernie_zoo.training.pretrain", str(TINY), "--output_dir", str(out), "--tokenizer.path",
             str(tmp_path / "tok"), "--max_steps", "6", "--data.files", f"[{SENTENCES}]", "--distributed.backend",
             "pipeline", "--distributed.pp_size", "2", "--checkpoint.interval", "2", "--checkpoint.async_save", "true",
             "--eval.interval", "0", "--logging.interval", "1", "--logging.progress_bar", "false",
             "--logging.tensorboard", "false", "--optim.warmup_steps", "1"],
            nproc=2, timeout=600, cwd=REPO, env=env,
        )  # fmt: skip

    pretrain(tmp_path / "straight")
    killed = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="failed"):
        pretrain(killed, env={ckpt.KILL_IN_SAVE_ENV: "4"})
    assert [p.name for p in ckpt.list_checkpoints(killed)] == ["checkpoint-2"]
    leftover = killed / ".checkpoint-4.tmp"
    assert len(list((leftover / DCP_DIR).glob("*.safetensors"))) == 2  # the data was all there ...
    assert not (leftover / ckpt.MANIFEST).exists()  # ... but never published
    assert ckpt.latest_valid_checkpoint(killed) == killed / "checkpoint-2"
    pretrain(killed)
    assert not leftover.exists()
    straight = [r for r in read_metrics(tmp_path / "straight" / "metrics.jsonl") if "train/loss" in r]
    resumed = {r["step"]: r for r in read_metrics(killed / "metrics.jsonl") if "train/loss" in r}
    assert [r["step"] for r in straight] == [1, 2, 3, 4, 5, 6]
    for r in straight:
        assert resumed[r["step"]]["train/loss"] == r["train/loss"], r["step"]
        assert resumed[r["step"]]["train/grad_norm"] == r["train/grad_norm"], r["step"]
    a = load_file(str(tmp_path / "straight" / "checkpoint-6" / "model.safetensors"))
    b = load_file(str(killed / "checkpoint-6" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------------------------- worker
def _worker(tmp: str, layout: str, phase: str) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from ernie_zoo.training.pipeline_engine import PipelineEngine

    torch.set_num_threads(1)
    tmp_path = Path(tmp)
    out = tmp_path / f"{phase}-{layout}"
    _, _, micro, accum = LAYOUTS[layout]
    engine = PipelineEngine(_layout_recipe(layout), _model(meta=True), torch.device("cpu"))
    result = {"losses": [], "norms": [], "lrs": []}

    def step(s: int) -> None:
        loss, norm = _train_step(engine, s, micro, accum)
        result["losses"].append(loss)
        result["norms"].append(norm)
        result["lrs"].append(engine.lr)

    if phase == "save":
        for s in range(BEFORE):
            step(s)
        pending = engine.save(tmp_path / "ckpt", asynchronous=True)
        _train_step(engine, BEFORE, micro, accum)  # changes every weight while the save is in flight
        pending.result()
        dist.barrier()
    else:
        engine.load(tmp_path / "ckpt")
        for s in range(BEFORE, TOTAL):
            step(s)
        engine.save(tmp_path / "final")
    local = {n: (p.to_local() if isinstance(p, DTensor) else p) for n, p in engine.model.named_parameters()}
    result.update(
        shapes={n: list(p.shape) for n, p in local.items()},
        layers=sorted({int(n.split(".")[3]) for n in local if n.startswith("ernie.encoder.layer.")}),
        param_numel=sum(p.numel() for p in local.values()),
        optimizer_numel=sum(
            (v.to_local() if isinstance(v, DTensor) else v).numel()
            for state in engine.optimizer.state.values()
            for k, v in state.items()
            if k in ("exp_avg", "exp_avg_sq")
        ),
    )
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()


if __name__ == "__main__" and "--worker" in sys.argv:
    i = sys.argv.index("--worker")
    _worker(*sys.argv[i + 1 : i + 4])
    finish_distributed()
