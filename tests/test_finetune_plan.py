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


def test_the_10b_lora_recipe_loads_and_repeats_every_help_text():
    from ernie_zoo.finetune import build_args
    from ernie_zoo.finetune.args import FinetuneArgs
    from ernie_zoo.recipe_cli import iter_fields

    args = build_args(RECIPE)
    assert args.model.preset == "10b" and args.method.method == "lora" and args.method.lora_r == 16
    assert (args.distributed.backend, args.distributed.zero_stage, args.distributed.tp_size) == (
        "deepspeed",
        3,
        None,
    )
    text = RECIPE.read_text(encoding="utf-8")
    assert set(yaml.safe_load(text)) == {"task", "data", "model", "method", "train", "distributed"}
    for key, _, help in iter_fields(FinetuneArgs):
        assert " ".join(help.split()[:4]) in " ".join(text.replace("#", " ").split()), key


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
