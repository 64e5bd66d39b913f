"""`ernie-zoo plan` for fine-tuning: frozen parameters carry no gradients and no optimizer state, the trainable
fraction is counted exactly (LoRA on the 10b preset, checked by hand), and the scale recipe
recipes/finetune/scale/lora-10b-zero3.yaml loads, validates and plans (it is a template: never trained here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ernie_zoo.parallel.planner import (
    ModelShape,
    ParallelSettings,
    make_plan,
    model_flops_per_token,
    model_state_bytes,
    parse_cluster,
)

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "finetune" / "scale" / "lora-10b-zero3.yaml"
NODE = "nodes=1,gpus_per_node=8,gpu=h100-80gb"
# LoRA r 16 on the 10b preset (48 layers, hidden 4096, FFN 16384): per layer query/key/value/attention-output
# dense 4 x 16 x (4096 + 4096), FFN in and out 2 x 16 x (4096 + 16384); the pooler's dense 16 x 8192; the
# classifier (trained in full) 4096 x 2 + 2.
LORA_10B = 48 * (4 * 16 * 8192 + 2 * 16 * 20480) + 16 * 8192 + 4096 * 2 + 2


def test_model_states_of_frozen_parameters():
    full = model_state_bytes(1000, 3, 4)
    lora = model_state_bytes(1000, 3, 4, trainable_fraction=0.01)
    assert lora["parameters"] == full["parameters"] == 2 * 1000 / 4  # frozen weights are still held
    assert lora["gradients"] == pytest.approx(full["gradients"] * 0.01)
    assert lora["optimizer"] == pytest.approx(12 * 1000 * 0.01 / 4)
    assert model_flops_per_token(100, 2, 8, 16) == 6 * 100 + 12 * 2 * 8 * 16
    assert model_flops_per_token(100, 2, 8, 16, trainable_fraction=0.5) == 5 * 100 + 12 * 2 * 8 * 16
    with pytest.raises(ValueError, match="trainable_fraction"):
        ParallelSettings(trainable_fraction=0.0).validate()


def test_plan_scales_gradients_optimizer_and_their_traffic():
    from ernie_zoo.models.presets import preset_config

    model = ModelShape.from_config(preset_config("1b"), name="1b")
    cluster = parse_cluster(NODE)
    full = make_plan(model, cluster, ParallelSettings(zero_stage=3, micro_batch=2, seq_len=256))
    lora = make_plan(
        model, cluster, ParallelSettings(zero_stage=3, micro_batch=2, seq_len=256, trainable_fraction=0.01)
    )

    def row(plan, start):
        return next(v for k, v in plan.memory.items() if k.startswith(start))

    assert row(lora, "parameters") == row(full, "parameters")
    assert row(lora, "gradients") == pytest.approx(row(full, "gradients") * 0.01)
    assert row(lora, "optimizer") == pytest.approx(row(full, "optimizer") * 0.01)
    # ZeRO-3 still all-gathers every parameter twice; only the gradient reduce-scatter shrinks
    full_comm, lora_comm = next(iter(full.comm.values())), next(iter(lora.comm.values()))
    assert 2 / 3 < lora_comm / full_comm < 0.68
    assert (
        lora.mfu < full.mfu * 1.01
        and lora.times["compute (989 TFLOPS x 50% efficiency)"]
        < full.times["compute (989 TFLOPS x 50% efficiency)"]
    )
    assert any("0.010%" in n or "1.000%" in n for n in lora.notes)


def test_the_10b_lora_recipe_loads():
    from ernie_zoo.finetune import build_args

    args = build_args(RECIPE)
    assert args.model.preset == "10b" and args.method.method == "lora" and args.method.lora_r == 16
    assert (args.distributed.backend, args.distributed.zero_stage, args.distributed.tp_size) == (
        "deepspeed",
        3,
        None,
    )


def test_plan_of_the_10b_lora_recipe(capsys, tmp_path):
    from ernie_zoo.cli import main

    assert main(["plan", "--recipe", str(RECIPE), "--cluster", NODE, "--json"]) == 0  # fits
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    settings = plan["settings"]
    # counted on the meta device after the run's own apply_method: exactly the hand count
    assert f"{LORA_10B:,} of" in captured.err
    total = int(captured.err.split(f"{LORA_10B:,} of ")[1].split()[0].replace(",", ""))
    assert settings["trainable_fraction"] == pytest.approx(LORA_10B / total, rel=1e-12)
    assert settings["zero_stage"] == 3 and settings["tp"] == 1 and settings["recompute"] == "none"
    # train.batch_size 64 over 8 data-parallel GPUs
    assert (settings["micro_batch"], plan["dp"], plan["global_batch"]) == (8, 8, 64)
    assert settings["seq_len"] == 128
    memory = plan["memory_bytes"]
    optimizer = next(v for k, v in memory.items() if k.startswith("optimizer"))
    params = next(v for k, v in memory.items() if k.startswith("parameters"))
    assert optimizer == pytest.approx(
        params / 2 * 12 * settings["trainable_fraction"]
    )  # 12 B vs 2 B, trainable only
    # the run's own limits: under ZeRO-3 the model is built partitioned; rank 0 builds it whole after training
    assert "builds the model already partitioned under ZeRO-3" in captured.err
    assert f"rank 0 builds it whole ({4 * total / 2**30:.1f} GiB of host memory, fp32)" in captured.err

    # the same recipe with full fine-tuning: 1 / 0.58% times the optimizer state
    data = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    data["method"]["method"] = "full"
    full_recipe = tmp_path / "full-10b-zero3.yaml"
    full_recipe.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    main(["plan", "--recipe", str(full_recipe), "--cluster", NODE, "--json"])
    full = json.loads(capsys.readouterr().out)
    assert full["settings"]["trainable_fraction"] == 1.0
    full_optimizer = next(v for k, v in full["memory_bytes"].items() if k.startswith("optimizer"))
    assert full_optimizer == pytest.approx(optimizer / settings["trainable_fraction"])
    # what LoRA saves per GPU: bf16 gradients + fp32 Adam state (2 + 12 bytes) of every frozen parameter / DP 8
    n, f = plan["model"]["n_params"], settings["trainable_fraction"]
    assert full["total_bytes"] - plan["total_bytes"] == pytest.approx(14 * n * (1 - f) / 8, rel=1e-9)

    # ZeRO stage 2 holds whole parameters on every rank, so every rank builds the model whole
    data["distributed"]["zero_stage"] = 2
    full_recipe.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    main(["plan", "--recipe", str(full_recipe), "--cluster", NODE, "--json"])
    assert "under ZeRO stage 2 builds the model whole on every rank" in capsys.readouterr().err

    # the recipe's tensor-parallel size is planned: TP 2 halves the data-parallel ranks and each GPU's weights
    data["distributed"]["zero_stage"] = 3
    data["distributed"]["tp_size"] = 2
    full_recipe.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    main(["plan", "--recipe", str(full_recipe), "--cluster", NODE, "--json"])
    tp2 = json.loads(capsys.readouterr().out)
    assert (tp2["settings"]["tp"], tp2["dp"], tp2["settings"]["micro_batch"]) == (2, 4, 16)


ONE_GPU = "nodes=1,gpus_per_node=1,gpu=h100-80gb"


def test_offload_plan_of_the_10b_lora_recipe_on_one_gpu(capsys, tmp_path):
    """The question of docs/scale.md: does the 10b LoRA recipe fit one 80 GB GPU with offload, and what does it
    cost on PCIe? Optimizer offload moves LoRA's few states only; parameter offload moves the frozen weights and
    costs 2 fetches of them per micro-batch over PCIe."""
    from ernie_zoo.cli import main

    def plan(*flags: str, recipe: Path = RECIPE) -> tuple[int, dict]:
        code = main(["plan", "--recipe", str(recipe), "--cluster", ONE_GPU, "--json", *flags])
        return code, json.loads(capsys.readouterr().out)

    code, plain = plan()
    assert code == 1 and not plain["fits"] and plain["host_bytes"] == {}
    code, opt = plan("--offload-optimizer", "cpu")
    n, f = plain["model"]["n_params"], plain["settings"]["trainable_fraction"]
    trained = n * f  # one GPU: the ZeRO partition is everything
    assert code == 1  # still too big: LoRA's optimizer state was small to begin with
    assert plain["total_bytes"] - opt["total_bytes"] == pytest.approx((12 + 2) * trained, rel=1e-9)
    assert sum(opt["host_bytes"].values()) == pytest.approx((12 + 4) * trained, rel=1e-9)
    assert opt["comm_bytes_per_step"]["PCIe: offload traffic between GPU and host"] == pytest.approx(
        (2 + 2) * trained, rel=1e-9
    )  # bf16 gradients out, updated bf16 parameters back
    code, both = plan("--offload-optimizer", "cpu", "--offload-param", "cpu")
    assert code == 0 and both["fits"]
    assert opt["total_bytes"] - both["total_bytes"] == pytest.approx(2 * n, rel=1e-9)  # the bf16 weights
    pcie = both["comm_bytes_per_step"]["PCIe: offload traffic between GPU and host"]
    assert pcie == pytest.approx(4 * trained + 2 * 2 * n, rel=1e-9)  # + weights fetched for forward, backward
    times = both["seconds_per_step"]
    stream = times["offload: PCIe gradients out + parameter fetches (overlapped with compute)"]
    assert stream == pytest.approx((2 * trained + 4 * n) / (64e9 * 0.7), rel=1e-9)  # PCIe 5 x16 at 70%
    assert times["step"] > plain["seconds_per_step"]["step"]  # fitting costs time
    # the recipe's own keys feed the same plan
    data = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))
    data["distributed"].update(offload_optimizer="cpu", offload_param="cpu")
    offloaded = tmp_path / "lora-10b-offload.yaml"
    offloaded.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    code, from_recipe = plan(recipe=offloaded)
    assert code == 0 and from_recipe["total_bytes"] == both["total_bytes"]
    assert (from_recipe["settings"]["offload_optimizer"], from_recipe["settings"]["offload_param"]) == (
        "cpu",
        "cpu",
    )


def test_offload_settings_are_checked_and_nvme_is_modelled():
    from ernie_zoo.models.presets import preset_config

    model = ModelShape.from_config(preset_config("1b"), name="1b")
    cluster = parse_cluster(NODE + ",pcie_gbyte_s=10")
    with pytest.raises(ValueError, match="offload_param needs ZeRO stage 3"):
        make_plan(model, cluster, ParallelSettings(zero_stage=2, offload_param="cpu"))
    with pytest.raises(ValueError, match="offload_optimizer needs ZeRO stage 1-3"):
        make_plan(model, cluster, ParallelSettings(zero_stage=0, offload_optimizer="cpu"))
    with pytest.raises(ValueError, match="offload_optimizer must be one of"):
        make_plan(model, cluster, ParallelSettings(offload_optimizer="disk"))
    base = dict(zero_stage=3, micro_batch=1, seq_len=256, recompute="full")
    nvme = make_plan(model, cluster, ParallelSettings(**base, offload_optimizer="nvme", offload_param="nvme"))
    share = model.n_params / 8
    assert nvme.comm["NVMe: offload reads + writes"] == pytest.approx(
        2 * 12 * share + 2 * 2 * share + 2 * share
    )
    assert set(nvme.host) == {
        "optimizer: fp32 master + Adam m, v [NVMe]",
        "gradients: fp32 partition [host memory]",
        "parameters: bf16 ZeRO-3 partition [NVMe]",
    }
    swap = nvme.times["offload: parameter upload + NVMe state swap (not overlapped)"]
    assert swap == pytest.approx(2 * share / 7e9 + (24 + 2) * share / 3e9)  # 10 GB/s PCIe at 70%, NVMe 3 GB/s
    assert "offloaded, per GPU (host memory / NVMe)" in nvme.render()
