"""The planner's MoE costs: all-to-all bytes split by the EP group's peers on a node, the capacity factor in expert
compute, model FLOPs, traffic and activations, the EP size the search picks, and the published MoE rows."""

from __future__ import annotations

import dataclasses

import pytest

from ernie_zoo.parallel.planner import (
    ModelShape,
    ParallelSettings,
    all_to_all_split,
    ep_node_peers,
    expert_pair_bytes,
    make_plan,
    parse_cluster,
    search_layouts,
)
from ernie_zoo.parallel.published_runs import (
    DEEPSEEK_V3,
    MOE_ERROR_BOUND,
    MOE_RUNS,
    QWEN3_235B,
    compare_moe,
    moe_shape,
)

# a hand-built MoE decoder: 8 layers, all MoE, hidden 1024, 64 experts of width 512, top-4 (no meta-device build)
H, L, E, K, FFN_E = 1024, 8, 64, 4, 512
EXPERTS = L * E * 3 * H * FFN_E
SHAPE = ModelShape(
    n_params=200_000_000 + EXPERTS,
    n_sharded=150_000_000,
    n_replicated=50_000_000,
    layers=L,
    hidden=H,
    heads=16,
    ffn=4096,
    vocab=32000,
    name="moe-test",
    n_expert=EXPERTS,
    n_active=200_000_000 + EXPERTS * K // E,
    experts=E,
    top_k=K,
    moe_layers=L,
    expert_ffn=FFN_E,
)


def _ep_rows(plan) -> dict[str, float]:
    return {key.rsplit(", ", 1)[1]: value for key, value in plan.comm.items() if key.startswith("EP ")}


def test_ep_peers_on_a_node_by_hand():
    assert ep_node_peers(4, 8) == 4  # a node holds two whole groups
    assert ep_node_peers(64, 8) == 8  # a group spans 8 whole nodes
    assert ep_node_peers(1, 8) == 1
    # groups of 8 on nodes of 6, ranks 0-23: 6 6 6 6 6 6 2 2 | 4 4 4 4 4 4 4 4 | 2 2 6 6 6 6 6 6 -> 112 / 24
    assert ep_node_peers(8, 6) == pytest.approx(112 / 24)
    # of 64 bytes held: 1/64 stays on the GPU, 7/64 to the node's peers, 56/64 to the other nodes
    assert all_to_all_split(64.0, 64, 8) == (7.0, 56.0)
    assert all_to_all_split(64.0, 8, 8) == (56.0, 0.0)
    with pytest.raises(ValueError):
        ep_node_peers(0, 8)


def test_ep_beyond_a_node_pays_infiniband():
    cluster = parse_cluster("nodes=4,gpus_per_node=8,gpu=h100-80gb")
    base = ParallelSettings(zero_stage=1, seq_len=2048, recompute="selective")
    inside = make_plan(SHAPE, cluster, dataclasses.replace(base, ep=8))
    across = make_plan(SHAPE, cluster, dataclasses.replace(base, ep=32))
    held = 4 * 2 * 2048 * K * H  # 4 all-to-alls of s*b*k*h bf16 per MoE layer
    assert _ep_rows(inside) == pytest.approx({"within the node": L * held * 7 / 8})
    assert _ep_rows(across) == pytest.approx(
        {"within the node": L * held * 7 / 32, "between nodes": L * held * 24 / 32}
    )
    a2a = "EP all-to-all (NVLink and InfiniBand at once)"
    assert (
        across.times[a2a] > 5 * inside.times[a2a]
    )  # 24/32 of the bytes at 50 GB/s instead of 7/8 at 450 GB/s
    assert "24 of 32" not in across.render() and "8 of 32 on a GPU's node" in across.render()
    # overlapped with another micro-batch's compute, only what exceeds it is exposed
    hidden = make_plan(SHAPE, cluster, dataclasses.replace(base, ep=32, ep_overlap=True))
    exposed = next(v for k, v in hidden.times.items() if k.startswith("exposed EP"))
    assert exposed == pytest.approx(
        max(0.0, across.times[a2a] - across.times["compute (989 TFLOPS x 50% efficiency)"])
    )
    assert hidden.tokens_per_s > across.tokens_per_s


def test_the_search_keeps_ep_inside_a_node_on_a_slow_network():
    slow = parse_cluster("nodes=4,gpus_per_node=8,gpu=h100-80gb,nic_gbit_s=25")
    base = ParallelSettings(seq_len=2048, global_batch=256)
    fixed = {"tp": 1, "pp": 1, "zero_stage": 1, "recompute": "selective"}
    assert search_layouts(SHAPE, slow, base, fixed).best.settings.ep <= 8
    # with EP pinned beyond the node the same search is slower
    beyond = search_layouts(SHAPE, slow, base, {**fixed, "ep": 32}).best
    assert beyond.tokens_per_s < search_layouts(SHAPE, slow, base, fixed).best.tokens_per_s


def test_capacity_factor_pads_compute_traffic_and_memory_and_drops_below_one():
    cluster = parse_cluster("nodes=1,gpus_per_node=8,gpu=h100-80gb")
    base = ParallelSettings(ep=8, zero_stage=1, seq_len=2048, recompute="selective")
    plans = {
        f: make_plan(SHAPE, cluster, dataclasses.replace(base, moe_capacity_factor=f))
        for f in (None, 1.0, 1.5, 0.5)
    }
    traffic = {f: sum(_ep_rows(p).values()) for f, p in plans.items()}
    assert traffic[1.0] == traffic[None] and traffic[1.5] == pytest.approx(1.5 * traffic[1.0])
    assert traffic[0.5] == pytest.approx(0.5 * traffic[1.0])  # dropped pairs are not sent

    def experts_memory(plan):
        return next(v for k, v in plan.memory.items() if k.startswith("expert activations"))

    pair = 2048 * K * expert_pair_bytes(H, FFN_E)  # pairs of one micro-batch, one layer, at capacity 1
    assert experts_memory(plans[1.5]) - experts_memory(plans[1.0]) == pytest.approx(L * 0.5 * pair)
    compute = "compute (989 TFLOPS x 50% efficiency)"
    assert plans[1.5].times[compute] > plans[1.0].times[compute] > plans[0.5].times[compute]
    # padding is work the model FLOPs do not count: MFU falls; dropping removes model FLOPs as well
    assert plans[1.5].mfu < plans[1.0].mfu
    model_flops = {f: p.mfu / p.tokens_per_s for f, p in plans.items()}
    assert model_flops[0.5] / model_flops[1.0] == pytest.approx(
        (6 * (SHAPE.active - 0.5 * SHAPE.expert_active) + 12 * L * H * 2048)
        / (6 * SHAPE.active + 12 * L * H * 2048)
    )
    assert "capacity factor 0.5 (50% of the pairs dropped)" in plans[0.5].render()
    assert "50% of the (token, expert) pairs dropped" in " ".join(plans[0.5].notes)
    with pytest.raises(ValueError, match="moe_capacity_factor"):
        make_plan(SHAPE, cluster, dataclasses.replace(base, moe_capacity_factor=0))


def test_the_cli_plans_a_recipe_capacity_factor(capsys):
    from ernie_zoo.cli import main

    argv = ["plan", "--preset", "ernie4.5-moe-tiny", "--cluster", "nodes=1,gpus_per_node=4,gpu=h100-80gb"]
    assert (
        main([*argv, "--ep", "4", "--zero", "1", "--tp", "1", "--pp", "1", "--moe-capacity-factor", "1.25"])
        == 0
    )
    out = capsys.readouterr().out
    assert "capacity factor 1.25" in out and "distributed.moe_capacity_factor 1.25" in out


def test_published_moe_shapes_count_what_their_reports_say():
    deepseek, qwen = moe_shape(DEEPSEEK_V3, "ds"), moe_shape(QWEN3_235B, "qwen")
    assert deepseek.n_params == pytest.approx(671e9, rel=0.005) and deepseek.active == pytest.approx(
        37e9, rel=0.02
    )
    assert qwen.n_params == pytest.approx(235e9, rel=0.005) and qwen.active == pytest.approx(22e9, rel=0.02)


@pytest.mark.parametrize("run", MOE_RUNS, ids=lambda r: r.name)
def test_the_planner_against_a_published_moe_run(run):
    """The planner on the published model, cluster and layout: tokens per second per GPU against the published
    figure, within MOE_ERROR_BOUND where the planner models what the run did (docs/scale.md says which)."""
    row = compare_moe(run)
    st = row.plan.settings
    assert (st.tp, st.pp, st.ep, st.zero_stage, row.plan.global_batch) == (
        run.tp,
        run.pp,
        run.ep,
        run.zero_stage,
        run.global_batch,
    )
    assert row.plan.fits
    if run.within_bound:
        assert abs(row.error) <= MOE_ERROR_BOUND, (row.predicted_tokens_per_gpu_s, run.tokens_per_gpu_s)
    else:  # DeepSeek-V3: FP8, node-limited routing and FP8 activations, none of which the planner models
        assert row.error < -MOE_ERROR_BOUND


def test_docs_carry_the_moe_table():
    from pathlib import Path

    from ernie_zoo.parallel.published_runs import moe_table

    docs = (Path(__file__).resolve().parents[1] / "docs/scale.md").read_text(encoding="utf-8")
    assert moe_table() in docs, (
        "docs/scale.md's MoE table is stale: python -m ernie_zoo.parallel.published_runs"
    )
