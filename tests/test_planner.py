"""The memory / communication / MFU planner against hand-computed numbers, and the `ernie-zoo plan` CLI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ernie_zoo.parallel.planner import (
    GIB,
    ModelShape,
    ParallelSettings,
    activation_bytes_per_layer,
    largest_micro_batch,
    logits_bytes,
    make_plan,
    model_flops_per_token,
    model_state_bytes,
    parse_cluster,
    ring_bytes,
    settings_from_deepspeed,
)

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ model states
@pytest.mark.parametrize(
    "stage, expected",
    [
        # 1e9 parameters, DP 8, bytes per GPU (params, grads, optimizer) = ZeRO paper, Figure 1 with K = 12
        (0, (2e9, 2e9, 12e9)),  # 16 bytes/param, nothing partitioned: 16e9
        (1, (2e9, 2e9, 12e9 / 8)),  # optimizer over DP: 4e9 + 1.5e9 = 5.5e9
        (2, (2e9, 2e9 / 8, 12e9 / 8)),  # + gradients: 2e9 + 0.25e9 + 1.5e9 = 3.75e9
        (3, (2e9 / 8, 2e9 / 8, 12e9 / 8)),  # + parameters: 16e9 / 8 = 2e9
    ],
)
def test_zero_stages_exact_bytes(stage, expected):
    got = model_state_bytes(1e9, stage, dp=8)
    assert (got["parameters"], got["gradients"], got["optimizer"]) == expected
    assert sum(got.values()) == {0: 16e9, 1: 5.5e9, 2: 3.75e9, 3: 2e9}[stage]


def test_tp_divides_before_zero():
    # TP=2 over a model whose every parameter is split: each TP rank holds 5e8 before ZeRO.
    shape = ModelShape(
        1_000_000_000, 1_000_000_000, 0, layers=24, hidden=2048, heads=16, ffn=8192, vocab=40000
    )
    cluster = parse_cluster("nodes=2,gpus_per_node=8,gpu=h100-80gb")  # 16 GPUs: TP 2 x DP 8
    for stage, total in ((0, 8e9), (1, 2.75e9), (2, 1.875e9), (3, 1e9)):
        plan = make_plan(shape, cluster, ParallelSettings(tp=2, zero_stage=stage, micro_batch=1, seq_len=512))
        assert plan.dp == 8
        states = sum(
            v for k, v in plan.memory.items() if k.split(" ")[0] in ("parameters", "gradients", "optimizer:")
        )
        assert states == total
    # Replicated parameters are held whole by every TP rank: 9e8 split + 1e8 replicated -> 4.5e8 + 1e8 = 5.5e8;
    # ZeRO-3 over DP 8: 16 * 5.5e8 / 8 = 1.1e9 bytes.
    shape = ModelShape(
        1_000_000_000, 900_000_000, 100_000_000, layers=24, hidden=2048, heads=16, ffn=8192, vocab=40000
    )
    plan = make_plan(shape, cluster, ParallelSettings(tp=2, zero_stage=3, micro_batch=1, seq_len=512))
    states = sum(
        v for k, v in plan.memory.items() if k.split(" ")[0] in ("parameters", "gradients", "optimizer:")
    )
    assert states == pytest.approx(1.1e9, rel=1e-12)


def test_zero_bad_input():
    with pytest.raises(ValueError, match="zero_stage"):
        model_state_bytes(1e9, 4, 8)
    with pytest.raises(ValueError, match="dp must be"):
        model_state_bytes(1e9, 1, 0)


# ------------------------------------------------------------------------------------- activations
def test_activation_formulas_korthikanti_table_2():
    s, b, h, a = 512, 2, 1024, 16
    sbh = s * b * h  # 1,048,576
    # no parallelism: s*b*h*(34 + 5*a*s/h) = sbh * (34 + 40) = sbh * 74
    assert activation_bytes_per_layer(s, b, h, a) == 77_594_624 == sbh * 74
    # TP 2 without sequence parallel: sbh*(10 + 24/t + 5as/(ht)) = sbh*(10 + 12 + 20) = sbh * 42
    assert activation_bytes_per_layer(s, b, h, a, tp=2) == 44_040_192 == sbh * 42
    # TP 2 with sequence parallel: sbh/t*(34 + 5as/h) = sbh * 37
    assert activation_bytes_per_layer(s, b, h, a, tp=2, sequence_parallel=True) == 38_797_312 == sbh * 37
    # selective recompute drops the 5as/h term: sbh*(10 + 24/t) = sbh*22; with SP sbh*34/t = sbh*17
    assert activation_bytes_per_layer(s, b, h, a, tp=2, recompute="selective") == sbh * 22
    assert (
        activation_bytes_per_layer(s, b, h, a, tp=2, recompute="selective", sequence_parallel=True)
        == sbh * 17
    )
    # full recompute keeps only the layer input: 2*sbh, 2*sbh/t with SP
    assert activation_bytes_per_layer(s, b, h, a, tp=2, recompute="full") == 2 * sbh
    assert activation_bytes_per_layer(s, b, h, a, tp=2, recompute="full", sequence_parallel=True) == sbh
    # flash attention stores no s^2 scores: 34 sbh at t = 1
    assert activation_bytes_per_layer(s, b, h, a, flash_attention=True) == 34 * sbh
    # at t = 1 the TP-without-SP and TP-with-SP rows agree with the single-GPU row
    assert activation_bytes_per_layer(s, b, h, a, tp=1, sequence_parallel=True) == sbh * 74
    with pytest.raises(ValueError, match="recompute"):
        activation_bytes_per_layer(s, b, h, a, recompute="some")


def test_selective_recompute_plans_one_attention_core_rematerialised():
    """What the engines build (models.recompute): the kept bytes drop by the attention core's 5*a*s^2*b/t, which is
    alive again, for one layer at a time, during backward; nothing of the kind with flash attention."""
    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.parallel.planner import recompute_working_set

    s, b, h, a, t = 2048, 1, 4096, 32, 4
    none, selective = (activation_bytes_per_layer(s, b, h, a, t, r) for r in ("none", "selective"))
    assert recompute_working_set(s, b, a, t) == none - selective == 5 * a * s * s * b / t
    shape = ModelShape.from_config(preset_config("10b"))
    cluster = parse_cluster("nodes=4,gpus_per_node=8,gpu=h100-80gb")
    memory = {}
    for recompute, flash in (("none", False), ("selective", False), ("selective", True), ("full", False)):
        st = ParallelSettings(tp=4, zero_stage=1, micro_batch=1, seq_len=2048, recompute=recompute,
                              flash_attention=flash)  # fmt: skip
        memory[recompute, flash] = make_plan(shape, cluster, st).memory
    core = "recompute working set: 1 attention core rematerialised"
    assert memory["selective", False][core] == recompute_working_set(2048, 1, shape.heads, 4)
    assert core not in memory["selective", True] and core not in memory["none", False]
    assert "recompute working set: 1 layer rematerialised" in memory["full", False]
    total = {k: sum(v.values()) for k, v in memory.items()}
    assert total["none", False] > total["selective", False] > total["full", False]


def test_logits_flops_and_ring_volumes():
    assert logits_bytes(2048, 4, 40000) == 10 * 2048 * 4 * 40000
    # 6N + 12*L*h*s with N = 1e9, L = 24, h = 2048, s = 2048: 6e9 + 1,207,959,552
    assert model_flops_per_token(1_000_000_000, 24, 2048, 2048) == 7_207_959_552
    assert ring_bytes("all_reduce", 1000, 4) == 1500  # 2 * X * (n-1)/n
    assert ring_bytes("all_gather", 1000, 4) == 750
    assert ring_bytes("reduce_scatter", 1000, 4) == 750
    assert ring_bytes("all_reduce", 1000, 1) == 0


# ---------------------------------------------------------------------------------------- the plan
def test_plan_comm_volumes_and_mfu_identity():
    shape = ModelShape(
        1_000_000_000, 1_000_000_000, 0, layers=24, hidden=2048, heads=16, ffn=8192, vocab=40000
    )
    cluster = parse_cluster("nodes=1,gpus_per_node=8,gpu=a100-80gb")
    st = ParallelSettings(tp=1, zero_stage=3, micro_batch=1, seq_len=2048, global_batch=16, recompute="none")
    plan = make_plan(shape, cluster, st)
    assert plan.grad_accum == 2  # 16 sequences / (1 x DP 8)
    # ZeRO-3 per micro-batch: 2 all-gathers + 1 reduce-scatter of the 2e9 bf16 bytes over 8 ranks
    zero = next(v for k, v in plan.comm.items() if k.startswith("ZeRO-3"))
    assert zero == pytest.approx(2 * 3 * 2e9 * 7 / 8)
    tp = next(v for k, v in plan.comm.items() if k.startswith("TP"))
    assert tp == 0  # TP 1 sends nothing
    # TP 1, no recompute, nothing replicated: the GPU does exactly the model FLOPs, so when communication
    # hides under compute the MFU equals the assumed efficiency.
    assert plan.times["exposed ZeRO/DP communication"] == 0
    assert plan.mfu == pytest.approx(st.efficiency, rel=1e-12)
    tokens = 16 * 2048
    assert plan.tokens_per_s * plan.times["step"] == pytest.approx(tokens)
    # TP 2 with full recompute: 6 all-reduces of s*b*h bf16 per layer per micro-batch over 2 ranks
    plan2 = make_plan(shape, cluster, ParallelSettings(tp=2, zero_stage=1, micro_batch=1, seq_len=2048))
    tp2 = next(v for k, v in plan2.comm.items() if k.startswith("TP"))
    assert tp2 == 24 * 6 * 2 * (2 * 2048 * 2048) * 1 / 2
    zero1 = next(v for k, v in plan2.comm.items() if k.startswith("ZeRO-1"))
    assert zero1 == pytest.approx(2 * 1e9 * 3 / 4)  # all-reduce of 5e8 params in bf16 (1e9 bytes) over DP 4


def test_plan_rejects_impossible_layouts():
    shape = ModelShape(10**9, 10**9, 0, layers=24, hidden=2048, heads=16, ffn=8192, vocab=40000)
    cluster = parse_cluster("nodes=1,gpus_per_node=8,gpu=h100")
    with pytest.raises(ValueError, match="does not divide the 8 GPUs"):
        make_plan(shape, cluster, ParallelSettings(tp=3))
    with pytest.raises(ValueError, match="num_attention_heads=16"):
        make_plan(shape, parse_cluster("nodes=4,gpus_per_node=8"), ParallelSettings(tp=32))
    with pytest.raises(ValueError, match="global batch 12 must be a positive multiple"):
        make_plan(shape, cluster, ParallelSettings(global_batch=12))
    with pytest.raises(ValueError, match="recompute"):
        make_plan(shape, cluster, ParallelSettings(recompute="all"))
    for text, match in (
        ("nodes=2,gpu=tpu", "unknown gpu"),
        ("nodes=two", "cluster field nodes must be an integer, got 'two'"),
        ("nodes", "not KEY=VALUE"),
        ("racks=2", "unknown cluster field"),
        ("nodes=0", "cluster field nodes must be an integer from 1 to"),
    ):
        with pytest.raises(ValueError, match=match):
            parse_cluster(text)


@pytest.mark.parametrize(
    "item, message",
    [
        ("nodes=1000000000", "cluster field nodes must be an integer from 1 to 100,000, got 1000000000"),
        ("gpus_per_node=100000", "cluster field gpus_per_node must be an integer from 1 to 1,024"),
        ("nic_gbit_s=inf", "cluster field nic_gbit_s must be a finite number > 0 and <= 100,000, got inf"),
        ("memory_gib=-5", "cluster field memory_gib must be a finite number > 0 and <= 4,096, got -5.0"),
        ("memory_gib=nan", "cluster field memory_gib must be a finite number > 0 and <= 4,096, got nan"),
        ("memory_gib=0", "cluster field memory_gib must be a finite number > 0"),
        ("peak_tflops=-1", "cluster field peak_tflops must be a finite number > 0"),
        ("nvlink_gbyte_s=1e300", "cluster field nvlink_gbyte_s must be a finite number > 0"),
        ("pcie_gbyte_s=fast", "cluster field pcie_gbyte_s must be a number, got 'fast'"),
    ],
)
def test_every_cluster_field_is_checked_and_named(item, message, capsys):
    """nodes=1000000000 and nic_gbit_s=inf were planned; memory_gib=-5 / nan ended in "needs 5.5 GiB > -5.0 GiB
    ... add nodes", naming no field. Now each is refused before planning, naming the field (exit status 2)."""
    from ernie_zoo.cli import main

    with pytest.raises(ValueError, match=re.escape(message)):
        parse_cluster(f"nodes=1,gpus_per_node=8,{item}")
    rc = main(["plan", "--recipe", str(REPO / "recipes/pretrain/mini.yaml"), "--cluster", item])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "add nodes" not in err


def test_mfu_never_exceeds_the_assumed_efficiency():
    """mini (an MLM whose head runs at the 15% masked positions, 58% of its parameters embeddings) planned "MFU
    100.4%" on one H100 node: model FLOPs counted 6 x all parameters, the hardware FLOPs only the matmuls that run.
    Both now count the same matmuls, so the MFU of a layout whose communication hides is the efficiency, never more."""
    from ernie_zoo.models.presets import preset_config

    shape = ModelShape.from_config(preset_config("mini"), "mini")
    layers, head = shape.layer_sharded + shape.layer_replicated, shape.last_sharded + shape.last_replicated
    # the layers and the (tied) output head at the positions it runs on; the embedding lookups are no matmuls
    assert shape.matmul_params(0.15) == pytest.approx(layers + 0.15 * head)
    assert shape.matmul_params(0.15) < shape.n_params / 2 and shape.matmul_params(1.0) < shape.n_params
    cluster = parse_cluster("nodes=1,gpus_per_node=8,gpu=h100-80gb")
    for tp, recompute, head in (
        (1, "none", 0.15),
        (2, "full", 0.15),
        (1, "selective", 1.0),
        (4, "none", 1.0),
    ):
        st = ParallelSettings(tp=tp, zero_stage=1, micro_batch=32, seq_len=128, global_batch=2048,
                              recompute=recompute, head_fraction=head)  # fmt: skip
        plan = make_plan(shape, cluster, st)
        assert 0 < plan.mfu <= st.efficiency * (1 + 1e-9), (tp, recompute, head, plan.mfu)
    plan = make_plan(shape, cluster, ParallelSettings(tp=1, zero_stage=2, micro_batch=32, seq_len=128,
                                                      global_batch=2048, recompute="none", head_fraction=0.15))  # fmt: skip
    assert plan.mfu == pytest.approx(st.efficiency, rel=1e-9)  # TP 1, nothing exposed: exactly the efficiency
    # a MoE decoder: the active experts, not all of them
    moe = ModelShape.from_config(preset_config("ernie4.5-21b-a3b"), "ernie4.5-21b-a3b")
    assert moe.matmul_params() <= moe.active < moe.n_params


def test_the_mini_recipe_plans_at_most_the_efficiency(capsys):
    from ernie_zoo.cli import main

    rc = main(["plan", "--recipe", str(REPO / "recipes/pretrain/mini.yaml"), "--cluster",
               "nodes=1,gpus_per_node=8,gpu=h100-80gb"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    mfus = [float(m) for m in re.findall(r"MFU (\d+\.\d)%", out)]
    assert mfus and max(mfus) <= 50.0, mfus  # was 100.4%


def test_parameter_counts_come_from_the_meta_device():
    from ernie_zoo.models.presets import count_parameters, preset_config

    for name in ("1b", "100b"):
        cfg = preset_config(name)
        shape = ModelShape.from_config(cfg, name)
        assert shape.n_params == count_parameters(cfg)
        h, f, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
        assert shape.n_sharded == layers * (4 * h * h + 3 * h + 2 * h * f + f)
    assert ModelShape.from_config(preset_config("100b")).n_params == 101_216_818_240


def test_100b_on_64_nodes_fits_and_one_node_does_not():
    from ernie_zoo.models.presets import preset_config

    shape = ModelShape.from_config(preset_config("100b"), "100b")
    big = parse_cluster("nodes=64,gpus_per_node=8,gpu=h100-80gb")
    st = ParallelSettings(tp=8, zero_stage=3, micro_batch=1, seq_len=2048, recompute="full")
    plan = make_plan(shape, big, st)
    assert plan.fits and plan.dp == 64
    assert plan.verdict().startswith("FITS:")
    # one node, ZeRO-3 over DP 1 (TP 8): 16 bytes x (1.0067e11 / 8 + 5.48e8) = 210 GB of model states alone
    small = make_plan(shape, parse_cluster("nodes=1,gpus_per_node=8,gpu=h100-80gb"), st)
    assert not small.fits
    need = small.total_bytes / GIB
    assert need > 16 * (shape.n_sharded / 8 + shape.n_replicated) / GIB
    assert small.verdict() == f"DOES NOT FIT: needs {need:.1f} GiB > {81559 / 1024:.1f} GiB per GPU"
    best = largest_micro_batch(shape, big, st)
    assert best >= 1
    assert make_plan(shape, big, ParallelSettings(tp=8, micro_batch=best)).fits
    assert not make_plan(shape, big, ParallelSettings(tp=8, micro_batch=2 * best)).fits


def test_deepspeed_json_feeds_the_planner():
    ds = json.loads((REPO / "recipes/deepspeed/zero3-100b.json").read_text())
    got = settings_from_deepspeed(ds)
    assert got["zero_stage"] == 3 and got["tp"] == 8
    assert got["reduce_bucket_size"] == 10240 * 10240  # h^2 for the 100b preset
    assert settings_from_deepspeed(ds, tp=4)["tp"] == 4  # explicit values win


# ------------------------------------------------------------------------------------------- the CLI
def _plan_cli(capsys, *argv):
    from ernie_zoo.cli import main

    rc = main(["plan", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_fits_and_prints_every_section(capsys):
    rc, out, _ = _plan_cli(
        capsys,
        "--preset", "100b",
        "--cluster", "nodes=64,gpus_per_node=8,gpu=h100-80gb",
        "--tp", "8", "--zero", "3", "--micro-batch", "4", "--seq-len", "2048", "--recompute", "full",
    )  # fmt: skip
    assert rc == 0
    assert "101,216,818,240 parameters" in out
    assert "TP 8 x DP 64, ZeRO-3" in out
    for section in (
        "per-GPU memory",
        "communication per GPU per step",
        "time per step",
        "MFU",
        "assumptions",
    ):
        assert section in out
    assert "FITS:" in out


def test_cli_does_not_fit(capsys):
    rc, out, _ = _plan_cli(
        capsys,
        "--preset",
        "10b",
        "--cluster",
        "nodes=1,gpus_per_node=8,gpu=a100-40gb",
        "--zero",
        "0",
        "--search",
        "false",
    )
    assert rc == 1
    assert "DOES NOT FIT: needs" in out and "> 40.0 GiB per GPU" in out


def test_cli_json_deepspeed_and_errors(capsys):
    rc, out, _ = _plan_cli(
        capsys,
        "--preset", "100b", "--cluster", "nodes=64,gpus_per_node=8,gpu=h100-80gb",
        "--deepspeed", str(REPO / "recipes/deepspeed/zero3-100b.json"), "--json", "--search", "false",
    )  # fmt: skip
    data = json.loads(out)
    assert rc == 0 and data["fits"] is True
    assert data["settings"]["tp"] == 8 and data["settings"]["zero_stage"] == 3
    assert data["total_bytes"] == pytest.approx(sum(data["memory_bytes"].values()))
    rc, _, err = _plan_cli(capsys, "--preset", "100b", "--tp", "3")
    assert rc == 2 and "tp=3 does not divide the 8 GPUs" in err
    rc, _, err = _plan_cli(capsys, "--preset", "nope")
    assert rc == 2 and "unknown preset" in err
    rc, _, err = _plan_cli(capsys, "--preset", "1b", "--micro-batch", "many")
    assert rc == 2 and '"micro_batch"' in err and "many" in err


def test_cli_auto_micro_batch(capsys):
    rc, out, err = _plan_cli(
        capsys,
        "--preset",
        "1b",
        "--cluster",
        "nodes=1,gpus_per_node=8,gpu=h100",
        "--micro-batch",
        "auto",
        "--search",
        "false",
    )
    assert rc == 0
    best = int(err.split(":")[-1])
    assert f"batch: micro {best} x seq 2048" in out


def test_cli_reads_the_100b_recipe(capsys):
    rc, out, err = _plan_cli(
        capsys,
        "--recipe", str(REPO / "recipes/pretrain/ernie-100b.yaml"),
        "--cluster", "nodes=64,gpus_per_node=8,gpu=h100-80gb", "--search", "false",
    )  # fmt: skip
    assert rc == 0, err
    assert "101,216,818,240 parameters" in out
    assert (
        "TP 8 x DP 64, ZeRO-3; recompute full" in out
    )  # tp_size + recompute from the recipe, ZeRO from its json
    assert "micro 8 x seq 2048, grad accumulation 4 -> 2048 sequences" in out
    assert "15% of positions" in out  # the loop computes logits only at the masked positions
    assert "FITS:" in out
    # the same recipe on 8 nodes: ZeRO-3 over DP 8 holds 8x the model states, and still fits
    rc, out, _ = _plan_cli(
        capsys,
        "--recipe",
        str(REPO / "recipes/pretrain/ernie-100b.yaml"),
        "--cluster",
        "nodes=8,gpus_per_node=8",
        "--search",
        "false",
    )
    assert "TP 8 x DP 8" in out and "micro 8 x seq 2048, grad accumulation 4 -> 256 sequences" in out


def test_100b_recipe_loads_with_the_recipe_schema():
    from ernie_zoo.recipe_cli import load_recipe
    from ernie_zoo.training.recipe import PretrainRecipe

    recipe = load_recipe(
        REPO / "recipes/pretrain/ernie-100b.yaml", cls=PretrainRecipe
    )  # every key and value checked
    assert recipe.model.preset == "100b" and recipe.precision == "bf16" and recipe.data.max_seq_len == 2048
    d = recipe.distributed
    assert (d.backend, d.tp_size, d.recompute) == ("deepspeed", 8, "full")
    assert (REPO / d.deepspeed_config).is_file()


def test_cli_finds_the_recipes_deepspeed_json_next_to_the_recipe(tmp_path, monkeypatch, capsys):
    """A recipe outside the repo names its DeepSpeed json repo-relative (recipes/deepspeed/...): it is found from
    the recipe's directory up, not from the current directory; a copy with ZeRO-2 proves which file was read."""
    copy = tmp_path / "mine"
    (copy / "recipes" / "pretrain").mkdir(parents=True)
    (copy / "recipes" / "deepspeed").mkdir()
    shutil.copy(REPO / "recipes/pretrain/ernie-100b.yaml", copy / "recipes/pretrain/ernie-100b.yaml")
    ds = json.loads((REPO / "recipes/deepspeed/zero3-100b.json").read_text(encoding="utf-8"))
    ds["zero_optimization"]["stage"] = 2
    (copy / "recipes/deepspeed/zero3-100b.json").write_text(json.dumps(ds), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    recipe = copy / "recipes/pretrain/ernie-100b.yaml"
    rc, out, err = _plan_cli(
        capsys, "--recipe", str(recipe), "--cluster", "nodes=64,gpus_per_node=8", "--search", "false"
    )
    assert rc in (0, 1), err
    assert "TP 8 x DP 64, ZeRO-2" in out
    # from the repo root the shipped recipe still finds the shipped json (ZeRO-3)
    monkeypatch.chdir(REPO)
    rc, out, err = _plan_cli(
        capsys, "--recipe", "recipes/pretrain/ernie-100b.yaml", "--cluster", "nodes=64", "--search", "false"
    )
    assert rc == 0 and "ZeRO-3" in out, err
    # a json found nowhere: the error says where it looked
    (copy / "recipes/deepspeed/zero3-100b.json").unlink()
    monkeypatch.chdir(elsewhere)
    rc, _, err = _plan_cli(capsys, "--recipe", str(recipe))
    assert rc == 2
    assert "'recipes/deepspeed/zero3-100b.json' is not in the recipe's directory" in err


# ------------------------------------------------------------------------------------ ERNIE 4.5 decoders
def test_moe_decoder_shape_total_active_and_expert_memory():
    """A MoE preset's shape carries exact total, active and routed-expert counts; EP splits the experts' memory
    and ZeRO shards it over the world/ep ranks holding the same experts."""
    from ernie_zoo.models.presets import parameter_counts, preset_config

    cfg = preset_config("ernie4.5-300b-a47b")
    counts = parameter_counts(cfg)
    shape = ModelShape.from_config(cfg, name="300b")
    assert (shape.n_params, shape.active, shape.n_expert) == (
        counts["total"],
        counts["active"],
        counts["experts"],
    )
    assert shape.n_sharded + shape.n_replicated + shape.n_expert == shape.n_params
    assert (shape.experts, shape.top_k, shape.moe_layers, shape.kv_heads, shape.attn_width) == (
        64,
        8,
        51,
        8,
        8192,
    )
    cluster = parse_cluster("nodes=32,gpus_per_node=8,gpu=h100-80gb")  # 256 GPUs
    plan = make_plan(shape, cluster, ParallelSettings(tp=8, ep=64, zero_stage=3, seq_len=4096))
    expert = {k.split(" ")[2]: v for k, v in plan.memory.items() if k.startswith("routed experts")}
    per_gpu = counts["experts"] / 64 / (256 // 64)  # EP 64, ZeRO-3 over the 4 ranks with the same experts
    assert expert == {"parameters": 2 * per_gpu, "gradients": 2 * per_gpu, "optimizer": 12 * per_gpu}
    # all-to-all: 6 per MoE layer (full recompute) of (s*b/t)*k*h bf16 values, 63/64 leaving the GPU: the EP group
    # spans 8 nodes of 8, so 7/64 go to the GPU's node (NVLink) and 56/64 to the other 7 nodes (InfiniBand)
    a2a = {k.rsplit(", ", 1)[1]: v for k, v in plan.comm.items() if k.startswith("EP 64:")}
    held = 51 * 6 * 2 * 4096 / 8 * 8 * 8192
    assert a2a == pytest.approx({"within the node": held * 7 / 64, "between nodes": held * 56 / 64}, rel=1e-12)
    # model FLOPs use the active matmul parameters (the untied input embedding is a lookup):
    # 6 (N_active - V h) + 12 L (heads x head_dim) s
    assert not cfg.tie_word_embeddings
    embedding = cfg.vocab_size * cfg.hidden_size
    assert plan.mfu * cluster.world_size * cluster.gpu.peak_tflops * 1e12 == pytest.approx(
        plan.tokens_per_s * (6 * (counts["active"] - embedding) + 12 * 54 * 8192 * 4096)
    )
    assert f"{counts['active']:,} active parameters per token of {counts['total']:,}" in plan.render()
    with pytest.raises(ValueError, match="must divide the 64 experts"):
        make_plan(shape, cluster, ParallelSettings(tp=8, ep=3))


def test_dense_decoder_plan_checks_kv_heads_and_refuses_ep():
    from ernie_zoo.models.presets import count_parameters, preset_config

    cfg = preset_config("ernie4.5-0.3b")
    shape = ModelShape.from_config(cfg)
    assert shape.n_params == shape.active == count_parameters(cfg) and shape.n_expert == 0
    cluster = parse_cluster("nodes=1,gpus_per_node=8")
    assert make_plan(shape, cluster, ParallelSettings(tp=2)).fits
    with pytest.raises(ValueError, match="num_key_value_heads=2"):  # 2 KV heads cannot split over TP 4
        make_plan(shape, cluster, ParallelSettings(tp=4))
    with pytest.raises(ValueError, match="needs a mixture-of-experts model"):
        make_plan(shape, cluster, ParallelSettings(ep=2))


def test_cli_plans_a_moe_preset(capsys):
    from ernie_zoo.commands.plan import Args, run

    args = Args(preset="ernie4.5-21b-a3b", cluster="nodes=1,gpus_per_node=8", ep=8, seq_len=4096)
    assert run(args, []) == 0
    out = capsys.readouterr().out
    assert "MoE: 64 routed experts, top-6, in 27 layers" in out and "EP all-to-all" in out
    assert "routed experts: optimizer (8/64 per layer)" in out
