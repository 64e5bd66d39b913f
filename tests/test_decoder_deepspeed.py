"""ERNIE 4.5 decoders on the DeepSpeed backend (#37 item 2): real gloo ranks on CPU against the single-process engine.

- 2 ranks, ZeRO-3 (DP 2), dense decoder: the same losses, grad norms and weights as `PlainEngine` after 3
  steps of causal-LM training on packed rows; each rank holds half of every parameter.
- 2 ranks, TP 2 (transformers' own `base_model_tp_plan`: q/k/v, gate/up colwise; o, down rowwise) x ZeRO-3 DP 1:
  the same numbers; the TP'd projections hold half their columns / rows per rank.
- 4 ranks, TP 2 x ZeRO-3 DP 2, dense decoder, selective recompute (each layer's attention core): the same numbers;
  the TP'd projections are half-size and ZeRO halves those again on each rank.
- 2 ranks, ZeRO-3, MoE decoder (4 experts, top-2, one shared expert; the router's load-balancing loss in the
  loss), selective recompute: the same numbers. The load-balancing loss is a function of a micro batch's tokens (not a mean over
  them), so the reference runs the same micro batches (one row each) with gradient accumulation.
- the real `ernie-pretrain` loop on 2 ranks (ZeRO-3), dense and MoE presets: both ranks SIGKILLed after step 4
  and resumed from the sharded checkpoint-4 log bit-identical losses and grad norms to an uninterrupted run.

Tolerances (fp32), as for the encoder: losses and grad norms to 1e-5 relative, weights after 3 AdamW steps of lr
1e-2 to 1e-4 absolute. Every row has the same number of predicted tokens (documents of 8 tokens), so the mean of
the ranks' means is the global mean. The worker is this file run under torchrun (`--worker`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from ernie_zoo.parallel.distributed import finish_distributed

REPO = Path(__file__).resolve().parents[1]
CPU_CONFIG = REPO / "recipes" / "deepspeed" / "zero3-cpu-test.json"
STEPS, GLOBAL_BATCH, SEQ, VOCAB = 3, 4, 16, 300


def _recipe(micro_batch_size: int, grad_accum_steps: int):
    from ernie_zoo.training.recipe import OptimArgs, PretrainRecipe

    return PretrainRecipe(
        max_steps=STEPS,
        micro_batch_size=micro_batch_size,
        grad_accum_steps=grad_accum_steps,
        precision="fp32",
        seed=0,
        optim=OptimArgs(lr=1e-2, warmup_steps=1, decay="linear", grad_clip=1.0, weight_decay=0.01),
    )


def _config(moe: bool):
    from ernie_zoo.models.decoder import decoder_config

    fields = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, vocab_size=VOCAB, max_position_embeddings=64)  # fmt: skip
    if moe:
        fields.update(moe_num_experts=4, moe_k=2, moe_num_shared_experts=1, moe_intermediate_size=16,
                      moe_layer_start_index=1, moe_layer_end_index=1, router_aux_loss_coef=0.1)  # fmt: skip
    return decoder_config(moe, **fields)


def _model(moe: bool):
    from ernie_zoo.training.causal_lm import build_decoder_model

    return build_decoder_model(_config(moe), seed=0)


def _global_batch(step: int) -> dict[str, torch.Tensor]:
    """4 packed rows of two 8-token documents each (the same number of targets in every row)."""
    g = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(5, VOCAB, (GLOBAL_BATCH, SEQ), generator=g)
    pos = torch.arange(SEQ).remainder(8).expand(GLOBAL_BATCH, SEQ).clone()
    return {"input_ids": ids, "position_ids": pos, "labels": ids.masked_fill(pos == 0, -100),
            "attention_mask": torch.ones_like(ids)}  # fmt: skip


def _rows(batch, rows):
    return {k: v[rows] for k, v in batch.items()}


def _reference(moe: bool) -> dict:
    from ernie_zoo.training.backends import engine_for_recipe

    engine = engine_for_recipe(_recipe(1, GLOBAL_BATCH), _model(moe), torch.device("cpu"))
    losses, norms = [], []
    # one row per micro batch, as the ranks run them: the MoE router's load-balancing
    for step in range(STEPS):
        batch, total = _global_batch(step), 0.0  # loss is a function of the micro batch's tokens, not a mean
        for row in range(GLOBAL_BATCH):
            loss, _, _ = engine.forward(_rows(batch, [row]))
            engine.backward(loss / GLOBAL_BATCH)
            total += loss.item() / GLOBAL_BATCH
        norms.append(engine.step())
        engine.zero_grad()
        losses.append(total)
    return {
        "losses": losses,
        "norms": norms,
        "params": {k: v.detach().clone() for k, v in engine.model.state_dict().items()},
    }


def _run(tmp_path: Path, tp: int, moe: bool, nproc: int = 2) -> list[dict]:
    from safetensors.torch import load_file

    from ernie_zoo.parallel.distributed import run_local_ranks

    run_local_ranks(
        [__file__, "--worker", str(tmp_path), str(tp), "moe" if moe else "dense"], nproc=nproc, timeout=900
    )
    reference = _reference(moe)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nproc)]
    selective = moe or nproc // tp > 1 and tp > 1  # what the worker asks for
    for res in results:
        assert res["attention"].startswith("selective_recompute_") == selective, res["attention"]
        assert res["losses"] == pytest.approx(reference["losses"], rel=1e-5)
        assert res["norms"] == pytest.approx(reference["norms"], rel=1e-5)
    final = load_file(str(tmp_path / "final.safetensors"))
    ref = reference["params"]
    assert {k for k in ref if k != "lm_head.weight"} <= final.keys()  # lm_head is tied to the embedding
    for name, value in final.items():
        assert torch.allclose(value, ref[name], rtol=0, atol=1e-4), (name, (value - ref[name]).abs().max())
    initial = _model(moe).state_dict()
    assert max((ref[k] - initial[k]).abs().max().item() for k in final) > 1e-3  # training moved the weights
    return results


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_two_ranks_match_single_process(tmp_path):
    results = _run(tmp_path, tp=1, moe=False)
    for rank, res in enumerate(results):
        assert (res["dp_rank"], res["dp_world_size"]) == (rank, 2)
        for name, (full, local, _shape) in res["partitions"].items():
            assert local == (full + 1) // 2, name  # ZeRO-3: half of every parameter per rank
        assert res["partitions"]["model.layers.0.self_attn.q_proj.weight"] == [1024, 512, [32, 32]]


@pytest.mark.distributed
@pytest.mark.slow
def test_tp2_matches_single_process(tmp_path):
    results = _run(tmp_path, tp=2, moe=False)
    for res in results:
        assert (res["dp_rank"], res["dp_world_size"]) == (0, 1)  # one replica over the two TP ranks
        shapes = {name: shape for name, (_f, _l, shape) in res["partitions"].items()}
        assert shapes["model.layers.0.self_attn.q_proj.weight"] == [16, 32]  # colwise: half the output rows
        assert shapes["model.layers.0.self_attn.k_proj.weight"] == [8, 32]  # one of the two KV heads
        assert shapes["model.layers.0.self_attn.o_proj.weight"] == [32, 16]  # rowwise: half the inputs
        assert shapes["model.layers.0.mlp.down_proj.weight"] == [32, 32]
        assert shapes["model.embed_tokens.weight"] == [VOCAB, 32]  # replicated


@pytest.mark.distributed
@pytest.mark.slow
def test_tp2_zero3_dp2_four_ranks_match_single_process(tmp_path):
    results = _run(tmp_path, tp=2, moe=False, nproc=4)
    for res in results:
        assert res["dp_world_size"] == 2 and res["dp_rank"] in (0, 1)
        parts = res["partitions"]
        full, local, shape = parts["model.layers.0.self_attn.q_proj.weight"]
        # TP halves the rows, ZeRO-3 halves the shard
        assert shape == [16, 32] and (full, local) == (512, 256)
        full, local, shape = parts["model.layers.0.mlp.down_proj.weight"]
        assert shape == [32, 32] and (full, local) == (1024, 512)
        assert parts["model.embed_tokens.weight"][:2] == [VOCAB * 32, VOCAB * 16]  # replicated by TP, ZeRO'd
    assert sorted(res["dp_rank"] for res in results) == [0, 0, 1, 1]  # two TP pairs, one per replica


@pytest.mark.distributed
@pytest.mark.slow
def test_moe_zero3_two_ranks_match_single_process(tmp_path):
    results = _run(tmp_path, tp=1, moe=True)
    for res in results:
        assert any(".experts." in name for name in res["partitions"])


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("preset", ["ernie4.5-tiny", "ernie4.5-moe-tiny"])
def test_ernie_pretrain_decoder_two_ranks_resumes_exactly_after_sigkill(tmp_path, tiny_tokenizer, preset):
    """`ernie-pretrain` on a decoder preset with `distributed.backend: deepspeed` (ZeRO-3) on 2 gloo ranks: packed
    rows sharded over the ranks, sharded checkpoints; both ranks SIGKILLed right after step 4 (checkpoint-4
    written) and started again log bit-identical losses and grad norms at steps 5-6 to an uninterrupted run."""
    from ernie_zoo.parallel.distributed import run_local_ranks
    from ernie_zoo.training.logging_utils import read_metrics

    tiny_tokenizer.save_pretrained(tmp_path / "tok")

    def pretrain(out: Path, env: dict | None = None) -> None:
        run_local_ranks(
            ["-m", "ernie_zoo.training.pretrain", str(REPO / "recipes/pretrain/ernie4.5-tiny-cpu.yaml")]
            + ["--model.preset", preset, "--output_dir", str(out), "--tokenizer.path", str(tmp_path / "tok")]
            + ["--max_steps", "6", "--micro_batch_size", "2", "--data.max_seq_len", "16"]
            + ["--distributed.backend", "deepspeed", "--distributed.deepspeed_config", str(CPU_CONFIG)]
            + ["--checkpoint.interval", "2", "--eval.interval", "0", "--logging.interval", "1"]
            + ["--logging.progress_bar", "false", "--logging.tensorboard", "false"]
            + ["--optim.warmup_steps", "1"],
            nproc=2,
            timeout=600,
            cwd=REPO,
            env=env,
        )

    pretrain(tmp_path / "straight")
    with pytest.raises(RuntimeError, match="failed"):
        pretrain(tmp_path / "resumed", env={"ERNIE_ZOO_TEST_KILL_AT_STEP": "4"})
    assert (tmp_path / "resumed" / "checkpoint-4").is_dir()
    assert not (tmp_path / "resumed" / "checkpoint-6").exists()
    pretrain(tmp_path / "resumed")  # continues from checkpoint-4
    zero = {p.name for p in (tmp_path / "straight" / "checkpoint-6" / "zero").iterdir()}
    assert zero >= {"rank00000.safetensors", "rank00001.safetensors"}  # each rank wrote its shard
    straight = [r for r in read_metrics(tmp_path / "straight" / "metrics.jsonl") if "train/loss" in r]
    resumed = {
        r["step"]: r for r in read_metrics(tmp_path / "resumed" / "metrics.jsonl") if "train/loss" in r
    }
    assert [r["step"] for r in straight] == [1, 2, 3, 4, 5, 6]
    for r in straight:
        assert resumed[r["step"]]["train/loss"] == r["train/loss"], r["step"]
        assert resumed[r["step"]]["train/grad_norm"] == r["train/grad_norm"], r["step"]
    assert straight[-1]["train/loss"] < straight[0]["train/loss"] + 0.5  # finite and sane (6 noisy steps)


def test_tp_of_a_moe_decoder_is_refused_clearly():
    from ernie_zoo.parallel.tp_plan import check_tp_divisibility, tp_plan_for

    with pytest.raises(ValueError, match="TP of the fused MoE experts is not built"):
        check_tp_divisibility(_config(True), 2)
    with pytest.raises(ValueError, match="distributed.ep_size a multiple of tp_size"):
        check_tp_divisibility(_config(True), 2, ep_size=3)
    check_tp_divisibility(_config(True), 1)  # ZeRO-3 alone is fine
    check_tp_divisibility(_config(True), 2, ep_size=2)  # the experts EP-sharded, the rest TP
    assert not any(".mlp.experts" in key for key in tp_plan_for(_model(moe=True)))  # fused experts left out
    plan = tp_plan_for(_model(moe=False))
    assert (
        plan["model.layers.*.self_attn.q_proj"] == "colwise"
        and plan["model.layers.*.mlp.down_proj"] == "rowwise"
    )
    with pytest.raises(ValueError, match="num_key_value_heads=2"):
        check_tp_divisibility(_config(False), 4)


def _worker(out_dir: str, tp: int, moe: bool) -> None:
    import torch.distributed as dist
    from safetensors.torch import save_file

    from ernie_zoo.training.backends import engine_for_recipe

    torch.set_num_threads(1)
    out = Path(out_dir)
    dp = int(os.environ["WORLD_SIZE"]) // tp
    recipe = _recipe(1, GLOBAL_BATCH // dp)
    # selective recompute (each layer's attention core) on the MoE run and the 4-rank TP x DP run: it changes
    # nothing but memory and time, so the same numbers are expected
    recompute = "selective" if moe or dp > 1 and tp > 1 else "none"
    engine = engine_for_recipe(
        recipe,
        _model(moe),
        backend="deepspeed",
        config=CPU_CONFIG,
        tp_size=tp,
        zero_stage=3,
        recompute=recompute,
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    partitions = {
        name: [int(p.ds_numel), int(p.ds_tensor.numel()), list(p.ds_shape)]
        for name, p in engine.model.named_parameters()
    }
    losses, norms = [], []
    for step in range(STEPS):
        batch, total = _global_batch(step), 0.0
        for micro in range(recipe.grad_accum_steps):
            loss, _, _ = engine.forward(_rows(batch, [engine.dp_rank * recipe.grad_accum_steps + micro]))
            engine.backward(loss / recipe.grad_accum_steps)
            total += loss.item() / recipe.grad_accum_steps
        norms.append(engine.step())
        mean = torch.tensor([total])
        dist.all_reduce(mean)  # TP ranks hold the same loss: the mean over all ranks is the DP mean
        losses.append(mean.item() / world)
    final = engine.consolidated_state_dict()
    if rank == 0:
        save_file({k: v.clone().contiguous() for k, v in final.items()}, str(out / "final.safetensors"))
    result = {"losses": losses, "norms": norms, "partitions": partitions,
              "dp_rank": engine.dp_rank, "dp_world_size": engine.dp_world_size,
              "attention": engine.model.config._attn_implementation}  # fmt: skip
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--worker":
    _worker(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "moe")
    finish_distributed()  # every rank, after its last collective (a live group can abort at exit)
