"""The planner's pipeline model (bubble, per-stage memory, point-to-point traffic), its layout search, `ernie-zoo plan`
searching and pinning, and the model against published runs (Megatron-LM 2021 Table 1, BLOOM-176B)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ernie_zoo.parallel.planner import (
    GIB,
    ModelShape,
    ParallelSettings,
    activation_bytes_per_layer,
    layout_text,
    make_plan,
    parse_cluster,
    pipeline_bubble,
    search_layouts,
)

REPO = Path(__file__).resolve().parents[1]
RECIPE = str(REPO / "recipes/pretrain/ernie-100b.yaml")
CLUSTER = "nodes=64,gpus_per_node=8,gpu=h100-80gb"


def _shape(**kw):
    """A hand-built 1B-parameter encoder-like shape: every parameter in the 24 layers, none TP-replicated."""
    return ModelShape(10**9, 10**9, 0, layers=24, hidden=2048, heads=16, ffn=8192, vocab=40000, **kw)


def _plan_cli(capsys, *argv):
    from ernie_zoo.cli import main

    rc = main(["plan", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------------------------- the pipeline model
def test_bubble_formula_narayanan_2021():
    # 1F1B: (p-1)/(m+p-1) of the pipeline time; interleaved over v chunks: (p-1)/(v*m+p-1)
    assert pipeline_bubble(1, 8) == 0
    assert pipeline_bubble(4, 8) == pytest.approx(3 / 11)
    assert pipeline_bubble(8, 128, 2) == pytest.approx(7 / 263)
    # the paper's "bubble time fraction" (p-1)/m is bubble / ideal time: the same thing
    b = pipeline_bubble(8, 32)
    assert b / (1 - b) == pytest.approx(7 / 32)
    with pytest.raises(ValueError, match="must be >= 1"):
        pipeline_bubble(0, 4)
    # zero bubble (Qi et al. 2024): a third of 1F1B's bubble time at T_F = T_B = T_W, (p-1)/(3m) of the work
    zb = pipeline_bubble(4, 8, 1, "zero_bubble")
    assert zb == pytest.approx(3 / 27) and zb / (1 - zb) == pytest.approx(3 / (3 * 8))
    assert pipeline_bubble(4, 8, 2, "zero_bubble") == pytest.approx(3 / 51)
    assert pipeline_bubble(4, 8, 2, "zbv") == pytest.approx(3 / 51)  # the V's warm-up: (p-1)/(6m+p-1)
    with pytest.raises(ValueError, match="zbv runs 2 chunks"):
        pipeline_bubble(4, 8, 1, "zbv")


def test_zero_bubble_schedules_plan_their_own_bubble():
    """The same layout under 1F1B, zero bubble and ZB-V: the bubble's slots shrink from p-1 to (p-1)/3 and
    (p-1)/6, activations in flight stay 1F1B's (ZB-V's too, although it runs 2 chunks); the schedule's rules."""
    shape, cluster = _shape(), parse_cluster("nodes=1,gpus_per_node=8,gpu=h100")
    plans = {
        (q, v): make_plan(shape, cluster, ParallelSettings(pp=4, virtual_stages=v, schedule=q, zero_stage=1,
                                                          global_batch=16, recompute="none"))  # fmt: skip
        for q, v in (("1f1b", 1), ("zero_bubble", 1), ("zbv", 2), ("1f1b", 2))
    }
    m = plans["1f1b", 1].grad_accum
    key = next(k for k in plans["1f1b", 1].times if k.startswith("compute"))
    per_slot = plans["1f1b", 1].times[key] / (m + 3)
    for (q, v), slots in {("1f1b", 1): 3, ("zero_bubble", 1): 1, ("zbv", 2): 0.5}.items():
        plan = plans[q, v]
        assert plan.bubble == pytest.approx(pipeline_bubble(4, m, v, q))
        assert plan.times[key] == pytest.approx(per_slot * (m + slots), rel=1e-9)
    in_flight = {k: p.stage_memory["first"] for k, p in plans.items()}
    assert in_flight["1f1b", 1] == in_flight["zero_bubble", 1] == in_flight["zbv", 2] < in_flight["1f1b", 2]
    assert "PP 4 (ZB-V) x" in layout_text(plans["zbv", 2])
    assert "PP 4 (zero bubble) x" in layout_text(plans["zero_bubble", 1])
    for bad, message in (
        (dict(schedule="zbv", virtual_stages=1), "zbv runs 2 chunks per GPU"),
        (dict(schedule="zero_bubble", pp=1), "needs pp > 1"),
        (dict(schedule="gpipe"), "schedule must be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            make_plan(shape, cluster, ParallelSettings(**{"pp": 4, "zero_stage": 1, **bad}))
    with pytest.raises(ValueError, match="zbv fills its bubble with >= 2pp-1 = 7"):
        make_plan(shape, cluster, ParallelSettings(pp=4, virtual_stages=2, schedule="zbv", zero_stage=1,
                                                   global_batch=8))  # fmt: skip


def test_pipeline_time_is_m_plus_p_minus_1_slots_of_a_stage():
    """One node (links fast), TP 1, no head: PP p runs each micro-batch through 1/p of the layers, in m + (p-1)/v
    slots; so its compute time is (m + (p-1)/v) / (m p) of the single-stage one."""
    shape, cluster = _shape(), parse_cluster("nodes=1,gpus_per_node=8,gpu=h100")
    flat = make_plan(shape, cluster, ParallelSettings(zero_stage=1, global_batch=64, recompute="none"))
    key = next(k for k in flat.times if k.startswith("compute"))
    m = flat.grad_accum  # 64 / (1 x DP 8) = 8
    for p, v in ((4, 1), (4, 2), (8, 3)):
        piped = make_plan(
            shape,
            cluster,
            ParallelSettings(
                pp=p, virtual_stages=v, zero_stage=1, global_batch=64 // p * p, recompute="none"
            ),
        )
        mp = piped.grad_accum  # DP shrinks to 8/p, so m grows by p
        assert mp == m * p
        assert piped.bubble == pytest.approx((p - 1) / (v * mp + p - 1))
        ratio = piped.times[key] / flat.times[key]
        assert ratio == pytest.approx((mp + (p - 1) / v) / mp, rel=1e-9)
        bubble_key = next(k for k in piped.times if "pipeline bubble" in k)
        slots = piped.times[key] + piped.times["PP point-to-point (not overlapped)"]
        assert piped.times[bubble_key] == pytest.approx(slots * piped.bubble)


def test_first_stage_holds_p_micro_batches_and_the_embeddings():
    from ernie_zoo.models.presets import preset_config

    shape = ModelShape.from_config(preset_config("10b"), "10b")
    assert (
        shape.first_replicated > 0 and shape.last_replicated > shape.first_replicated
    )  # MLM head on the last
    cluster = parse_cluster("nodes=4,gpus_per_node=8,gpu=a100-80gb")
    st = ParallelSettings(
        tp=2, pp=4, zero_stage=1, micro_batch=1, global_batch=64, recompute="none", seq_len=512
    )
    plan = make_plan(shape, cluster, st)
    per_layer = activation_bytes_per_layer(512, 1, shape.hidden, shape.heads, 2, "none")
    layers = math.ceil(shape.layers / 4)
    acts = next(v for k, v in plan.memory.items() if k.startswith("activations"))
    heavy = max(plan.stage_memory, key=plan.stage_memory.__getitem__)
    # the first stage: 4 micro-batches in flight (m = 64 / 4 DP = 16 >= p); the last: 1 + the logits
    first_acts = layers * per_layer * 4
    assert heavy == "first" and acts == pytest.approx(first_acts)
    assert plan.stage_memory["first"] - plan.stage_memory["last"] > 0
    # interleaved over 2 chunks: x (1 + (p-1)/(p*v)) (Korthikanti et al. 2022)
    inter = make_plan(shape, cluster, ParallelSettings(**{**st.__dict__, "virtual_stages": 2}))
    acts2 = next(v for k, v in inter.memory.items() if k.startswith("activations"))
    assert acts2 == pytest.approx(first_acts * (1 + 3 / 8))
    # point-to-point: 2 sends of s*b*h/t bf16 per micro-batch (x v chunks)
    p2p = next(v for k, v in plan.comm.items() if k.startswith("PP:"))
    assert p2p == 16 * 2 * 2 * 512 * shape.hidden / 2
    p2p2 = next(v for k, v in inter.comm.items() if k.startswith("PP:"))
    assert p2p2 == 2 * p2p


def test_pipeline_refuses_impossible_layouts():
    shape, cluster = _shape(), parse_cluster("nodes=1,gpus_per_node=8")
    with pytest.raises(ValueError, match="ZeRO stage 0-1, got zero_stage=3"):
        make_plan(shape, cluster, ParallelSettings(pp=2, zero_stage=3))
    with pytest.raises(ValueError, match="needs pp > 1"):
        make_plan(shape, cluster, ParallelSettings(virtual_stages=2))
    with pytest.raises(ValueError, match="tp x pp = 4 x 4 does not divide the 8 GPUs"):
        make_plan(shape, cluster, ParallelSettings(tp=4, pp=4, zero_stage=1))
    with pytest.raises(ValueError, match="exceeds the 24 layers"):
        make_plan(
            shape,
            parse_cluster("nodes=4,gpus_per_node=8"),
            ParallelSettings(pp=16, virtual_stages=2, zero_stage=1),
        )
    with pytest.raises(ValueError, match="multiple of pp=4"):
        make_plan(shape, cluster, ParallelSettings(pp=4, virtual_stages=2, zero_stage=1, global_batch=6))


# ------------------------------------------------------------------------------------------- the search
@pytest.mark.parametrize(
    "preset, cluster",
    [("10b", "nodes=2,gpus_per_node=8,gpu=a100-40gb"), ("100b", "nodes=16,gpus_per_node=8,gpu=h100-80gb")],
)
def test_search_returns_only_layouts_that_fit_fastest_first(preset, cluster):
    from ernie_zoo.models.presets import preset_config

    shape, c = ModelShape.from_config(preset_config(preset), preset), parse_cluster(cluster)
    found = search_layouts(shape, c, ParallelSettings(global_batch=256, seq_len=2048))
    assert found.plans and found.too_big > 0  # some layouts were too big, and none of them came back
    assert all(p.fits and p.global_batch == 256 for p in found.plans)
    speeds = [p.tokens_per_s for p in found.plans]
    assert speeds == sorted(speeds, reverse=True)
    # nothing that was planned and fits beats the choice: spot-check the recipe-style layout
    best = found.best
    flat = make_plan(shape, c, ParallelSettings(tp=8, zero_stage=3, micro_batch=1, global_batch=256))
    assert best.tokens_per_s >= flat.tokens_per_s or not flat.fits
    assert {p.settings.pp for p in found.plans} != {1}  # pipelines were considered and fit


def test_pinning_fixes_dimensions_and_bad_pins_say_why():
    from ernie_zoo.models.presets import preset_config

    shape = ModelShape.from_config(preset_config("100b"), "100b")
    c = parse_cluster(CLUSTER)
    base = ParallelSettings(global_batch=2048, seq_len=2048)
    found = search_layouts(shape, c, base, {"pp": 8, "tp": 8})
    assert {(p.settings.pp, p.settings.tp) for p in found.plans} == {(8, 8)}
    assert found.best.dp == 8 and found.best.settings.zero_stage <= 1
    with pytest.raises(ValueError, match="cannot pin"):
        search_layouts(shape, c, base, {"dp": 4})
    with pytest.raises(ValueError, match="ZeRO stage 0-1, got zero_stage=3"):
        search_layouts(shape, c, base, {"pp": 8, "zero_stage": 3})


def test_an_infeasible_cluster_is_an_error_naming_why(capsys):
    from ernie_zoo.models.presets import preset_config

    shape = ModelShape.from_config(preset_config("100b"), "100b")
    with pytest.raises(ValueError) as err:
        search_layouts(shape, parse_cluster("nodes=1,gpus_per_node=8,gpu=a100-40gb"), ParallelSettings())
    text = str(err.value)
    assert "no layout of 100b fits 1 node(s) x 8 a100-40gb" in text
    assert "GiB per GPU > 40.0 GiB" in text and "largest part:" in text and "add nodes" in text
    rc, out, stderr = _plan_cli(
        capsys, "--preset", "100b", "--cluster", "nodes=1,gpus_per_node=8,gpu=a100-40gb"
    )
    assert rc == 1 and not out and "no layout of 100b fits" in stderr


def test_cli_searches_the_100b_recipe_and_says_why(capsys):
    """The acceptance command: a layout by search, with the bubble, memory per stage, traffic and runners-up."""
    rc, out, err = _plan_cli(capsys, "--recipe", RECIPE, "--cluster", CLUSTER)
    assert rc == 0, err
    assert out.startswith("layout search:") and "chosen: TP " in out
    for why in (
        "pipeline bubble",
        "memory per GPU:",
        "traffic per GPU per step:",
        "runners-up",
        "| layout |",
    ):
        assert why in out
    assert "2048 sequences = 4,194,304 tokens per step" in out  # the recipe's global batch, kept
    assert "FITS:" in out and "to run it: distributed.backend " in out
    # the printed layout is one our engines run: its distributed keys pass the recipe's validation
    from ernie_zoo.training.recipe import DistributedArgs

    line = next(x for x in out.splitlines() if x.startswith("to run it: "))
    keys = dict(
        item.split(" ", 1) for item in line[len("to run it: distributed.") :].split(";")[0].split(", ")
    )
    assert keys["backend"] == "pipeline" and int(keys["pp_size"]) > 1
    ints = {"pp_size", "tp_size", "zero_stage", "pp_microbatches", "pp_virtual_stages"}
    DistributedArgs(**{k: int(v) if k in ints else v for k, v in keys.items()}).validate()
    # --pp 8 pins the pipeline; the rest is still searched
    rc, out, err = _plan_cli(capsys, "--recipe", RECIPE, "--cluster", CLUSTER, "--pp", "8", "--json")
    data = json.loads(out)
    assert rc == 0 and data["settings"]["pp"] == 8 and data["search"]["pinned"] == {"pp": 8}
    assert data["fits"] and 0 < data["pipeline_bubble"] < 0.2
    assert set(data["stage_memory_bytes"]) == {"first", "last"}
    # everything pinned: exactly that layout
    rc, out, err = _plan_cli(
        capsys, "--recipe", RECIPE, "--cluster", CLUSTER,
        "--tp", "8", "--pp", "8", "--virtual-stages", "2", "--zero", "1", "--micro-batch", "2", "--recompute", "full",
        "--schedule", "1f1b",
    )  # fmt: skip
    assert rc == 0, err
    assert "chosen: TP 8 x PP 8 (2 chunks) x DP 8, ZeRO-1, micro 2 (m 128), recompute full" in out
    assert "pp_schedule interleaved, pp_virtual_stages 2," in out
    assert "per stage: first" in out and "PP point-to-point" in out


def test_cli_search_keeps_moe_expert_parallelism(capsys):
    rc, out, err = _plan_cli(
        capsys, "--preset", "ernie4.5-21b-a3b", "--cluster", "nodes=2,gpus_per_node=8", "--seq-len", "4096"
    )
    assert rc == 0, err
    assert "x EP planned" in out and "(EP " in out and "EP all-to-all" in out
    rc, out, err = _plan_cli(
        capsys, "--preset", "ernie4.5-21b-a3b", "--cluster", "nodes=2,gpus_per_node=8", "--ep", "8", "--json"
    )
    data = json.loads(out)
    assert rc == 0 and data["settings"]["ep"] == 8 and data["search"]["pinned"] == {"ep": 8}


# ------------------------------------------------------------------------------ against published runs
@pytest.mark.slow
def test_published_runs_within_the_stated_error_and_docs_table_current():
    from ernie_zoo.parallel.published_runs import ERROR_BOUND, MEAN_ERROR_BOUND, RUNS, compare, table

    rows = [compare(run) for run in RUNS]
    errors = {row.run.name: row.error for row in rows}
    assert all(abs(e) <= ERROR_BOUND for e in errors.values()), errors
    assert sum(abs(e) for e in errors.values()) / len(errors) <= MEAN_ERROR_BOUND, errors
    # the 1T row: the paper's layout is the one the search picks (within Megatron-LM 2021's ZeRO-0)
    trillion = rows[[r.run.name for r in rows].index("GPT 1008B")]
    assert (trillion.searched.settings.tp, trillion.searched.settings.pp) == (8, 64)
    docs = (REPO / "docs/scale.md").read_text(encoding="utf-8")
    assert table(rows) in docs, (
        "docs/scale.md's published-runs table is stale: python -m ernie_zoo.parallel.published_runs"
    )


def test_published_model_flops_conversion():
    """Megatron-LM's count, 96 B s l h^2 (1 + s/6h + V/16lh), includes the recomputed forward; the model-FLOPs share
    is 72 B s l h^2 (1 + s/6h) + 6 B s V h, and the planner's 6N + 12 l h s per token is that same count."""
    from ernie_zoo.parallel.planner import model_flops_per_token
    from ernie_zoo.parallel.published_runs import RUNS, gpt_shape, published_model_tflops

    run = RUNS[-2]  # GPT 1008B
    s, L, h, V = run.seq_len, run.layers, run.hidden, run.vocab
    assert published_model_tflops(run) == pytest.approx(163 * 0.75, rel=0.01)
    shape = gpt_shape(run)
    assert shape.n_params == pytest.approx(1008e9, rel=0.001)
    per_token = model_flops_per_token(shape.n_params, L, h, s)
    paper = (72 * s * L * h * h * (1 + s / (6 * h)) + 6 * s * V * h) / s
    assert per_token == pytest.approx(paper, rel=0.001)  # differ by the position embeddings and biases
    assert GIB == 1024**3


def test_a_moe_model_on_a_pipeline_is_said_to_be_planned_not_built(capsys):
    """What the engines build for a MoE model, said where the plan says how to run: PP x EP at ZeRO 0 and EP x TP
    at ZeRO 0-3 are runnable lines; EP with both PP and TP, and EP in a pipeline at ZeRO-1, are "planned, not
    built"."""
    from ernie_zoo.training.recipe import DistributedArgs

    for pins, keys in (
        (
            ("--pp", "2", "--tp", "1", "--zero", "0"),
            {"pp_size": 2, "tp_size": 1, "ep_size": 8, "zero_stage": 0},
        ),
        (
            ("--pp", "1", "--tp", "2", "--zero", "1"),
            {"pp_size": 1, "tp_size": 2, "ep_size": 8, "zero_stage": 1},
        ),
    ):
        rc, out, err = _plan_cli(capsys, "--preset", "ernie4.5-21b-a3b", "--cluster",
                                 "nodes=2,gpus_per_node=8,gpu=h100-80gb", *pins, "--ep", "8", "--seq-len", "4096")  # fmt: skip
        line = next(x for x in out.splitlines() if x.startswith("to run it: "))
        assert rc == 0 and "planned, not built" not in line, line
        assert all(f" {k} {v}," in line for k, v in keys.items()), line
        DistributedArgs(backend="pipeline", **keys).validate()
    rc, out, err = _plan_cli(capsys, "--preset", "ernie4.5-21b-a3b", "--cluster", "nodes=2,gpus_per_node=8,gpu=h100-80gb",
                             "--pp", "2", "--tp", "2", "--ep", "8", "--seq-len", "4096")  # fmt: skip
    assert rc == 0, err
    line = next(x for x in out.splitlines() if x.startswith("to run it: "))
    assert "distributed.backend pipeline" in line and "planned, not built: EP 8 with both PP and TP" in line
    rc, out, err = _plan_cli(capsys, "--preset", "ernie4.5-21b-a3b", "--cluster", "nodes=2,gpus_per_node=8,gpu=h100-80gb",
                             "--pp", "1", "--tp", "1", "--ep", "8", "--zero", "3", "--seq-len", "4096")  # fmt: skip
    line = next(x for x in out.splitlines() if x.startswith("to run it: "))
    # EP x DP at ZeRO-3 runs (training/expert_engine.py, FSDP2: dense over dp, experts over edp)
    assert rc == 0 and "planned, not built" not in line, line
    assert "distributed.backend pipeline, pp_size 1, tp_size 1, ep_size 8, zero_stage 3," in line
    DistributedArgs(backend="pipeline", pp_size=1, tp_size=1, ep_size=8, zero_stage=3).validate()
    rc, out, err = _plan_cli(capsys, "--preset", "ernie4.5-21b-a3b", "--cluster", "nodes=2,gpus_per_node=8,gpu=h100-80gb",
                             "--pp", "2", "--tp", "1", "--ep", "8", "--zero", "1", "--seq-len", "4096")  # fmt: skip
    line = next(x for x in out.splitlines() if x.startswith("to run it: "))
    # EP in a pipeline runs at ZeRO 0 only: said where it says how to run
    assert rc == 0 and "planned, not built: EP 8 in a pipeline at ZeRO-1" in line, line
    rc, out, err = _plan_cli(capsys, "--preset", "ernie4.5-21b-a3b", "--cluster", "nodes=2,gpus_per_node=8,gpu=h100-80gb",
                             "--pp", "1", "--tp", "1", "--ep", "8", "--zero", "1", "--seq-len", "4096")  # fmt: skip
    line = next(x for x in out.splitlines() if x.startswith("to run it: "))
    # EP x DP at ZeRO-1 runs (training/expert_engine.py): the line is the recipe's distributed keys, nothing else
    assert rc == 0 and "planned, not built" not in line, line
    assert "distributed.backend pipeline, pp_size 1, tp_size 1, ep_size 8, zero_stage 1," in line
    rc, out, err = _plan_cli(capsys, "--preset", "ernie4.5-21b-a3b", "--cluster", "nodes=2,gpus_per_node=8,gpu=h100-80gb",
                             "--pp", "1", "--tp", "1", "--ep", "1", "--seq-len", "4096")  # fmt: skip
    line = next(x for x in out.splitlines() if x.startswith("to run it: "))
    assert rc == 0 and "distributed.backend deepspeed" in line and "planned, not built" not in line
    rc, out, err = _plan_cli(capsys, "--preset", "ernie4.5-0.3b", "--cluster", "nodes=1,gpus_per_node=8,gpu=h100-80gb",
                             "--pp", "2", "--seq-len", "4096")  # fmt: skip
    line = next(x for x in out.splitlines() if x.startswith("to run it: "))
    assert (
        rc == 0 and "distributed.backend pipeline" in line and "planned, not built" not in line
    )  # dense: built
