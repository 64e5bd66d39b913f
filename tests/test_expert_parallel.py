"""Expert parallelism in `ernie-pretrain`'s engines (`training/expert_engine.py`): the ERNIE 4.5 MoE decoder on 2
gloo CPU ranks, EP 2 x DP 2 (each rank holds 2 of the 4 experts of the MoE layer, tokens dispatched by
transformers' all-to-all, the dense parts data-parallel), against one process on the same global batch.

The reference is the single-device engine (`PlainEngine`) running each rank's rows as one of two micro batches
(gradient accumulation 2): each rank's loss is the next-token loss + router_aux_loss_coef (0.1 here, so it matters)
x the router's load-balancing loss of its own rows, as one process computes it on that micro batch. 3 AdamW steps
(lr 1e-2, clipping at 0.5 active), packed rows of two documents each.

Checked: per-step losses and grad norms (1e-5 relative), LR; the gradients after the step-1 reduction, per
parameter, equal the reference's (dense ones all-reduced; each expert's NOT averaged over the EP group: the rank's
shard equals the reference's rows of those experts, 1e-6); each rank holds [2, ...] of the [4, ...] expert tensors
and AdamW moments of its experts only; the final weights joined from the checkpoint equal the reference's (5e-5);
the checkpoint's model.safetensors loads in plain `AutoModelForCausalLM` and `ernie-zoo consolidate` turns it into
a directory whose logits equal the reference model's; a fresh engine loading the checkpoint written before the last
step reproduces that step bit for bit; the single-device engine resumes from the EP checkpoint (resharding EP 2 ->
one process). The worker is this file run under torchrun.

ZeRO-2/3 (FSDP2: dense over the data-parallel ranks, experts over the expert-data-parallel ones): EP 2 x ZeRO-2 on 2
ranks, EP 2 x DP 4 ZeRO-3 (its checkpoint also resumed at EP 4 x ZeRO-1 on the same ranks) and EP 2 x TP 2 x ZeRO-3
on 4, the same checks, plus: each rank's dense parameters, AdamW moments and reduced gradients are the same shard
(without TP the shards add up to the whole), and its expert gradients only its experts' shard.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

STEPS, GLOBAL_BATCH, VOCAB, SEQ, RANKS = 3, 4, 300, 16, 2
LOSS_RTOL, GRAD_ATOL, WEIGHT_ATOL = 1e-5, 1e-6, 5e-5
CLIP = 0.5


def _config(**fields):
    """The tiny MoE decoder (2 layers, the second MoE) with `fields` over it (a layout's "model")."""
    from ernie_zoo.models.decoder import decoder_config

    return decoder_config(True, **{**dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=64,
                          moe_num_experts=4, moe_k=2, moe_num_shared_experts=1, moe_intermediate_size=16,
                          moe_layer_start_index=1, router_aux_loss_coef=0.1), **fields})  # fmt: skip


def _model(meta: bool = False, **fields):
    from ernie_zoo.training.causal_lm import build_decoder_model

    return build_decoder_model(_config(**fields), seed=0, meta=meta)


def _recipe(micro_batch_size: int, grad_accum_steps: int, **distributed):
    from ernie_zoo.training.recipe import DistributedArgs, OptimArgs, PretrainRecipe

    return PretrainRecipe(
        max_steps=STEPS,
        micro_batch_size=micro_batch_size,
        grad_accum_steps=grad_accum_steps,
        seed=0,
        optim=OptimArgs(lr=1e-2, warmup_steps=1, decay="linear", grad_clip=CLIP, weight_decay=0.01),
        distributed=DistributedArgs(backend="pipeline" if distributed else "single", **distributed),
    )


def _batch(step: int) -> dict[str, torch.Tensor]:
    """The step's 4 packed rows, each two document pieces; every row predicts SEQ - 2 tokens (so the mean of the
    ranks' means is the mean over all tokens)."""
    g = torch.Generator().manual_seed(3000 + step)
    ids = torch.randint(5, VOCAB, (GLOBAL_BATCH, SEQ), generator=g)
    positions = torch.zeros_like(ids)
    labels = ids.clone()
    for row in range(GLOBAL_BATCH):
        cut = 3 + 2 * row
        positions[row, :cut] = torch.arange(cut)
        positions[row, cut:] = torch.arange(SEQ - cut)
        labels[row, [0, cut]] = -100
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def _rows(batch: dict[str, torch.Tensor], rank: int, parts: int = RANKS) -> dict[str, torch.Tensor]:
    per = GLOBAL_BATCH // parts
    return {k: v[rank * per : (rank + 1) * per] for k, v in batch.items()}


def _reference(capacity_factor: float | None = None, micro: int = RANKS, **fields) -> dict:
    """One process on the global batch as `micro` micro batches (gradient accumulation): the data-parallel ranks'
    rows (2), or a pipeline's micro batches (4: the router loss is a pipeline micro batch's); `grads`: the
    gradients AdamW steps on at step 1 (clipped); `fields`: the model's config over `_config`'s."""
    from ernie_zoo.training.backends import engine_for_recipe
    from ernie_zoo.training.expert_engine import apply_capacity

    model = _model(**fields)
    capacity = apply_capacity(model, capacity_factor) if capacity_factor is not None else []
    engine = engine_for_recipe(_recipe(GLOBAL_BATCH // micro, micro), model, torch.device("cpu"))
    losses, norms, lrs, grads, dropped = [], [], [], {}, []
    for step in range(STEPS):
        total = 0.0
        for part in range(micro):
            loss, _, _ = engine.forward(_rows(_batch(step), part, micro))
            engine.backward(loss / micro)
            total += loss.item() / micro
        if step == 0:
            grads = {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.grad is not None}
        norms.append(engine.step())
        if step == 0:
            grads = {n: g * min(1.0, CLIP / (norms[0] + 1e-6)) for n, g in grads.items()}
        engine.zero_grad()
        losses.append(total)
        lrs.append(engine.lr)
        dropped.append(sum(c.dropped for c in capacity))
        for c in capacity:
            c.dropped = 0
    params = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    plain = _model(**fields)  # no token dropping, as from_pretrained builds it
    plain.load_state_dict(params)
    plain.eval()
    with torch.no_grad():
        logits = plain(input_ids=_batch(0)["input_ids"], position_ids=_batch(0)["position_ids"]).logits
    return {"losses": losses, "norms": norms, "lrs": lrs, "grads": grads, "params": params, "logits": logits,
            "dropped": dropped}  # fmt: skip


@pytest.fixture(scope="module")
def reference() -> dict:
    return _reference()


@pytest.mark.distributed
@pytest.mark.slow
def test_ep2_matches_one_process(tmp_path, reference):
    """EP 2 on 2 ranks, AdamW's state whole on each rank (of its experts and every dense parameter)."""
    results = _check_layout(tmp_path, reference, "ep2")
    for res in results:
        assert res["optimizer_dense_numel"] == res["dense_numel"]


@pytest.mark.distributed
@pytest.mark.slow
def test_ep2_zero1_matches_one_process(tmp_path, reference):
    """EP 2 x ZeRO-1 on 2 ranks, recompute full (every layer, its all-to-alls included, run again in backward): the
    dense parameters' AdamW state dealt out to the two ranks (each steps its share and broadcasts it), each rank's
    experts' state on that rank alone (ep_size = world: no expert-data-parallel peer)."""
    results = _check_layout(tmp_path, reference, "ep2-zero1")
    dense = results[0]["dense_numel"]
    assert sum(r["optimizer_dense_numel"] for r in results) == dense
    assert all(0 < r["optimizer_dense_numel"] < dense for r in results)


@pytest.mark.distributed
@pytest.mark.slow
def test_ep2_tp2_matches_one_process(tmp_path, reference):
    """EP 2 x TP 2 x ZeRO-1 on 4 ranks (transformers' layout: dense (dp 2, tp 2), experts (edp 2, ep 2), each TP
    group = an EP group, which slices the rows its two ranks share before the all-to-all): attention, the dense MLP
    and the shared experts TP-sharded (DTensor, the TP plan), the routed experts whole per rank, 2 of 4; the dense
    AdamW state dealt over the 2 data-parallel ranks of each TP coordinate, the experts' over ranks {0, 2} / {1, 3},
    which hold the same experts."""
    results = _check_layout(tmp_path, reference, "ep2-tp2")
    assert [r["ep_rank"] for r in results] == [0, 1, 0, 1]
    for res in results:
        assert res["shapes"]["model.layers.0.self_attn.q_proj.weight"] == [16, 32]  # 2 of 4 heads of 8
        assert res["shapes"]["model.layers.1.mlp.shared_experts.down_proj.weight"] == [32, 8]  # rowwise
        assert res["shapes"]["model.layers.1.mlp.gate.weight"] == [4, 32]  # the router: replicated
        assert 0 < res["optimizer_dense_numel"] < res["dense_numel"]


def _assert_zero_sharded(results: list[dict], reference: dict, dp: int, held: int, tp: int = 1) -> None:
    """ZeRO-2/3: each rank's trainable dense parameters, their AdamW moments and their reduced gradients are the
    same shards, the parameters split over the `dp` data-parallel ranks (without TP the parts add up to the whole;
    with TP each rank holds less than a dp-th), and each rank's expert gradients are those of the `held` of the 4
    experts it holds."""
    experts = {n for n in reference["grads"] if ".mlp.experts." in n}
    dense = sum(g.numel() for n, g in reference["grads"].items() if n not in experts)
    expert = sum(reference["grads"][n].numel() for n in experts)
    for r in results:
        assert r["optimizer_dense_numel"] == r["dense_numel"] == r["dense_grad_numel"] > 0
        assert r["expert_grad_numel"] == expert * held // 4
    if tp == 1:
        assert sum(r["dense_numel"] for r in results) == dense * len(results) // dp
    assert all(r["dense_numel"] < dense / dp for r in results) or tp == 1


@pytest.mark.distributed
@pytest.mark.slow
def test_ep2_zero2_matches_one_process(tmp_path, reference):
    """EP 2 x ZeRO-2 on 2 ranks (FSDP2, `reshard_after_forward=False`): the dense parameters sharded over the two
    data-parallel ranks with their gradients reduce-scattered and their AdamW state, each rank's 2 experts over
    its expert-data-parallel group (none here: ep_size = world, so they stay whole)."""
    results = _check_layout(tmp_path, reference, "ep2-zero2")
    _assert_zero_sharded(results, reference, dp=2, held=2)
    assert all(r["layout"]["zero_stage"] == 2 for r in results)


@pytest.mark.distributed
@pytest.mark.slow
def test_ep2_dp2_zero3_matches_one_process_and_resumes_at_ep4_zero1(tmp_path):
    """EP 2 x ZeRO-3 on 4 ranks (two expert groups {0, 1} {2, 3}; dense data parallel 4): the dense parameters,
    gradients and AdamW state sharded over the 4 ranks, each rank's 2 experts sharded again over its
    expert-data-parallel pair ({0, 2} / {1, 3}), so each rank holds 1 of the 4 experts; the parameters gathered
    around each layer's forward and backward. The reference: one process over the 4 ranks' rows as 4 micro
    batches. The checkpoint before the last step resumes at EP 4 x ZeRO-1 on the same ranks (and at one process,
    `_check_layout`) and ends on the reference's weights."""
    from safetensors.torch import load_file

    reference = _reference(micro=4)
    results = _check_layout(tmp_path, reference, "ep2-dp2-zero3")
    assert [r["ep_rank"] for r in results] == [0, 1, 0, 1]
    _assert_zero_sharded(results, reference, dp=4, held=1)
    for res in results:
        assert res["layout"]["zero_stage"] == 3
        other = res["elsewhere"]
        assert other["layout"]["ep_size"] == 4 and other["layout"]["zero_stage"] == 1
        assert other["norm"] == pytest.approx(reference["norms"][-1], rel=LOSS_RTOL)
        assert other["loss"] == pytest.approx(reference["losses"][-1], rel=LOSS_RTOL)
    final = load_file(str(tmp_path / "resumed-elsewhere" / "model.safetensors"))
    diff = max((final[k] - reference["params"][k]).abs().max().item() for k in final)
    print({"ep4_zero1_resumed_weight_abs": diff})
    assert diff < WEIGHT_ATOL


@pytest.mark.distributed
@pytest.mark.slow
def test_ep2_tp2_zero3_matches_one_process(tmp_path, reference):
    """EP 2 x TP 2 x ZeRO-3 on 4 ranks (dense (dp 2, tp 2), experts (edp 2, ep 2)): the TP shards of attention,
    the dense MLP and the shared experts sharded again over the 2 data-parallel ranks of their TP coordinate
    (2-D DTensors), the routed experts over the expert-data-parallel pair, 1 of 4 per rank."""
    results = _check_layout(tmp_path, reference, "ep2-tp2-zero3")
    assert [r["ep_rank"] for r in results] == [0, 1, 0, 1]
    _assert_zero_sharded(results, reference, dp=2, held=1, tp=2)
    for res in results:
        assert res["layout"]["zero_stage"] == 3 and res["layout"]["tp_size"] == 2
        assert res["shapes"]["model.layers.0.self_attn.q_proj.weight"] == [8, 32]  # 16 TP rows, halved by dp


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("layout, layers", [("pp2-ep2", ([0], [1])), ("pp2v2-ep2", ([0, 2], [1, 3]))])
def test_pp2_ep2_matches_one_process(tmp_path, layout, layers):
    """PP 2 x EP 2 on 4 ranks, 2 pipeline micro batches of a rank's 2 rows, every layer MoE. 1F1B: pipeline rank 0
    (ranks 0, 2) holds layer 0 and its experts split over ranks 0 and 2, pipeline rank 1 (ranks 1, 3) layer 1's over
    1 and 3; interleaved (4 layers, 2 stages per rank): layers 0, 2 and 1, 3, the router-loss sums crossing between
    the ranks three times. The sums travel with the activations into the last stage's loss. The reference is one
    process over the 4 pipeline micro batches (the router loss is a micro batch's, as Megatron computes it)."""
    reference = _reference(micro=4, **LAYOUTS[layout]["model"])
    results = _check_layout(tmp_path, reference, layout)
    assert [r["ep_rank"] for r in results] == [0, 0, 1, 1]
    for res, mine in zip(results, layers * 2):  # each rank holds its stages' layers only
        assert {n.split(".")[2] for n in res["shapes"] if n.startswith("model.layers.")} == set(
            map(str, mine)
        )
        for layer in mine:
            assert res["shapes"][f"model.layers.{layer}.mlp.experts.gate_up_proj"][0] == 2


@pytest.mark.distributed
@pytest.mark.slow
def test_ep2_with_token_dropping_matches_one_process(tmp_path):
    """EP 2 with distributed.moe_capacity_factor 0.5: each rank drops the (token, expert) pairs over each expert's
    capacity of its own rows before the all-to-all, as one process drops them on that micro batch; the same pairs
    are dropped (counted per step) and the training matches."""
    reference = _reference(capacity_factor=0.5)
    assert all(d > 0 for d in reference["dropped"])  # the capacity bites at every step
    results = _check_layout(tmp_path, reference, "ep2-capacity")
    assert [sum(r["dropped"][i] for r in results) for i in range(STEPS)] == reference["dropped"]


def test_capacity_drops_the_pairs_over_each_experts_capacity():
    """`ExpertCapacity` on one experts module: the first pairs in token order up to ceil(factor x tokens x top_k /
    experts) per expert are kept, the output equals the experts' own forward with the dropped pairs' weights zeroed,
    and a factor that leaves room for every pair changes nothing."""
    import math

    from ernie_zoo.training.expert_engine import ExpertCapacity

    g = torch.Generator().manual_seed(7)
    tokens, top_k, experts_n = 24, 2, 4
    x = torch.randn(tokens, 32, generator=g)
    index = torch.stack([torch.randperm(experts_n, generator=g)[:top_k] for _ in range(tokens)])
    index[:10] = torch.tensor([0, 1])  # crowd experts 0 and 1 at the front
    weights = torch.rand(tokens, top_k, generator=g)
    for factor in (0.5, 1.0, 8.0):
        module = _model().model.layers[1].mlp.experts
        plain = module.forward
        capacity = math.ceil(factor * tokens * top_k / experts_n)
        seen, keep = [0] * experts_n, torch.zeros(tokens, top_k, dtype=torch.bool)
        for t in range(tokens):  # by hand: token order, slot order
            for s in range(top_k):
                e = int(index[t, s])
                keep[t, s] = seen[e] < capacity
                seen[e] += 1
        wrapper = ExpertCapacity(module, factor, experts_n)
        got = module(x, index, weights)
        want = plain(x, index, weights * keep)
        assert torch.allclose(got, want, rtol=0, atol=1e-6)
        assert (wrapper.routed, wrapper.dropped) == (tokens * top_k, int((~keep).sum()))
        if factor == 8.0:
            assert wrapper.dropped == 0 and torch.allclose(got, plain(x, index, weights), rtol=0, atol=1e-6)
        else:
            assert wrapper.dropped > 0


def _check_layout(tmp_path: Path, reference: dict, layout: str) -> list[dict]:
    """Run the layout's worker and check it against the reference (module docstring); returns the ranks' results."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from ernie_zoo.cli import main as cli
    from ernie_zoo.parallel.distributed import run_local_ranks

    spec = LAYOUTS[layout]
    nproc = spec.get("nproc", RANKS)
    ep, zero = spec["keys"]["ep_size"], spec["keys"].get("zero_stage", 0)
    # experts per rank: EP's, split again over edp by FSDP
    held = 4 // ep // (nproc // ep if zero >= 2 else 1)
    run_local_ranks([__file__, "--worker", str(tmp_path), layout], nproc=nproc, timeout=900)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nproc)]
    grads = load_file(str(tmp_path / "grads.safetensors"))
    experts = [n for n in reference["grads"] if ".mlp.experts." in n]
    config = _config(**spec.get("model", {}))
    start = config.moe_layer_start_index
    assert sorted(experts) == sorted(
        f"model.layers.{i}.mlp.experts.{w}"
        for i in range(start, config.num_hidden_layers)
        for w in ("down_proj", "gate_up_proj")
    )
    for res in results:
        experts_stepped = {n for n in experts if n in res["shapes"]}  # some rank holding its shard steps it
        assert res["losses"] == pytest.approx(reference["losses"], rel=LOSS_RTOL)
        assert res["norms"] == pytest.approx(reference["norms"], rel=LOSS_RTOL)
        assert res["norms"][0] > CLIP  # clipping was active, on the norm that counts every expert once
        assert res["lrs"] == pytest.approx(reference["lrs"], rel=1e-12)
        assert res["resumed_max_diff"] == 0.0  # the resumed last step: bit for bit
        for name in experts:  # this rank holds experts 2 e, 2 e + 1 of 4 (e: its place in the EP group)
            if name not in res["shapes"]:
                continue  # another pipeline stage's
            full = list(reference["grads"][name].shape)
            assert res["shapes"][name] == [held, *full[1:]] and full[0] == 4
            if name in res["optimizer_shapes"]:  # (ZeRO-1 with expert-data-parallel peers: one of them)
                # Adam's moments of its experts only
                assert res["optimizer_shapes"][name] == [held, *full[1:]]
        assert experts_stepped <= set(res["optimizer_shapes"]) | {
            n for r in results if r["ep_rank"] == res["ep_rank"] for n in r["optimizer_shapes"]
        }
        shared = f"model.layers.{start}.mlp.shared_experts.gate_proj.weight"
        if shared in res["shapes"] and zero < 2:  # dense: whole, or TP's half of the rows (colwise)
            assert res["shapes"][shared] == [16 // res["tp"], 32]
    # the gradients AdamW steps on at step 1: dense all-reduced over the data-parallel ranks (mean; TP shards
    # gathered for the check), experts summed over no one (their rows of the reference)
    grad_diff = 0.0
    for key, got in grads.items():
        rank, _, name = key.partition(".")
        ep_rank = results[int(rank[4:])]["ep_rank"]
        ref = reference["grads"][name]
        want = ref[2 * ep_rank : 2 * ep_rank + 2] if name in experts else ref
        grad_diff = max(grad_diff, (got - want).abs().max().item())
        assert torch.allclose(got, want, rtol=0, atol=GRAD_ATOL), key
    assert {key.partition(".")[2] for key in grads} == set(reference["grads"])
    ref_experts = reference["grads"][experts[0]]
    assert ref_experts.abs().max() > 100 * GRAD_ATOL  # an EP average (half of it) would fail the check above
    # the checkpoint: a plain from_pretrained directory with the reference's weights and logits
    final = load_file(str(tmp_path / "final" / "model.safetensors"))
    ref = reference["params"]
    assert set(final) == set(ref) - {"lm_head.weight"} or set(final) == set(ref)
    weight_diff = max((final[k] - ref[k]).abs().max().item() for k in final)
    assert weight_diff < WEIGHT_ATOL
    initial = _model(**spec.get("model", {})).state_dict()
    assert max((ref[k] - initial[k]).abs().max().item() for k in final) > 1e-3  # training moved them
    out = tmp_path / "consolidated"
    assert cli(["consolidate", str(tmp_path / "final"), str(out), "--no_tokenizer", "true"]) == 0
    batch = _batch(0)
    logit_diff = 0.0
    for directory in (tmp_path / "final", out):
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
        assert type(model).__name__ == "Ernie4_5_MoeForCausalLM"
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        logit_diff = max(logit_diff, (logits - reference["logits"]).abs().max().item())
    assert logit_diff < 1e-4
    # resharding EP 2 -> one process: the single-device engine resumes the checkpoint written before the last step
    from ernie_zoo.training.backends import engine_for_recipe
    from ernie_zoo.training.expert_engine import apply_capacity

    model = _model(**spec.get("model", {}))
    if "moe_capacity_factor" in spec["keys"]:
        apply_capacity(model, spec["keys"]["moe_capacity_factor"])
    micro = spec.get("micro", RANKS)
    single = engine_for_recipe(_recipe(GLOBAL_BATCH // micro, micro), model, torch.device("cpu"))
    single.load(tmp_path / "before-last")
    for part in range(micro):
        loss, _, _ = single.forward(_rows(_batch(STEPS - 1), part, micro))
        single.backward(loss / micro)
    assert single.step() == pytest.approx(reference["norms"][-1], rel=LOSS_RTOL)
    resumed = single.model.state_dict()
    assert max((resumed[k] - ref[k]).abs().max().item() for k in ref) < WEIGHT_ATOL
    print({"layout": layout,
           "loss_rel": max(abs(a - b) / b for a, b in zip(results[0]["losses"], reference["losses"])),
           "norm_rel": max(abs(a - b) / b for a, b in zip(results[0]["norms"], reference["norms"])),
           "grad_abs": grad_diff, "weight_abs": weight_diff, "logit_abs": logit_diff})  # fmt: skip
    return results


def test_expert_layout_is_validated():
    from ernie_zoo.models.decoder import decoder_config
    from ernie_zoo.training.expert_engine import check_expert_layout
    from ernie_zoo.training.recipe import DistributedArgs

    with pytest.raises(ValueError, match="does not divide the model's 4 routed experts"):
        check_expert_layout(_config(), 3, 3)
    with pytest.raises(ValueError, match="does not divide the 6 launched ranks"):
        check_expert_layout(_config(), 6, 4)
    with pytest.raises(ValueError, match="needs a MoE model"):
        check_expert_layout(decoder_config(), 2, 2)
    check_expert_layout(_config(), 4, 2)  # EP 2 x DP 4 (two expert groups)
    with pytest.raises(ValueError, match="ep_size must be a multiple of tp_size"):
        check_expert_layout(_config(), 4, 2, tp_size=4)
    check_expert_layout(_config(), 4, 2, tp_size=2)  # EP 2 x TP 2: each TP group is an expert group
    for keys, match in (
        ({"backend": "deepspeed"}, "expert parallelism runs on distributed.backend pipeline"),
        ({"backend": "pipeline", "pp_size": 2, "tp_size": 2}, "EP with both PP and TP is not built"),
        ({"backend": "pipeline", "tp_size": 4}, "must be a multiple of distributed.tp_size 4"),
        (
            {"backend": "pipeline", "pp_size": 2, "zero_stage": 2},
            "ZeRO-1 of a pipeline's experts is not built",
        ),
        ({"backend": "pipeline", "zero_stage": 4}, "must be 0-3 or null"),
        (
            {"backend": "pipeline", "pp_size": 2, "zero_stage": 1},
            "ZeRO-1 of a pipeline's experts is not built",
        ),
    ):
        with pytest.raises(ValueError, match=match):
            DistributedArgs(ep_size=2, **keys).validate()
    with pytest.raises(ValueError, match="must be >= 1"):
        DistributedArgs(backend="pipeline", ep_size=0).validate()
    DistributedArgs(backend="pipeline", ep_size=2).validate()
    DistributedArgs(backend="pipeline", ep_size=2, zero_stage=1).validate()
    DistributedArgs(backend="pipeline", ep_size=2, tp_size=2, zero_stage=1).validate()
    DistributedArgs(backend="pipeline", ep_size=2, zero_stage=2).validate()  # ZeRO-2/3: FSDP2 over dp / edp
    DistributedArgs(backend="pipeline", ep_size=2, tp_size=2, zero_stage=3).validate()
    with pytest.raises(ValueError, match="except with distributed.ep_size > 1 at pp_size 1"):
        DistributedArgs(backend="pipeline", zero_stage=3).validate()  # no experts: the pipeline engine
    DistributedArgs(backend="pipeline", ep_size=2, pp_size=2).validate()


REPO = Path(__file__).resolve().parents[1]
SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"


@pytest.mark.distributed
@pytest.mark.slow
def test_ernie_pretrain_ep2_resumes_exactly_and_consolidates(tmp_path):
    """`ernie-pretrain recipes/pretrain/ernie4.5-tiny-cpu.yaml` with the MoE tiny preset, `distributed.ep_size 2` and
    `moe_capacity_factor 1.0` on 2 gloo ranks (each holds 2 of the 4 experts; eval every 2 steps through the
    all-to-all forward; the dropped pairs logged every step): a run
    SIGKILLed after step 4 and restarted logs the same losses, grad norms and eval losses as an uninterrupted
    6-step run and ends on the same weights, bit for bit; `ernie-zoo consolidate` turns its checkpoint into a
    directory plain `AutoModelForCausalLM` loads as Ernie4_5_MoeForCausalLM with those weights."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from ernie_zoo.cli import main as cli
    from ernie_zoo.parallel.distributed import run_local_ranks
    from ernie_zoo.taskflow.models import ZOO_DIR
    from ernie_zoo.training.checkpoint import read_json
    from ernie_zoo.training.logging_utils import read_metrics

    def pretrain(out: Path, env: dict | None = None) -> None:
        run_local_ranks(
            ["-m", "ernie_zoo.training.pretrain", str(REPO / "recipes/pretrain/ernie4.5-tiny-cpu.yaml"),
             "--output_dir", str(out), "--model.preset", "ernie4.5-moe-tiny", "--max_steps", "6",
             "--micro_batch_size", "2", "--checkpoint.interval", "2", "--eval.interval", "2", "--data.files",
             f"[{SENTENCES}]", "--tokenizer.path", str(ZOO_DIR / "ernie-zoo-mini-zh"), "--distributed.backend",
             "pipeline", "--distributed.ep_size", "2", "--distributed.moe_capacity_factor", "1.0",
             "--logging.interval", "1", "--logging.progress_bar", "false",
             "--logging.tensorboard", "false", "--optim.warmup_steps", "1"],
            nproc=2, timeout=900, cwd=REPO, env=env,
        )  # fmt: skip

    pretrain(tmp_path / "straight")
    with pytest.raises(RuntimeError, match="failed"):  # both ranks SIGKILL themselves after step 4
        pretrain(tmp_path / "resumed", env={"ERNIE_ZOO_TEST_KILL_AT_STEP": "4"})
    assert (tmp_path / "resumed" / "checkpoint-2").is_dir()
    pretrain(tmp_path / "resumed")
    straight = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    resumed = {(r["step"], tuple(sorted(r))): r for r in read_metrics(tmp_path / "resumed" / "metrics.jsonl")}
    assert [r["step"] for r in straight if "train/loss" in r] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in straight if "eval/loss" in r] == [2, 4, 6]
    # token dropping at capacity factor 1.0: the pairs over capacity, counted over both ranks and logged per step
    fractions = [r["train/moe_dropped_fraction"] for r in straight if "train/loss" in r]
    assert all(0 <= f < 0.5 for f in fractions) and sum(
        r["train/moe_dropped"] for r in straight if "train/loss" in r
    )
    print({"moe_dropped_fraction": fractions})
    for r in straight:
        twin = resumed[r["step"], tuple(sorted(r))]
        for key in ("train/loss", "train/grad_norm", "eval/loss"):
            if key in r:
                assert twin[key] == r[key], (r["step"], key)  # the same floats: exact resume
    ckpt = tmp_path / "straight" / "checkpoint-6"
    a = load_file(str(ckpt / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "checkpoint-6" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert a["model.layers.1.mlp.experts.gate_up_proj"].shape[0] == 4  # every expert, at its global index
    assert read_json(ckpt / "layout.json")["ep_size"] == 2
    assert (
        len(list((ckpt / "dcp").glob("*.safetensors"))) == 2
    )  # one file per rank: its experts + the rest once
    out = tmp_path / "model"
    assert cli(["consolidate", str(ckpt), str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    assert type(model).__name__ == "Ernie4_5_MoeForCausalLM"
    loaded = model.state_dict()
    assert all(torch.equal(loaded[k], a[k]) for k in a)


#: layout -> keys: its distributed keys; nproc: ranks (default 2); micro: the reference's micro batches (default
#: 2, the data-parallel ranks' rows); model: config fields over `_config`'s
LAYOUTS = {
    "ep2": {"keys": {"ep_size": 2}},
    "ep2-zero1": {"keys": {"ep_size": 2, "zero_stage": 1, "recompute": "full"}},
    "ep2-capacity": {"keys": {"ep_size": 2, "moe_capacity_factor": 0.5}},
    "ep2-tp2": {"keys": {"ep_size": 2, "tp_size": 2, "zero_stage": 1}, "nproc": 4},
    "ep2-zero2": {"keys": {"ep_size": 2, "zero_stage": 2}},
    "ep2-dp2-zero3": {
        "keys": {"ep_size": 2, "zero_stage": 3},
        "nproc": 4,
        "micro": 4,
        "resume_keys": {"ep_size": 4, "zero_stage": 1},
    },
    "ep2-tp2-zero3": {"keys": {"ep_size": 2, "tp_size": 2, "zero_stage": 3}, "nproc": 4},
    "pp2-ep2": {
        "keys": {"ep_size": 2, "pp_size": 2},
        "nproc": 4,
        "micro": 4,
        "model": {"moe_layer_start_index": 0},
    },
    "pp2v2-ep2": {
        "keys": {"ep_size": 2, "pp_size": 2, "pp_schedule": "interleaved", "pp_virtual_stages": 2},
        "nproc": 4,
        "micro": 4,
        "model": {"moe_layer_start_index": 0, "num_hidden_layers": 4},
    },
}


def _worker(out_dir: str, layout: str) -> None:
    import torch.distributed as dist
    from safetensors.torch import save_file
    from torch.distributed.tensor import DTensor, Replicate, Shard

    from ernie_zoo.training.backends import engine_for_recipe
    from ernie_zoo.training.expert_engine import ExpertParallelEngine

    torch.set_num_threads(1)
    out = Path(out_dir)
    spec = LAYOUTS[layout]
    recipe = _recipe(GLOBAL_BATCH // RANKS, 1, **spec["keys"])

    def make_engine(recipe=recipe):
        model = _model(
            meta=True, **spec.get("model", {})
        )  # as ernie-pretrain hands it to the pipeline backend
        engine = engine_for_recipe(recipe, model, torch.device("cpu"))
        assert isinstance(engine, ExpertParallelEngine) == (int(recipe.distributed.pp_size) == 1)
        return engine

    engine = make_engine()
    rank = dist.get_rank()
    captured: dict[str, torch.Tensor] = {}
    grad_numel: dict[str, int] = {}  # the elements of each gradient this rank keeps (ZeRO-2/3: its shard's)

    def capture(optimizer, args, kwargs):  # the gradients AdamW steps on (reduced, clipped), at step 1
        if captured:
            return
        for n, p in engine.model.named_parameters():
            if p.grad is None:
                continue
            g = p.grad
            grad_numel[n] = engine._local(g).numel()
            if isinstance(g, DTensor) and n not in getattr(engine, "expert_names", ()):
                # a TP / FSDP shard: the whole gradient, for the check (every rank calls it)
                g = g.full_tensor()
            elif isinstance(g, DTensor) and g.device_mesh.ndim == 2:  # FSDP over (edp, ep): the EP shard
                g = g.redistribute(g.device_mesh, [Replicate(), Shard(0)])
            captured[f"rank{rank}.{n}"] = engine._local(g).detach().clone()

    engine.optimizer.register_step_pre_hook(capture)

    dropped: list[int] = []

    def train_step(step: int) -> tuple[float, float]:
        loss, _, _ = engine.forward(_rows(_batch(step), engine.dp_rank, engine.dp_world_size))
        counts = getattr(engine, "take_routing_counts", lambda: None)()
        dropped.append(counts[1] if counts else 0)
        engine.backward(loss)
        norm = engine.step()
        (total,) = engine.dp_sum([loss.item()])
        return total / engine.dp_world_size, norm

    losses, norms, lrs = [], [], []
    for step in range(STEPS):
        if step == STEPS - 1:
            engine.save(out / "before-last")
        loss, norm = train_step(step)
        losses.append(loss)
        norms.append(norm)
        lrs.append(engine.lr)
    engine.save(out / "final")
    final = {k: v.clone() for k, v in engine.local_state().items()}
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {k: v.tolist() for k, v in captured.items()})
    if rank == 0:
        save_file(
            {k: torch.tensor(v) for part in gathered for k, v in part.items()}, str(out / "grads.safetensors")
        )
    local = engine._local
    shapes = {n: list(local(p).shape) for n, p in engine.model.named_parameters()}
    names = {id(p): n for n, p in engine.model.named_parameters()}
    experts = {n for n in names.values() if ".mlp.experts." in n}
    optimizer_shapes = {
        names[id(p)]: list(local(s["exp_avg"]).shape)
        for p, s in engine.optimizer.state.items()
        if names[id(p)] in experts
    }
    layout_record = engine.layout()
    engine = make_engine()  # resume: a fresh engine loads the checkpoint written before the last step
    engine.load(out / "before-last")
    train_step(STEPS - 1)
    again = engine.local_state()
    names = {id(p): n for n, p in engine.model.named_parameters()}
    diff = max((again[k] - final[k]).abs().max().item() for k in final if final[k].numel())
    elsewhere = {}
    if "resume_keys" in spec:  # another layout on the same ranks resumes the checkpoint before the last step
        engine = make_engine(_recipe(GLOBAL_BATCH // RANKS, 1, **spec["resume_keys"]))
        engine.load(out / "before-last")
        loss, norm = train_step(STEPS - 1)
        engine.save(out / "resumed-elsewhere")
        elsewhere = {"loss": loss, "norm": norm, "layout": engine.layout()}
        engine = make_engine()  # the numels below: this layout's
        names = {id(p): n for n, p in engine.model.named_parameters()}
        engine.load(out / "final")
    result = {
        "rank": rank,
        "ep_rank": getattr(engine, "ep_rank", 0),
        "tp": int(recipe.distributed.tp_size or 1),
        "losses": losses,
        "norms": norms,
        "lrs": lrs,
        "shapes": shapes,
        "optimizer_shapes": optimizer_shapes,
        "resumed_max_diff": diff,
        "layout": layout_record,
        "elsewhere": elsewhere,
        "dense_grad_numel": sum(v for n, v in grad_numel.items() if n not in experts),
        "expert_grad_numel": sum(v for n, v in grad_numel.items() if n in experts),
        "dropped": dropped[:STEPS],
        "dense_numel": sum(  # what trains (the router's score-correction bias is a frozen statistic); TP: shards
            local(p).numel()
            for n, p in engine.model.named_parameters()
            if p.requires_grad and n not in experts
        ),
        "optimizer_dense_numel": sum(
            local(s["exp_avg"]).numel()
            for p, s in engine.optimizer.state.items()
            if names[id(p)] not in experts
        ),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--worker":
    _worker(sys.argv[2], sys.argv[3])
