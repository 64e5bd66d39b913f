"""The ERNIE 4.5 decoder pretraining recipes at scale (#37 item 2): each states its cluster in its header, and the
`ernie-zoo plan --recipe ...` commands written there fit on it, planning the decoder the recipe builds (its
exact parameter count, total and active, not an encoder's), with logits at every position."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: recipe -> (preset, total parameters, active parameters per token): the counts `ernie-zoo info` prints
SCALE = {
    "ernie4.5-0.3b.yaml": ("ernie4.5-0.3b", 360_748_032, 360_748_032),
    "ernie4.5-21b-a3b.yaml": ("ernie4.5-21b-a3b", 21_825_437_888, 3_352_150_208),
    "ernie4.5-300b-a47b.yaml": ("ernie4.5-300b-a47b", 299_484_163_264, 47_926_586_560),
    "ernie4.5-100b-dense.yaml": ("ernie4.5-100b", 101_105_346_560, 101_105_346_560),
}


def _plan_commands(path: Path) -> list[list[str]]:
    """The `ernie-zoo plan` commands of a recipe's header comment, as argument lists."""
    commands = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("# ")
        if text.startswith("ernie-zoo plan "):
            commands.append(shlex.split(text)[2:])
    return commands


@pytest.mark.parametrize("name", sorted(SCALE))
def test_scale_recipe_plans_fit_on_the_stated_cluster(name, capsys):
    from ernie_zoo.cli import main

    path = REPO / "recipes" / "pretrain" / name
    preset, total, active = SCALE[name]
    commands = _plan_commands(path)
    assert commands, f"{name}: its header names no `ernie-zoo plan --recipe ... --cluster ...` command"
    for argv in commands:
        assert argv[:2] == ["--recipe", f"recipes/pretrain/{name}"] and "--cluster" in argv, argv
        cluster = argv[argv.index("--cluster") + 1]
        assert "nodes=" in cluster and "gpu=" in cluster, cluster  # a stated cluster: nodes and GPU type
        argv = [a if a != f"recipes/pretrain/{name}" else str(path) for a in argv]
        rc = main(["plan", *argv, "--json"])
        out = capsys.readouterr().out
        assert rc == 0, f"{name}: `ernie-zoo plan {' '.join(argv)}` does not fit"
        plan = json.loads(out)
        assert plan["fits"]
        model = plan["model"]
        assert (model["n_params"], model["n_active"]) == (total, active), (preset, model)
        # the decoder (GQA, ERNIE 4.5's vocabulary), not an encoder
        assert model["vocab"] == 103424 and model["kv_heads"] < model["heads"]
        assert plan["settings"]["head_fraction"] == 1.0  # a causal LM scores every position


def test_scale_recipes_load_and_train_decoders():
    """Every scale recipe loads against the schema, names a decoder preset and the DeepSpeed backend with bf16;
    MoE recipes use no TP (TP of the fused experts is refused: docs/decoders.md)."""
    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.parallel.tp_plan import check_tp_divisibility
    from ernie_zoo.recipe_cli import load_recipe
    from ernie_zoo.training.causal_lm import is_decoder_preset
    from ernie_zoo.training.recipe import PretrainRecipe

    for name, (preset, _, _) in SCALE.items():
        recipe = load_recipe(REPO / "recipes" / "pretrain" / name, cls=PretrainRecipe)
        recipe.validate()
        assert recipe.model.preset == preset and is_decoder_preset(preset)
        assert recipe.distributed.backend == "deepspeed" and recipe.precision == "bf16"
        check_tp_divisibility(preset_config(preset), recipe.distributed.tp_size or 1)


def test_plan_of_a_decoder_recipe_is_the_decoder(capsys):
    """`ernie-zoo plan --recipe` on a decoder recipe whose tokenizer is not there yet plans the decoder preset's
    own vocabulary (not the encoder default of 40,000 rows) and logits at every position (not the MLM's 15%)."""
    from ernie_zoo.cli import main
    from ernie_zoo.models.presets import parameter_counts, preset_config

    rc = main(["plan", "--recipe", str(REPO / "recipes/pretrain/ernie4.5-tiny-cpu.yaml"), "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert plan["model"]["n_params"] == parameter_counts(preset_config("ernie4.5-tiny"))["total"] == 138_048
    assert plan["model"]["vocab"] == 1000 and plan["settings"]["head_fraction"] == 1.0
