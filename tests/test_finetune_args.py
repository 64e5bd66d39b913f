"""Typed fine-tuning arguments: every shipped recipe loads, overrides are typed, unknown keys are rejected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ernie_zoo.finetune import FinetuneArgs, build_args, dump_recipe
from ernie_zoo.finetune.args import DistributedArgs, TrainArgs, flat_aliases
from ernie_zoo.finetune.cli import main
from ernie_zoo.recipe_cli import iter_fields

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes" / "finetune").glob("*.yaml"))
# The zoo's fine-tuning recipes (recipes/zoo/pretrain-*.yaml are ernie-pretrain's, tested in test_recipes.py): the
# ones build_all.sh runs, and the experiments that reproduce a shipped model's choices (recipes/experiments/README.md).
ZOO = Path(__file__).parent.parent / "recipes" / "zoo"
EXPERIMENTS = ZOO.parent / "experiments"
ZOO_RECIPES = sorted(p for p in ZOO.glob("*.yaml") if not p.name.startswith("pretrain-"))
EXPERIMENT_RECIPES = sorted(p for p in EXPERIMENTS.glob("*.yaml") if not p.name.startswith("pretrain-"))


def test_there_are_recipes_for_every_task():
    tasks = {build_args(path).task for path in RECIPES}
    assert tasks == {"sequence_classification", "token_classification", "generation"}


@pytest.mark.parametrize(
    "path", RECIPES + ZOO_RECIPES + EXPERIMENT_RECIPES, ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_recipe_loads(path):
    """Every fine-tuning recipe builds its arguments (its comments and keys at their defaults: test_recipes.py)."""
    args = build_args(path)
    assert isinstance(args, FinetuneArgs)
    assert args.train.output_dir != TrainArgs.output_dir  # each run writes its own directory
    # The zoo's recipes record how the shipped models were built, on one process (issue #21).
    if path.parent in (ZOO, EXPERIMENTS):
        assert args.distributed == DistributedArgs()


def test_the_task_help_names_every_task():
    from ernie_zoo.finetune.args import FINETUNE_TASKS
    from ernie_zoo.recipe_cli import field_help

    assert all(task in field_help(FinetuneArgs)["task"] for task in FINETUNE_TASKS)


def test_every_recipe_task_has_an_objective():
    from ernie_zoo.finetune.args import FINETUNE_TASKS
    from ernie_zoo.finetune.objectives import OBJECTIVES

    assert sorted(FINETUNE_TASKS) == sorted(OBJECTIVES)
    assert all(cls.name == name for name, cls in OBJECTIVES.items())


def test_flat_names_are_unique_and_map_to_sections():
    aliases = flat_aliases()
    assert aliases["learning_rate"] == "train.learning_rate"
    assert aliases["lora_r"] == "method.lora_r"
    assert aliases["task"] == "task"
    assert len(aliases) == len(list(iter_fields(FinetuneArgs)))


def test_overrides_flat_and_dotted_with_types():
    args = build_args(
        {"data": {"train_file": "x.jsonl"}},
        {
            "learning_rate": "1e-3",
            "method.lora_r": "4",
            "labels": "[neg, pos]",
            "use_crf": "false",
            "config_overrides": "{feature_fusion: concat}",
        },
    )
    assert args.train.learning_rate == 1e-3 and args.method.lora_r == 4
    assert args.data.labels == ["neg", "pos"] and args.model.use_crf is False
    assert args.model.config_overrides == {"feature_fusion": "concat"}


@pytest.mark.parametrize(
    ("recipe", "overrides", "error", "match"),
    [
        ({"trian": {"epochs": 1}}, {}, ValueError, "unknown recipe key 'trian'"),
        ({"train": {"epoch": 1}}, {}, ValueError, "unknown recipe key 'train.epoch'"),
        ({}, {"no_such_key": 1}, ValueError, "unknown recipe key 'no_such_key'"),
        ({}, {"batch_size": "big"}, ValueError, "key \"train.batch_size\": Expected a <class 'int'>"),
        ({}, {"task": "summarization"}, ValueError, "task"),
        ({}, {"tag_scheme": "iob2"}, ValueError, "tag_scheme"),
        ({}, {"use_crf": "true"}, ValueError, "token_classification"),
        ({}, {"method": "prefix_tuning"}, ValueError, "past key values"),
        ({}, {"preset": "huge"}, ValueError, "preset"),
        ({}, {"token_dropout": "1.0"}, ValueError, "train.token_dropout"),
        ({}, {"token_dropout": "-0.1"}, ValueError, "train.token_dropout"),
        ({}, {"resume": "/no/such/checkpoint"}, ValueError, "resume"),
    ],
)
def test_bad_recipes_are_rejected_clearly(recipe, overrides, error, match):
    with pytest.raises(error, match=match):
        build_args(recipe, overrides)


def test_dump_reloads_to_the_same_arguments(tmp_path):
    args = build_args(RECIPES[0], {"lora_r": 4, "labels": "[a, b]"})
    path = tmp_path / "again.yaml"
    path.write_text(dump_recipe(args), encoding="utf-8")
    assert build_args(path) == args


def test_help_lists_every_key(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    flat = re.sub(r"(\w)- ", r"\1-", " ".join(text.split()))  # argparse may wrap a line after a hyphen
    for key, _, help in iter_fields(FinetuneArgs):
        assert f"--{key} " in text
        assert help[:60] in flat, key
    # Its own recipes and keys, not ernie-pretrain's.
    assert "recipes/finetune/" in text and "--train.learning_rate" in text
    assert "recipes/pretrain/" not in text and "--optim.lr" not in text


def test_zoo_stages_start_from_what_an_earlier_recipe_writes():
    """Each zoo fine-tuning stage starts from a run directory (or a checkpoint in one) that another zoo recipe
    writes, and so do its distillation teachers; where build_all.sh runs a stage, it runs the recipes producing
    them first. An experiment (recipes/experiments/) may start from a zoo recipe's run or another experiment's; a
    zoo recipe never starts from an experiment's, and build_all.sh runs no experiment."""
    import re

    from ernie_zoo.recipe_cli import load_recipe
    from ernie_zoo.training.recipe import PretrainRecipe

    outputs = {build_args(p).train.output_dir: p for p in ZOO_RECIPES}
    outputs |= {load_recipe(p, cls=PretrainRecipe).output_dir: p for p in ZOO.glob("pretrain-*.yaml")}
    experiments = {build_args(p).train.output_dir: p for p in EXPERIMENT_RECIPES}
    experiments |= {
        load_recipe(p, cls=PretrainRecipe).output_dir: p for p in EXPERIMENTS.glob("pretrain-*.yaml")
    }
    assert experiments and not set(experiments) & set(outputs)  # no run directory written twice
    lines = (ZOO / "build_all.sh").read_text(encoding="utf-8").splitlines()
    build = "\n".join(line for line in lines if not line.lstrip().startswith("#"))  # the commands only
    # Model directories written by a script (`python recipes/zoo/X.py ... --out DIR`), in build_all.sh or in a
    # recipe's header (the command that prepares its start)
    script = re.compile(r"recipes/((?:zoo|experiments)/\w+\.py)[^\n]*?--out (\S+)")
    for found, text in [(outputs, build.replace("\\\n", " "))] + [
        (outputs if path.parent == ZOO else experiments, path.read_text(encoding="utf-8"))
        for path in ZOO_RECIPES + EXPERIMENT_RECIPES
    ]:
        found |= {m.group(2): ZOO.parent / m.group(1) for m in script.finditer(text)}

    def position(stem):
        found = re.search(rf"(?<![\w-]){re.escape(stem)}(?![\w-])", build)
        return found.start() if found else None

    from ernie_zoo.zoo import ZOO_DIR, is_shipped_name

    def shipped(source):  # a model shipped in the package, by name or by its path: nothing has to write it
        return is_shipped_name(source) or (REPO / source).resolve().parent == ZOO_DIR.resolve()

    for path in ZOO_RECIPES + EXPERIMENT_RECIPES:
        zoo = path.parent == ZOO
        written = outputs if zoo else outputs | experiments  # the zoo build never needs an experiment's run
        args = build_args(path)
        for source in [args.model.model_name_or_path, *(args.train.distill_from or [])]:  # start, teachers
            if shipped(source):
                continue
            run_dir = source if source in written else str(Path(source).parent)
            assert run_dir in written, f"{path.name}: {source} is written by no {'zoo ' if zoo else ''}recipe"
            if position(path.stem) is not None:
                producer = position(written[run_dir].stem)
                assert producer is not None and producer < position(path.stem), (path.name, written[run_dir])
    # build_all.sh runs no experiment: its commands name none.
    for path in EXPERIMENTS.iterdir():
        assert path.name == "README.md" or position(path.stem) is None, path.name


def test_cli_flat_and_dotted_overrides_resume_and_errors(capsys, tmp_path):
    """The command line: RECIPE.yaml, then flat or dotted keys; --resume alone; --print_config; errors exit 2."""
    argv = [str(RECIPES[0]), "--learning_rate", "3e-4", "--method.lora_r=4", "--resume", "--print_config"]
    assert main(argv) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["train"]["learning_rate"] == 3e-4 and printed["method"]["lora_r"] == 4
    assert printed["train"]["resume"] == "latest"
    assert main([str(RECIPES[0]), "--train.lerning_rate", "1"]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe key 'train.lerning_rate'; valid keys in train:" in err and "learning_rate" in err
    assert main([str(RECIPES[0]), "--use_crf", "maybe"]) == 2
    assert 'key "model.use_crf"' in capsys.readouterr().err
