"""Recipe schema: every YAML in recipes/pretrain/ loads against `PretrainRecipe` (jsonargparse); overrides,
errors, help."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from ernie_zoo.recipe_cli import cli_args, iter_fields, load_recipe, parse_recipe, recipe_to_yaml, to_dict
from ernie_zoo.training.recipe import PretrainRecipe

RECIPES_DIR = Path(__file__).parents[1] / "recipes" / "pretrain"
# The zoo's pretraining recipes share the schema, and so do the experiments'.
RECIPES = sorted(RECIPES_DIR.glob("*.yaml")) + sorted((RECIPES_DIR.parent / "zoo").glob("pretrain-*.yaml"))
RECIPES += sorted((RECIPES_DIR.parent / "experiments").glob("pretrain-*.yaml"))
SHIPPED = ["tiny-cpu.yaml", "mini.yaml", "base.yaml", "10b.yaml", "100b.yaml"]
# Parameter counts the big recipes promise in their names (checked on the meta device, +-15%).
EXPECTED_PARAMS = {"10b.yaml": 10e9, "100b.yaml": 100e9}
MINIMAL = {"data.files": ["corpus.txt"]}


def test_recipes_exist():
    assert set(SHIPPED) <= {p.name for p in RECIPES}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_loads_against_the_schema(path):
    from ernie_zoo.masking import MaskingSchedule
    from ernie_zoo.models.presets import count_parameters
    from ernie_zoo.training.build import build_model_config
    from ernie_zoo.training.causal_lm import decoder_config_for, is_decoder_preset

    recipe = load_recipe(path, cls=PretrainRecipe)
    assert isinstance(recipe, PretrainRecipe)
    # every key of the file is a schema key (load_recipe would raise otherwise) and the file is complete
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert load_recipe(data, cls=PretrainRecipe) == recipe
    MaskingSchedule.from_config(recipe.masking.schedule)
    vocab = recipe.model.vocab_size or recipe.tokenizer.vocab_size
    if is_decoder_preset(
        recipe.model.preset
    ):  # an ERNIE 4.5 decoder: its config for a vocabulary of that size
        from types import SimpleNamespace

        tokenizer = SimpleNamespace(bos_token_id=None, eos_token_id=None, cls_token_id=1, sep_token_id=2,
                                    pad_token_id=0)  # fmt: skip
        config = decoder_config_for(recipe.model, _Sized(tokenizer, vocab), recipe.data.max_seq_len)
    else:
        config = build_model_config(recipe.model, vocab, recipe.data.max_seq_len)
    assert config.max_position_embeddings >= recipe.data.max_seq_len
    if path.name in EXPECTED_PARAMS:
        n = count_parameters(config)
        assert abs(n / EXPECTED_PARAMS[path.name] - 1) < 0.15, n


class _Sized:
    """A tokenizer stand-in: its special-token ids and a length."""

    def __init__(self, ids, n: int):
        self.__dict__.update(vars(ids))
        self._n = n

    def __len__(self) -> int:
        return self._n


@pytest.mark.parametrize("name", SHIPPED)
def test_recipe_files_repeat_the_help_as_comments(name):
    """Each key of the shipped recipes sits under its help text (as `recipe_to_yaml` writes it)."""
    lines = (RECIPES_DIR / name).read_text(encoding="utf-8").splitlines()
    helps = {key: help for key, _, help in iter_fields(PretrainRecipe)}
    section, checked = "", 0
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        key = line.strip().split(":")[0]
        if not line.startswith(" "):
            section = "" if line.split(":", 1)[1].strip() else f"{key}."
            if section:
                continue
        j, comment = i, []
        while j > 0 and lines[j - 1].lstrip().startswith("#"):
            comment.insert(0, lines[j - 1].strip().lstrip("#").strip())
            j -= 1
        assert " ".join(comment) == helps[section + key], f"{name}: {section + key}"
        checked += 1
    assert checked == len(helps)


def test_yaml_round_trip_and_defaults():
    recipe = load_recipe(None, MINIMAL, cls=PretrainRecipe)
    text = recipe_to_yaml(recipe, header="a header")
    assert text.startswith("# a header")
    assert load_recipe(yaml.safe_load(text), cls=PretrainRecipe) == recipe
    assert to_dict(recipe)["optim"]["lr"] == 5e-4


def test_every_field_has_help():
    """Each field's docstring is its help (jsonargparse reads it for --help; recipe_to_yaml writes it)."""
    from ernie_zoo.finetune import FinetuneArgs

    for cls in (PretrainRecipe, FinetuneArgs):
        assert [key for key, _, help in iter_fields(cls) if len(help) < 10] == [], cls


def test_dotted_overrides_and_type_coercion(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("max_steps: 10\noptim:\n  lr: 1e-3\ndata:\n  files: [a.txt]\n", encoding="utf-8")
    recipe = load_recipe(path, cls=PretrainRecipe)
    assert recipe.optim.lr == pytest.approx(
        1e-3
    )  # PyYAML reads 1e-3 as a string; the schema makes it a float
    recipe = parse_recipe(
        PretrainRecipe,
        cli_args(
            [
                str(path),
                "--optim.lr",
                "2e-4",
                "--max_steps=50",
                "--model.use_pinyin",
                "false",
                "--optim.betas",
                "[0.9, 0.95]",
                "--model.preset",
                "mini",
                "--optim.grad_clip",
                "null",
                "--logging.tensorboard",
                "true",
            ]
        ),
    )
    assert recipe.optim.lr == pytest.approx(2e-4)
    assert recipe.max_steps == 50 and isinstance(recipe.max_steps, int)
    assert recipe.model.use_pinyin is False
    assert recipe.optim.betas == [0.9, 0.95]
    assert recipe.model.preset == "mini"
    assert recipe.optim.grad_clip is None
    assert recipe.logging.tensorboard is True
    assert recipe.data.files == ["a.txt"]  # untouched keys keep the file's values


def test_resume_flag_and_positional_recipe():
    assert cli_args(["r.yaml", "--resume"]) == ["--config=r.yaml", "--resume=latest"]
    assert cli_args(["r.yaml", "--resume", "--max_steps", "3"])[1] == "--resume=latest"
    assert cli_args(["r.yaml", "--resume", "runs/x/checkpoint-5"])[1:] == ["--resume=runs/x/checkpoint-5"]
    assert cli_args(["--lr=1", "--resume"], {"lr": "optim.lr"}) == ["--optim.lr=1", "--resume=latest"]


@dataclasses.dataclass
class _Command:
    """A subcommand's arguments (what `ernie-zoo` subcommands declare)."""

    src: str
    """A positional argument."""
    texts: list[str]
    """The positional arguments left."""
    dry_run: bool = False
    """A flag."""
    task: list[str] = dataclasses.field(default_factory=list)
    """Repeatable."""
    task_path: dict[str, str] = dataclasses.field(default_factory=dict)
    """TASK=DIR pairs."""
    batch_size: int = 1
    """A number."""


def test_command_line_read_as_argparse_would():
    """Subcommands: positionals anywhere, kebab-case flags, bare bool flags, repeated list flags, KEY=VALUE."""
    argv = ["a", "--dry-run", "x", "--task", "ner", "-n", "4", "--task", "pos", "--task_path", "ner=d", "y"]
    args = cli_args(argv, {"n": "batch_size"}, _Command, positionals=True)
    cmd = parse_recipe(_Command, args, positionals=True)
    assert cmd == _Command("a", ["x", "y"], True, ["ner", "pos"], {"ner": "d"}, 4)
    cmd = parse_recipe(
        _Command, cli_args(["a", "--dry_run", "false", "--", "-z"], None, _Command, True), True
    )
    assert (cmd.texts, cmd.dry_run) == (["-z"], False)
    with pytest.raises(ValueError, match="--task_path expects KEY=VALUE"):
        cli_args(["a", "--task_path", "ner"], None, _Command, positionals=True)
    with pytest.raises(ValueError, match="unknown option '--bogus'; valid options: --dry_run, --task"):
        parse_recipe(_Command, cli_args(["a", "--bogus", "1"], None, _Command, True), True)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"optim.lrr": "1"}, "unknown recipe key 'optim.lrr'"),
        ({"learning_rate": "1"}, "unknown recipe key 'learning_rate'"),
        ({"optim.lr.x": "1"}, 'key "optim.lr"'),  # jsonargparse: optim.lr is no section
        ({"optim": "1"}, 'key "optim": Unable to load config'),  # a section takes a YAML file
    ],
)
def test_unknown_keys_are_named(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_recipe(None, {**MINIMAL, **overrides}, cls=PretrainRecipe)


def test_unknown_key_lists_the_valid_keys_of_its_section():
    with pytest.raises(
        ValueError, match=r"unknown recipe key 'optim\.lrr'; valid keys in optim: betas, decay, "
    ):
        load_recipe(None, {**MINIMAL, "optim.lrr": "1"}, cls=PretrainRecipe)
    with pytest.raises(ValueError, match=r"unknown recipe key 'foo'; valid keys: checkpoint, data, device"):
        load_recipe({"foo": 1}, cls=PretrainRecipe)


def test_unknown_key_in_a_file_is_named(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("data:\n  files: [a.txt]\n  eval_fractoin: 0.1\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"unknown recipe key 'data\.eval_fractoin'.*valid keys in data:.*eval_fraction"
    ):
        load_recipe(path, cls=PretrainRecipe)


@pytest.mark.parametrize(
    "overrides, exc, message",
    [  # type errors are jsonargparse's ("Parser key ..."), value rules the recipe's validate()
        ({"max_steps": "ten"}, ValueError, "key \"max_steps\": Expected a <class 'int'>. Got value: ten"),
        ({"max_steps": "0"}, ValueError, "'max_steps' = 0"),
        ({"optim.lr": "fast"}, ValueError, 'key "optim.lr"'),
        ({"model.use_pinyin": "maybe"}, ValueError, "key \"model.use_pinyin\": Expected a <class 'bool'>"),
        ({"precision": "fp8"}, ValueError, "'precision'"),
        ({"model.preset": "huge"}, ValueError, "'model.preset' = 'huge'"),
        ({"data.dataset_dir": "x"}, ValueError, "exactly one of data.files or data.dataset_dir"),
        ({"optim.warmup_steps": "-1"}, ValueError, "'optim.warmup_steps' = -1"),
        ({"distributed.backend": "horovod"}, ValueError, "'distributed.backend'"),
        (
            {"distributed.tp_size": "2"},
            ValueError,
            "'distributed.tp_size' = 2: needs distributed.backend deepspeed",
        ),
        ({"model.preset": "null", "model.hidden_size": "64"}, ValueError, "model.num_hidden_layers"),
    ],
)
def test_bad_values_raise_naming_the_key(overrides, exc, message):
    with pytest.raises(exc, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_recipe(None, {**MINIMAL, **overrides}, cls=PretrainRecipe)


def test_help_lists_every_field(capsys):
    from ernie_zoo.training.pretrain import main

    assert main(["--help"]) == 0
    out = re.sub(r"(\w)- ", r"\1-", " ".join(capsys.readouterr().out.split()))  # lines wrap after hyphens
    for key, _, help in iter_fields(PretrainRecipe):
        assert f"--{key} " in out
        assert help[:60] in out, key
    assert "--optim.lr LR Peak learning rate. (type: float, default: 0.0005)" in out
    assert "usage: ernie-pretrain [RECIPE.yaml]" in out and "tiny-cpu.yaml --optim.lr 1e-3" in out


def test_cli_errors_exit_2_naming_the_key(capsys, tmp_path):
    from ernie_zoo.training.pretrain import main

    assert main(["--data.files", "[a.txt]", "--optim.learning_rate", "1"]) == 2
    assert "unknown recipe key 'optim.learning_rate'; valid keys in optim:" in capsys.readouterr().err
    assert main(["--data.files", "[a.txt]", "--max_steps", "ten"]) == 2
    assert 'key "max_steps"' in capsys.readouterr().err
    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_print_config(capsys):
    from ernie_zoo.training.pretrain import main

    assert main([str(RECIPES_DIR / "tiny-cpu.yaml"), "--max_steps", "7", "--print_config"]) == 0
    text = capsys.readouterr().out
    assert "# Optimizer steps to train.\nmax_steps: 7\n" in text  # commented, like the shipped recipes
    printed = yaml.safe_load(text)
    assert printed["max_steps"] == 7
    assert load_recipe(printed, cls=PretrainRecipe).max_steps == 7
