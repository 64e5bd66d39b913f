"""DeepSpeed backend of `ernie-pretrain`: real gloo ranks on CPU against the single-process reference engine.

- 2 ranks, ZeRO-3 (DP 2), selective recompute (each layer's attention core): the same losses, grad norms, LR and
  weights as `PlainEngine` (no recompute) after 3 steps; each rank holds half of every parameter; a sharded
  checkpoint resumes to the same numbers.
- 4 ranks, TP 2 x ZeRO-3 DP 2 (sparse last layer on TP-sharded heads), full recompute: the same numbers; TP'd
  weights are half-size, and ZeRO halves those again; the sharded checkpoint consolidates to the run's weights.
- the `ernie-pretrain` loop on 2 ranks: the model is built partitioned (zero.Init), the logged loss is the
  mean over the ranks, only rank 0 prints and writes logs, and `ernie-zoo consolidate` turns its checkpoint
  into a from_pretrained directory.

Tolerances (fp32): losses and grad norms to 1e-5 relative (collectives sum in a different order than one
process does); weights after 3 AdamW steps of lr 1e-2 to 1e-4 absolute, 0.3% of the 3e-2 a weight can move.
The worker is this file run under torchrun (`--worker`).
"""

from __future__ import annotations

import json
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

    # sparse_last_layer (the recipe default): used by every run, TP-sharded attention heads included
    return PretrainRecipe(
        sparse_last_layer=True,
        max_steps=STEPS,
        micro_batch_size=micro_batch_size,
        grad_accum_steps=grad_accum_steps,
        precision="fp32",
        seed=0,
        optim=OptimArgs(lr=1e-2, warmup_steps=1, decay="linear", grad_clip=1.0, weight_decay=0.01),
    )


def _model():
    from ernie_zoo import ErnieZooConfig
    from ernie_zoo.training.build import build_model

    config = ErnieZooConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        feature_fusion="concat",
    )
    g = torch.Generator().manual_seed(1)
    tables = {
        "default_pinyin_ids": torch.randint(0, config.pinyin_vocab_size, (VOCAB,), generator=g),
        "radical_ids": torch.randint(0, 215, (VOCAB,), generator=g),
        "stroke_counts": torch.randint(0, 30, (VOCAB,), generator=g),
        "stroke_seqs": torch.randint(0, 6, (VOCAB, 32), generator=g),
    }
    return build_model(config, tables, seed=0)


def _global_batch(step: int) -> dict[str, torch.Tensor]:
    """The step's 4 sequences; every sequence has 4 masked positions, so a mean over any split of the rows
    weighs tokens the same as the mean over all of them."""
    g = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(5, VOCAB, (GLOBAL_BATCH, SEQ), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 1::4] = ids[:, 1::4]
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
        "pinyin_ids": torch.randint(0, 400, (GLOBAL_BATCH, SEQ), generator=g),
        "labels": labels,
    }


def _rows(batch, rows):
    return {k: v[rows] for k, v in batch.items()}


def _reference() -> dict:
    from ernie_zoo.training.backends import engine_for_recipe

    engine = engine_for_recipe(_recipe(GLOBAL_BATCH, 1), _model(), torch.device("cpu"))
    losses, norms, lrs = [], [], []
    for step in range(STEPS):
        loss, _, _ = engine.forward(_global_batch(step))  # the loop's masked-LM loss (sparse last layer on)
        engine.backward(loss)
        norms.append(engine.step())
        engine.zero_grad()
        losses.append(loss.item())
        lrs.append(engine.lr)
    params = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    return {"losses": losses, "norms": norms, "lrs": lrs, "params": params}


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(0)
    return _reference()


def _check_against_reference(out: Path, reference: dict, world: int) -> list[dict]:
    from safetensors.torch import load_file

    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    for res in results:
        assert res["losses"] == pytest.approx(reference["losses"], rel=1e-5)
        assert res["norms"] == pytest.approx(reference["norms"], rel=1e-5)
        assert res["norms"][0] > 1.0  # gradient clipping at 1.0 was active, and identical to the reference
        assert res["lrs"] == pytest.approx(reference["lrs"], rel=1e-12)
    final = load_file(str(out / "final.safetensors"))
    ref = reference["params"]
    missing = {k for k in ref if k not in final and not k.startswith("cls.predictions.decoder")}
    assert not missing  # the consolidated state covers every weight (the tied decoder may be stored once)
    for name, value in final.items():
        assert value.shape == ref[name].shape, name
        assert torch.allclose(value, ref[name], rtol=0, atol=1e-4), (name, (value - ref[name]).abs().max())
    # the 100B path: a model born partitioned (zero.Init) with our own weight init applied under ZeRO-3
    # (and AutoTP applied to it when TP > 1); one step trains
    from ernie_zoo.training.core import param_groups

    model = _model()
    groups = param_groups(model, 0.01)
    expected = {
        name: g["weight_decay"]
        for name, p in model.named_parameters()
        for g in groups
        if any(p is q for q in g["params"])
    }
    for res in results:
        assert res["zero_init_partitioned"] is True
        # a model born partitioned gets the same decay groups as the whole one (read through ds_shape)
        assert res["zero_init_weight_decay"] == expected
        assert 4.0 < res["zero_init_loss"] < 7.5 and res["zero_init_norm"] > 0  # ~ln(300) = 5.7 at init
    assert results[0]["zero_init_fusion_identity"] and results[0]["zero_init_fusion_rest_zero"]
    assert results[0]["zero_init_layernorm_ones"]
    assert results[0]["zero_init_query_std"] == pytest.approx(0.02, rel=0.2)  # initializer_range
    assert results[0]["zero_init_diff_to_one_process"] == 0.0  # bit for bit the weights of build_model
    initial = _model().state_dict()
    moved = max((ref[k] - initial[k]).abs().max().item() for k in final)
    assert moved > 1e-3  # training changed the weights, so agreeing with the reference means something
    return results


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_two_ranks_match_single_process(tmp_path, reference):
    from ernie_zoo.parallel.distributed import run_local_ranks

    run_local_ranks([__file__, "--worker", str(tmp_path), "1", "resume"], nproc=2, timeout=900)
    results = _check_against_reference(tmp_path, reference, world=2)
    for rank, res in enumerate(results):
        assert (res["dp_rank"], res["dp_world_size"]) == (rank, 2)
        assert res["sparse_last_layer"] is True and res["recompute"] == "selective"
        # ZeRO-3: every rank holds half of every parameter (DeepSpeed pads an odd count by one)
        for name, (full, local, _shape) in res["partitions"].items():
            assert local == (full + 1) // 2, name
        assert res["partitions"]["ernie.encoder.layer.0.attention.self.query.weight"] == [1024, 512, [32, 32]]
        # the sharded checkpoint saved after step 2 resumes to the same step 3
        assert res["resumed_loss"] == pytest.approx(res["losses"][-1], rel=1e-6)
        assert res["resumed_max_param_diff"] < 1e-6
        assert res["zero_init_query"] == [[32, 32], 512]  # DP 2 halves the full query weight
    ckpt = tmp_path / "ckpt"
    assert {p.name for p in (ckpt / "zero").iterdir()} == {
        "rank00000.safetensors",
        "rank00000.json",
        "rank00001.safetensors",
        "rank00001.json",
    }
    from ernie_zoo.models import ErnieZooForMaskedLM

    loaded = ErnieZooForMaskedLM.from_pretrained(ckpt)  # rank 0's consolidated export is a normal model dir
    assert loaded.config.hidden_size == 32


@pytest.mark.distributed
@pytest.mark.slow
def test_tp2_zero3_dp2_match_single_process(tmp_path, reference):
    from ernie_zoo.parallel.distributed import run_local_ranks

    run_local_ranks([__file__, "--worker", str(tmp_path), "2", "noresume"], nproc=4, timeout=900)
    results = _check_against_reference(tmp_path, reference, world=4)
    # ranks (0, 1) and (2, 3) are TP pairs: one data-parallel replica each, fed the same rows
    assert [(r["dp_rank"], r["dp_world_size"]) for r in results] == [(0, 2), (0, 2), (1, 2), (1, 2)]
    # the sparse last layer runs on this rank's heads / 2 (q/k/v column-sharded) and still matches
    assert all(r["recompute"] == "full" and r["sparse_last_layer"] is True for r in results)
    from ernie_zoo.models.presets import count_parameters

    assert {r["num_parameters"] for r in results} == {count_parameters(_model().config)}  # the whole model
    for res in results:
        parts = res["partitions"]
        # TP halves the split dimension (ds_shape is this TP rank's weight), ZeRO-3 halves what is left
        assert parts["ernie.encoder.layer.0.attention.self.query.weight"] == [512, 256, [16, 32]]
        assert parts["ernie.encoder.layer.0.attention.output.dense.weight"] == [512, 256, [32, 16]]
        assert parts["ernie.encoder.layer.1.intermediate.dense.weight"] == [1024, 512, [32, 32]]
        assert parts["ernie.encoder.layer.1.output.dense.weight"] == [1024, 512, [32, 32]]
        assert parts["ernie.embeddings.char_features.fusion.weight"][2][0] == 16
        # replicated over TP, still partitioned by ZeRO
        assert parts["ernie.embeddings.word_embeddings.weight"] == [VOCAB * 32, VOCAB * 16, [VOCAB, 32]]
        assert parts["ernie.encoder.layer.0.output.LayerNorm.weight"] == [32, 16, [32]]
        assert res["zero_init_query"] == [[16, 32], 256]  # zero.Init model: TP halves it, then ZeRO (DP 2)
    # the sharded checkpoint written after the last step, read back without any process group: TP shards
    # joined, ZeRO partitions joined, equal to the weights the run gathered itself
    from safetensors.torch import load_file

    from ernie_zoo.parallel.consolidate import consolidate_checkpoint, read_zero_checkpoint

    _, masters = read_zero_checkpoint(tmp_path / "final_ckpt")
    final = load_file(str(tmp_path / "final.safetensors"))
    assert set(masters) == {name for name, _ in _model().named_parameters()}  # tied decoder once
    for name, value in masters.items():
        assert torch.equal(value, final[name]), name  # fp32: the masters are the weights
    report = consolidate_checkpoint(tmp_path / "final_ckpt", tmp_path / "consolidated", tokenizer=None)
    assert report["compared_with"] and report["max_logit_diff"] < 1e-5


def _nvme_offload_builds() -> bool:
    """Whether DeepSpeed's async_io op (ZeRO-Infinity's NVMe swapping) can be built here: it needs libaio."""
    from deepspeed.ops.op_builder import AsyncIOBuilder

    return AsyncIOBuilder().is_compatible(verbose=False)


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_offload_two_ranks_match_single_process(tmp_path, reference):
    """ZeRO-Offload on 2 gloo ranks: `distributed.offload_optimizer: cpu` steps the ZeRO-3 partitions with
    DeepSpeed's CPU Adam (checked on the engine, not assumed) and trains to the single-process AdamW run's
    losses, grad norms and weights (same tolerances as above: CPU Adam computes the same AdamW update in its own
    vectorised order); its sharded checkpoint resumes exactly. Where libaio is installed (the async_io op
    builds; CI: apt-get install libaio-dev), ZeRO-Infinity too: parameters and optimizer states offloaded to
    nvme_path, DeepSpeed's NVMe swappers set up on every parameter and the optimizer, the same numbers. This tiny
    model fits DeepSpeed's host swap buffers, so no swap file is written: the NVMe I/O itself is not exercised."""
    from safetensors.torch import load_file

    from ernie_zoo.parallel.distributed import run_local_ranks

    nvme = _nvme_offload_builds()
    run_local_ranks(
        [__file__, "--offload-worker", str(tmp_path), "nvme" if nvme else "cpu"], nproc=2, timeout=900
    )
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    ref = reference["params"]
    for tag, offload in [("cpu", {"offload_optimizer": "cpu", "offload_param": "none"})] + (
        [("nvme", {"offload_optimizer": "nvme", "offload_param": "nvme"})] if nvme else []
    ):
        for res in (r[tag] for r in results):
            assert res["offload"] == offload
            assert res["basic_optimizer_is_cpu_adam"] and res["deepspeed_adam_offload"]
            assert res["zero_offload_optimizer"] == offload["offload_optimizer"]
            assert res["stage3_offload_optimizer"] is True
            assert res["stage3_offload_param"] is (offload["offload_param"] != "none")
            nvme_states = offload["offload_optimizer"] == "nvme"
            assert res["optimizer_swapper"] == ("PartitionedOptimizerSwapper" if nvme_states else "NoneType")
            assert res["params_in_nvme_and_cpu"] is nvme_states
            assert res["param_nvme_swapper"] is (offload["offload_param"] == "nvme")
            assert res["losses"] == pytest.approx(reference["losses"], rel=1e-5)
            assert res["norms"] == pytest.approx(reference["norms"], rel=1e-5)
        final = load_file(str(tmp_path / f"final-{tag}.safetensors"))
        assert {k for k in ref if not k.startswith("cls.predictions.decoder")} <= set(final)
        for name, value in final.items():
            assert torch.allclose(value, ref[name], rtol=0, atol=1e-4), (tag, name)
    assert results[0]["cpu"]["resumed_max_param_diff"] < 1e-6
    if nvme:  # each rank set up its swap folders for parameters and optimizer states under nvme_path
        for rank, res in enumerate(results):
            dirs = res["nvme"]["swap_dirs"]
            assert f"zero_stage_3/optimizer/rank{rank}" in dirs, dirs
            assert any(d.endswith(f"params/rank{rank}") for d in dirs), dirs


def test_offload_keys_write_deepspeed_offload_sections(tmp_path):
    """`distributed.offload_*` become zero_optimization.offload_optimizer / offload_param (pinned host memory on
    CUDA only); none removes a json's section; what DeepSpeed cannot run is refused naming the key."""
    from ernie_zoo.parallel.deepspeed_backend import (
        build_config,
        make_config,
        offloads_optimizer,
        recipe_offloads_optimizer,
    )
    from ernie_zoo.training.recipe import DistributedArgs

    recipe = _recipe(1, 2)
    recipe.distributed = DistributedArgs(backend="deepspeed", offload_optimizer="cpu")
    cfg = build_config(recipe, CPU_CONFIG, on_cuda=False)
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert "offload_param" not in cfg["zero_optimization"]
    assert offloads_optimizer(cfg) and recipe_offloads_optimizer(recipe)
    recipe.distributed = DistributedArgs(
        backend="deepspeed", offload_optimizer="nvme", offload_param="cpu", nvme_path=str(tmp_path)
    )
    cfg = build_config(recipe, CPU_CONFIG, on_cuda=True)
    zero = cfg["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "nvme", "pin_memory": True, "nvme_path": str(tmp_path)}
    assert zero["offload_param"] == {"device": "cpu", "pin_memory": True}
    # null keeps the json's; none removes it
    base = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    common = dict(micro_batch_size=1, grad_accum_steps=1, grad_clip=1.0, on_cuda=False)
    assert offloads_optimizer(make_config(base, **common))
    assert not offloads_optimizer(make_config(base, offload_optimizer="none", **common))
    assert recipe_offloads_optimizer(_recipe(1, 1), base)  # no recipe key: the json decides
    assert not recipe_offloads_optimizer(_recipe(1, 1), CPU_CONFIG)
    # what DeepSpeed cannot do, refused before any rank starts
    with pytest.raises(ValueError, match="offload_param.*needs ZeRO stage 3, not 2"):
        make_config(CPU_CONFIG, zero_stage=2, offload_param="cpu", **common)
    with pytest.raises(ValueError, match="offload_optimizer = 'cpu' needs ZeRO stage 1-3, not 0"):
        make_config(CPU_CONFIG, zero_stage=0, offload_optimizer="cpu", **common)
    with pytest.raises(ValueError, match="'nvme' needs ZeRO stage 3, not 2"):
        make_config(CPU_CONFIG, zero_stage=2, offload_optimizer="nvme", nvme_path=tmp_path, **common)
    with pytest.raises(ValueError, match="needs distributed.nvme_path"):
        make_config(CPU_CONFIG, offload_param="nvme", **common)
    with pytest.raises(ValueError, match="must be one of none, cpu, nvme"):
        make_config(CPU_CONFIG, offload_optimizer="gpu", **common)
    assert make_config(CPU_CONFIG, zero_stage=2, offload_optimizer="cpu", **common)  # ZeRO-Offload on stage 2
    # the recipe schema says the same at load time
    for bad, match in [
        ({"offload_param": "cpu", "zero_stage": 1}, "parameter offload needs ZeRO stage 3"),
        ({"offload_optimizer": "cpu", "zero_stage": 0}, "needs ZeRO stage 1-3"),
        ({"offload_optimizer": "nvme"}, "nvme_path"),
        ({"offload_param": "disk"}, "must be none, cpu, nvme or null"),
    ]:
        with pytest.raises(ValueError, match=match):
            DistributedArgs(backend="deepspeed", **bad).validate()
    with pytest.raises(ValueError, match="needs distributed.backend deepspeed"):
        DistributedArgs(offload_optimizer="cpu").validate()


def test_build_config_takes_the_recipe_values():
    from ernie_zoo.parallel.deepspeed_backend import build_config
    from ernie_zoo.parallel.tp_plan import ERNIE_ZOO_TP_PLAN

    recipe = _recipe(2, 8)
    recipe.precision = "bf16"
    recipe.optim.grad_clip = None
    cfg = build_config(
        recipe, REPO / "recipes/deepspeed/zero3-100b.json", tp_plan=ERNIE_ZOO_TP_PLAN, on_cuda=True
    )
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["gradient_accumulation_steps"] == 8
    assert cfg["gradient_clipping"] == 0.0  # explicit: no clipping, not DeepSpeed's default
    assert cfg["bf16"] == {"enabled": True} and "fp16" not in cfg
    assert cfg["zero_optimization"]["stage"] == 3 and cfg["zero_optimization"]["overlap_comm"] is True
    assert cfg["tensor_parallel"]["autotp_size"] == 8
    assert len(cfg["tensor_parallel"]["partition_config"]["layer_specs"]) == len(ERNIE_ZOO_TP_PLAN)
    recipe.precision = "fp32"
    cpu = build_config(recipe, CPU_CONFIG, tp_size=1, zero_stage=2, on_cuda=False)
    assert "bf16" not in cpu and "tensor_parallel" not in cpu and cpu["zero_optimization"]["stage"] == 2
    with pytest.raises(ValueError, match="optimizer"):
        build_config(recipe, {"optimizer": {"type": "Adam"}})
    recipe.precision = "fp16"
    with pytest.raises(ValueError, match="needs CUDA"):
        build_config(recipe, CPU_CONFIG, on_cuda=False)
    with pytest.raises(FileNotFoundError):
        build_config(recipe, REPO / "recipes/deepspeed/none.json")


def test_param_groups_read_the_true_shape_of_zero3_partitions():
    """Under ZeRO-3 a parameter's data is an empty 1-D shard and its shape lives in `ds_shape`: the decay
    groups must be those of the whole model (no decay for biases, LayerNorm and embeddings only)."""
    from ernie_zoo.training.core import param_groups

    whole = _model()
    expected = [
        {name for name, p in whole.named_parameters() if any(p is q for q in g["params"])}
        for g in param_groups(whole, 0.1)
    ]
    assert expected[0] and expected[1]
    partitioned = _model()
    for p in partitioned.parameters():  # what zero.Init leaves: p.data = empty shard, p.ds_shape = shape
        p.ds_shape = p.shape
        p.data = torch.empty(0)
    names = {id(p): name for name, p in partitioned.named_parameters()}
    got = [{names[id(p)] for p in g["params"]} for g in param_groups(partitioned, 0.1)]
    assert got == expected
    assert "ernie.encoder.layer.0.attention.self.query.weight" in got[0]  # a matrix: decayed


# ----------------------------------------------------------------------------------------------- worker
def _worker(out_dir: str, tp: int, resume: bool) -> None:
    import torch.distributed as dist
    from safetensors.torch import save_file

    from ernie_zoo.models.recompute import selective_recompute_enabled
    from ernie_zoo.training.backends import engine_for_recipe

    torch.set_num_threads(1)
    out = Path(out_dir)
    recipe = _recipe(1, 2)

    def make_engine():
        # recompute changes nothing but memory and time: the TP run recomputes whole layers (full activation
        # checkpointing), the DP runs each layer's attention core (selective); the same numbers expected
        recompute = "full" if tp > 1 else "selective"
        return engine_for_recipe(
            recipe, _model(), backend="deepspeed", config=CPU_CONFIG, tp_size=tp, recompute=recompute
        )

    engine = make_engine()
    rank, world = dist.get_rank(), dist.get_world_size()
    partitions = {
        name: [int(p.ds_numel), int(p.ds_tensor.numel()), list(p.ds_shape)]
        for name, p in engine.model.named_parameters()
    }

    def train_step(step: int) -> tuple[float, float]:
        batch = _global_batch(step)
        total = 0.0
        for micro in range(recipe.grad_accum_steps):
            row = engine.dp_rank * recipe.grad_accum_steps + micro  # this replica's rows of the global batch
            loss, _, _ = engine.forward(_rows(batch, [row]))
            engine.backward(loss / recipe.grad_accum_steps)
            total += loss.item() / recipe.grad_accum_steps
        norm = engine.step()
        mean = torch.tensor([total])
        dist.all_reduce(mean)  # TP pairs hold the same loss, so the mean over all ranks is the DP mean
        return mean.item() / world, norm

    losses, norms, lrs = [], [], []
    for step in range(STEPS):
        if resume and step == STEPS - 1:
            engine.save(out / "ckpt")
        loss, norm = train_step(step)
        losses.append(loss)
        norms.append(norm)
        lrs.append(engine.lr)
    final = engine.consolidated_state_dict()
    if not resume:
        engine.save(out / "final_ckpt")  # the sharded checkpoint of the final weights (consolidation test)
    result = {
        "losses": losses,
        "norms": norms,
        "lrs": lrs,
        "partitions": partitions,
        "dp_rank": engine.dp_rank,
        "dp_world_size": engine.dp_world_size,
        "sparse_last_layer": engine.objective.sparse_last_layer,
        "recompute": "full"
        if engine.model.is_activation_checkpointing
        else "selective"
        if selective_recompute_enabled(engine.model)
        else "none",
        "num_parameters": engine.num_parameters(),
    }
    if resume:
        fresh = make_engine()
        fresh.load(out / "ckpt")
        engine = fresh
        result["resumed_loss"], _ = train_step(STEPS - 1)
        again = engine.consolidated_state_dict()
        if rank == 0:
            result["resumed_max_param_diff"] = max((again[k] - final[k]).abs().max().item() for k in final)
        else:
            result["resumed_max_param_diff"] = 0.0
    result.update(_zero_init_check(recipe, tp))
    if rank == 0:
        save_file({k: v.clone().contiguous() for k, v in final.items()}, str(out / "final.safetensors"))
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()


def _zero_init_check(recipe, tp: int) -> dict:
    """Build the model already partitioned (zero.Init, the 100B path), shard it with AutoTP when tp > 1,
    and train one step on it."""
    from ernie_zoo.training.backends import engine_for_recipe
    from ernie_zoo.training.deepspeed_engine import build_model_zero3

    reference = _model()  # its config and character tables, and the weights of the same build in one process
    features = reference.ernie.embeddings.char_features
    tables = {
        name: buf
        for name, buf in features.named_buffers()
        if name in ("default_pinyin_ids", "radical_ids", "stroke_counts")
    }
    model = build_model_zero3(reference.config, recipe, tables, config=CPU_CONFIG, tp_size=tp)
    dp = dist_world() // tp
    # no rank ever holds more than a DP share of any weight (zero.Init partitions over every rank; AutoTP then
    # re-partitions the TP shards over the DP group inside deepspeed.initialize)
    born_partitioned = all(p.ds_tensor.numel() <= -(-p.ds_numel // dp) for p in model.parameters())
    engine = engine_for_recipe(recipe, model, backend="deepspeed", config=CPU_CONFIG, tp_size=tp)
    query = dict(engine.model.named_parameters())["ernie.encoder.layer.0.attention.self.query.weight"]
    # transformers' ZeRO-3 init ran our _init_weights on gathered weights: LayerNorm = 1, concat fusion = [I | 0]
    state = engine.consolidated_state_dict()
    batch = _global_batch(0)
    for micro in range(recipe.grad_accum_steps):
        loss, _, _ = engine.forward(_rows(batch, [engine.dp_rank * recipe.grad_accum_steps + micro]))
        engine.backward(loss / recipe.grad_accum_steps)
    norm = engine.step()
    # the AdamW group of every parameter as ZeRO-3 holds it (weight decay 0.01 or 0.0)
    opt = engine.optimizer
    names = {id(p): name for name, p in engine.model.named_parameters()}
    decay = {}
    for i, params in enumerate(opt.fp16_groups):
        wd = opt.optimizer.param_groups[opt.sub_group_to_group_id[i]]["weight_decay"]
        decay.update({names[id(p)]: wd for p in params})
    out = {
        "zero_init_weight_decay": decay,
        "zero_init_partitioned": born_partitioned,
        "zero_init_loss": loss.item(),
        "zero_init_norm": norm,
        "zero_init_query": [list(query.ds_shape), int(query.ds_tensor.numel())],
    }
    if state is not None:
        fusion = state["ernie.embeddings.char_features.fusion.weight"]
        out["zero_init_fusion_identity"] = bool(torch.equal(fusion[:, :32], torch.eye(32)))
        out["zero_init_fusion_rest_zero"] = bool(fusion[:, 32:].abs().max() == 0)
        out["zero_init_layernorm_ones"] = bool(
            torch.all(state["ernie.encoder.layer.1.output.LayerNorm.weight"] == 1)
        )
        out["zero_init_query_std"] = state["ernie.encoder.layer.0.attention.self.query.weight"].std().item()
        # seeded alike, the partitioned build draws the one-process build's weights
        out["zero_init_diff_to_one_process"] = max(
            (state[name] - p).abs().max().item() for name, p in reference.named_parameters() if name in state
        )
    return out


def dist_world() -> int:
    import torch.distributed as dist

    return dist.get_world_size()


def _loop_worker(out_dir: str, argv: list[str]) -> int:
    """One rank of the real `ernie-pretrain` CLI (`main`), its stdout and stderr in `rank<N>.log`, recording
    what the loop tests check in `local<N>.json`: every parameter's [full numel, numel held here] right after
    the loop built the model, and this rank's own loss per step (`on_step_end`)."""
    import os

    import ernie_zoo.training.pretrain as loop

    rank = int(os.environ["RANK"])
    out = Path(out_dir)
    log = open(out / f"rank{rank}.log", "w")  # noqa: SIM115 - lives as long as the process
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    record: dict = {"partitions": {}, "local_losses": []}
    build, run = loop.build_model_for, loop.pretrain

    def build_and_record(recipe, config, tokenizer):
        model = build(recipe, config, tokenizer)
        record["partitions"] = {
            name: [int(getattr(p, "ds_numel", p.numel())), int(getattr(p, "ds_tensor", p).numel())]
            for name, p in model.named_parameters()
        }
        return model

    def run_recording(recipe, on_step_end=None):
        return run(recipe, on_step_end=lambda step, m: record["local_losses"].append([step, m["loss"]]))

    loop.build_model_for, loop.pretrain = build_and_record, run_recording
    code = loop.main(argv)
    (out / f"local{rank}.json").write_text(json.dumps(record))
    return code


def _offload_worker(out_dir: str, nvme: bool) -> None:
    """One rank of the offload test: ZeRO-3 with the optimizer offloaded to the CPU (the recipe keys through
    `build_config`), 3 steps, a sharded checkpoint after step 2 resumed by a fresh engine; with `nvme`, a second
    run with parameters and optimizer states swapped to files (ZeRO-Infinity through DeepSpeed's async_io op)."""
    import os

    import torch.distributed as dist
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from safetensors.torch import save_file

    from ernie_zoo.training.backends import engine_for_recipe
    from ernie_zoo.training.recipe import DistributedArgs

    torch.set_num_threads(1)
    out = Path(out_dir)
    rank = int(os.environ["RANK"])  # the process group starts inside the first engine

    def run(tag: str, **offload) -> dict:
        recipe = _recipe(1, 2)
        recipe.distributed = DistributedArgs(backend="deepspeed", **offload)

        def make_engine():
            return engine_for_recipe(recipe, _model(), config=CPU_CONFIG, tp_size=1)

        engine = make_engine()
        opt = engine.optimizer  # DeepSpeed's ZeRO-3 optimizer around the basic one
        record = {
            "offload": engine.offload,
            "basic_optimizer_is_cpu_adam": isinstance(engine.ds.basic_optimizer, DeepSpeedCPUAdam),
            "zero_offload_optimizer": str(engine.ds.zero_offload_optimizer().device),
            "stage3_offload_optimizer": bool(opt.offload_optimizer),
            "stage3_offload_param": bool(opt.offload_param),
            "deepspeed_adam_offload": bool(opt.deepspeed_adam_offload),
            "optimizer_swapper": type(opt.optimizer_swapper).__name__,  # NoneType unless states go to NVMe
            "params_in_nvme_and_cpu": bool(opt.params_in_nvme_and_cpu),
            "param_nvme_swapper": all(
                getattr(p, "nvme_swapper", None) is not None for p in engine.model.parameters()
            ),
        }
        losses, norms = [], []
        for step in range(STEPS):
            if step == STEPS - 1 and tag == "cpu":
                engine.save(out / "ckpt")
            batch = _global_batch(step)
            total = 0.0
            for micro in range(recipe.grad_accum_steps):
                loss, _, _ = engine.forward(_rows(batch, [engine.dp_rank * recipe.grad_accum_steps + micro]))
                engine.backward(loss / recipe.grad_accum_steps)
                total += loss.item() / recipe.grad_accum_steps
            norms.append(engine.step())
            mean = torch.tensor([total])
            dist.all_reduce(mean)
            losses.append(mean.item() / dist.get_world_size())
        record.update(losses=losses, norms=norms)
        final = engine.consolidated_state_dict()
        if tag == "cpu":
            fresh = make_engine()
            fresh.load(out / "ckpt")
            batch = _global_batch(STEPS - 1)
            for micro in range(recipe.grad_accum_steps):
                loss, _, _ = fresh.forward(_rows(batch, [fresh.dp_rank * recipe.grad_accum_steps + micro]))
                fresh.backward(loss / recipe.grad_accum_steps)
            fresh.step()
            again = fresh.consolidated_state_dict()
            if rank == 0:
                record["resumed_max_param_diff"] = max(
                    (again[k] - final[k]).abs().max().item() for k in final
                )
        if rank == 0:
            save_file(
                {k: v.clone().contiguous() for k, v in final.items()}, str(out / f"final-{tag}.safetensors")
            )
        return record

    result = {"cpu": run("cpu", offload_optimizer="cpu")}
    if nvme:
        swap = out / "nvme"
        result["nvme"] = run("nvme", offload_optimizer="nvme", offload_param="nvme", nvme_path=str(swap))
        result["nvme"]["swap_dirs"] = sorted(str(p.relative_to(swap)) for p in swap.rglob("*") if p.is_dir())
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--offload-worker":
    _offload_worker(sys.argv[2], sys.argv[3] == "nvme")
    finish_distributed()  # every rank, after its last collective (a live group can abort at exit)
if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--worker":
    _worker(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "resume")
    finish_distributed()  # every rank, after its last collective (a live group can abort at exit)
if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] == "--loop-worker":
    sys.exit(_loop_worker(sys.argv[2], sys.argv[3:]))


@pytest.mark.slow
def test_gpu_bench_refuses_cpu_and_smoke_runs(tmp_path):
    import os
    import subprocess

    bench = REPO / "bench" / "gpu_pretrain.py"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(bench)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "no CUDA device" in proc.stderr  # no numbers without a GPU
    out = tmp_path / "smoke.json"
    cmd = [sys.executable, str(bench), "--smoke", "--out", str(out), "--micro-batch", "2", "--seq-len", "32"]
    proc = subprocess.run(
        [*cmd, "--steps", "2", "--warmup", "1"], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["smoke"] is True and record["device"] != "cuda"
    for name in ("baseline", "compiled", "deepspeed"):  # eager, torch.compile'd (#38) and ZeRO-3
        res = record["results"][name]
        assert res["parameters"] == record["results"]["baseline"]["parameters"]  # ZeRO-3 counts full sizes
        assert res["tokens_per_s"] > 0 and res["mfu"] is None  # no peak FLOPs for a CPU
    assert (
        record["deepspeed_over_baseline_tokens_per_s"] > 0 and record["compiled_over_eager_tokens_per_s"] > 0
    )
    # (compiled and eager agree on losses and weights: tests/test_compile_step.py)


@pytest.mark.distributed
@pytest.mark.slow
def test_ernie_pretrain_deepspeed_two_ranks_resumes_exactly(tmp_path, tiny_tokenizer):
    """The real `ernie-pretrain` loop on 2 gloo ranks with `distributed.backend: deepspeed`: sharded
    checkpoints, and a run stopped at step 4 and resumed to step 6 logs the same numbers as an
    uninterrupted 6-step run."""
    from ernie_zoo.parallel.distributed import run_local_ranks
    from ernie_zoo.training.logging_utils import read_metrics

    tiny_tokenizer.save_pretrained(tmp_path / "tok")

    def pretrain(out: Path, steps: int, env: dict | None = None) -> None:
        run_local_ranks(
            ["-m", "ernie_zoo.training.pretrain", str(REPO / "recipes/pretrain/tiny-cpu.yaml")]
            + ["--output_dir", str(out), "--tokenizer.path", str(tmp_path / "tok"), "--max_steps", str(steps)]
            + [
                "--data.files",
                f"[{REPO / 'tests/data/zh_sentences.txt'}]",
                "--distributed.backend",
                "deepspeed",
            ]
            + ["--distributed.deepspeed_config", str(CPU_CONFIG), "--checkpoint.interval", "2"]
            + ["--eval.interval", "0", "--logging.interval", "1", "--logging.progress_bar", "false"]
            + ["--logging.tensorboard", "false", "--optim.warmup_steps", "1"],
            nproc=2,
            timeout=600,
            cwd=REPO,
            env=env,
        )

    pretrain(tmp_path / "straight", 6)
    # both ranks SIGKILL themselves right after step 4 (the loop's test hook), after checkpoint-4 is written
    with pytest.raises(RuntimeError, match="failed"):
        pretrain(tmp_path / "resumed", 6, env={"ERNIE_ZOO_TEST_KILL_AT_STEP": "4"})
    assert (tmp_path / "resumed" / "checkpoint-4").is_dir()
    pretrain(tmp_path / "resumed", 6)  # continues from checkpoint-4
    ckpt = tmp_path / "straight" / "checkpoint-6"
    assert {p.name for p in (ckpt / "zero").iterdir()} >= {"rank00000.safetensors", "rank00001.safetensors"}
    straight = [r for r in read_metrics(tmp_path / "straight" / "metrics.jsonl") if "train/loss" in r]
    resumed = [r for r in read_metrics(tmp_path / "resumed" / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in straight] == [1, 2, 3, 4, 5, 6]
    by_step = {r["step"]: r for r in resumed}
    for r in straight:
        assert by_step[r["step"]]["train/loss"] == pytest.approx(r["train/loss"], rel=1e-6), r["step"]
        assert by_step[r["step"]]["train/grad_norm"] == pytest.approx(r["train/grad_norm"], rel=1e-5), r[
            "step"
        ]
    assert straight[-1]["train/loss"] < straight[0]["train/loss"] + 0.5  # finite and sane


# ------------------------------------------------------------------ the ernie-pretrain loop on 2 ranks
TINY = REPO / "recipes" / "pretrain" / "tiny-cpu.yaml"
SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"


def _loop_args(run_dir: Path, tok_dir: Path) -> list[str]:
    return [
        str(TINY),
        *("--output_dir", str(run_dir), "--tokenizer.path", str(tok_dir), "--max_steps", "4"),
        *("--data.files", f"[{SENTENCES}]", "--distributed.backend", "deepspeed"),
        *("--distributed.deepspeed_config", str(CPU_CONFIG), "--checkpoint.interval", "0"),
        *("--eval.interval", "2", "--eval.batch_size", "2", "--logging.interval", "1"),
        *("--logging.progress_bar", "true", "--logging.tensorboard", "true", "--optim.warmup_steps", "1"),
    ]


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory, tiny_tokenizer):
    """`ernie-pretrain` with `distributed.backend: deepspeed` (ZeRO-3) on 2 gloo ranks for 4 steps: each rank
    trains on its own half of the data; eval every 2 steps on 3 batches (rank 0 takes 2, rank 1 one)."""
    from ernie_zoo.parallel.distributed import run_local_ranks

    tmp = tmp_path_factory.mktemp("ds-loop")
    tiny_tokenizer.save_pretrained(tmp / "tok")
    args = _loop_args(tmp / "run", tmp / "tok")
    run_local_ranks([__file__, "--loop-worker", str(tmp), *args], nproc=2, timeout=900, cwd=REPO)
    local = [json.loads((tmp / f"local{r}.json").read_text()) for r in range(2)]
    logs = [(tmp / f"rank{r}.log").read_text(encoding="utf-8", errors="replace") for r in range(2)]
    return tmp, local, logs


@pytest.mark.distributed
@pytest.mark.slow
def test_loop_builds_the_model_partitioned(loop_run):
    """ZeRO-3 through the loop: the model comes out of the loop's builder already partitioned (zero.Init),
    never whole on a rank (a 100B model would be ~400 GB in fp32)."""
    _, local, _ = loop_run
    for rec in local:
        parts = rec["partitions"]
        assert parts and all(held == (full + 1) // 2 for full, held in parts.values()), parts
        assert sum(h for _, h in parts.values()) < 0.51 * sum(f for f, _ in parts.values())


@pytest.mark.distributed
@pytest.mark.slow
def test_loop_logs_the_mean_over_ranks_and_only_rank0_reports(loop_run):
    import re

    from ernie_zoo import ErnieZooForMaskedLM
    from ernie_zoo.recipe_cli import cli_args, parse_recipe
    from ernie_zoo.training.backends import engine_for_recipe
    from ernie_zoo.training.data import load_dataset, load_tokenizer
    from ernie_zoo.training.logging_utils import read_metrics
    from ernie_zoo.training.pretrain import _eval_batches, evaluate
    from ernie_zoo.training.recipe import PretrainRecipe

    tmp, local, logs = loop_run
    run_dir = tmp / "run"
    records = read_metrics(run_dir / "metrics.jsonl")
    logged = {r["step"]: r["train/loss"] for r in records if "train/loss" in r}
    mine = [dict(rec["local_losses"]) for rec in local]  # step -> this rank's own loss
    assert sorted(logged) == [1, 2, 3, 4] == sorted(mine[0]) == sorted(mine[1])
    assert any(abs(mine[0][s] - mine[1][s]) > 1e-3 for s in logged)  # the ranks saw different data
    for step, loss in logged.items():
        assert loss == pytest.approx((mine[0][step] + mine[1][step]) / 2, rel=1e-12), step

    # eval: the ranks split the 3 held-out batches; the logged metrics are those of all of them, as one
    # process computes them on the final weights (checkpoint-4's fp32 export)
    recipe = parse_recipe(PretrainRecipe, cli_args(_loop_args(run_dir, tmp / "tok")))
    tokenizer = load_tokenizer(recipe, run_dir)
    _, eval_ds, _ = load_dataset(recipe, tokenizer)
    batches = _eval_batches(recipe, tokenizer, eval_ds)
    assert len(batches) == 3
    model = ErnieZooForMaskedLM.from_pretrained(run_dir / "checkpoint-4")
    expected = evaluate(engine_for_recipe(recipe, model, torch.device("cpu"), backend="single"), batches)
    final = [r for r in records if "eval/loss" in r]
    assert [r["step"] for r in final] == [2, 4]
    for key in ("eval/loss", "eval/accuracy"):
        assert final[-1][key] == pytest.approx(expected[key], rel=1e-5), key

    # only rank 0 talks: progress bar, eval lines, the final report; one TensorBoard writer, one summary
    bar = re.compile(r"pretrain:\s+\d+%\|")
    assert bar.search(logs[0]) and "eval loss" in logs[0] and "ernie-pretrain: 4 steps" in logs[0]
    assert not bar.search(logs[1]) and "eval loss" not in logs[1] and "ernie-pretrain:" not in logs[1]
    assert "ernie_zoo.training" not in logs[1], logs[1][-2000:]  # no INFO lines of the loop either
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 4


@pytest.mark.distributed
@pytest.mark.slow
def test_consolidate_turns_the_sharded_checkpoint_into_a_model_dir(loop_run, tmp_path, capsys):
    import shutil

    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from ernie_zoo import ErnieZooForMaskedLM
    from ernie_zoo.cli import main

    tmp, _, _ = loop_run
    ckpt = tmp / "run" / "checkpoint-4"
    out = tmp_path / "model"
    assert main(["consolidate", str(ckpt), str(out)]) == 0
    assert "logits match" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # atomic: no temporary left behind
    assert main(["consolidate", str(ckpt), str(tmp_path / "bf16"), "--dtype", "bf16"]) == 0
    assert "logits match" in capsys.readouterr().out  # within bf16 rounding of the fp32 export
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "bf16" / "model.safetensors"))
    assert {v.dtype for v in weights.values() if v.is_floating_point()} == {torch.bfloat16}
    model = AutoModelForMaskedLM.from_pretrained(out).eval()
    run_model = ErnieZooForMaskedLM.from_pretrained(ckpt).eval()  # the run's model (rank 0's export)
    assert type(model) is ErnieZooForMaskedLM
    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer(
        SENTENCES.read_text(encoding="utf-8").splitlines()[:4], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, run_model(**batch).logits, rtol=0, atol=1e-5)
    ours, theirs = model.state_dict(), run_model.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)  # fp32 masters == the trained weights

    # clear errors: not a checkpoint, an existing output, a damaged shard (manifest or the file itself)
    assert main(["consolidate", str(tmp / "run"), str(tmp_path / "x")]) == 2
    assert "no zero/ directory" in capsys.readouterr().err
    assert main(["consolidate", str(ckpt), str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    bad = tmp_path / "bad"
    shutil.copytree(ckpt, bad)
    shard = bad / "zero" / "rank00001.safetensors"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    assert main(["consolidate", str(bad), str(tmp_path / "y"), "--tokenizer", str(tmp / "tok")]) == 2
    err = capsys.readouterr().err
    assert "zero/rank00001.safetensors" in err and "truncated" in err
    (bad / "manifest.json").unlink()  # no manifest to catch it: the shard itself is checked
    assert main(["consolidate", str(bad), str(tmp_path / "y"), "--tokenizer", str(tmp / "tok")]) == 2
    err = capsys.readouterr().err
    assert "rank00001.safetensors" in err and "corrupt or truncated shard" in err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
