"""Recipe schema: every YAML under recipes/ loads against its schema (`PretrainRecipe` or `FinetuneArgs`, by
jsonargparse) and holds only what differs from the defaults; overrides, errors, help.

The rule for a recipe file (what `scripts/slim_recipes.py` writes, and what these tests enforce):
- it holds only the keys whose values differ from the schema's defaults (the full resolved config is one
  `--print_config` away), and loads to the recipe tests/data/resolved_recipes.json records;
- a header comment before the first key (ended by a blank line) says what the recipe is for and where its
  numbers came from; a `# note` after a value may say where that number came from;
- every other comment is the schema's: each key sits directly under its help, each section under its
  description, exactly as `recipe_to_yaml` wraps them, and no other comment appears.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import typing
from pathlib import Path

import pytest
import yaml

from ernie_zoo.finetune.args import FinetuneArgs, recipe_schema
from ernie_zoo.recipe_cli import (
    cli_args,
    iter_fields,
    load_recipe,
    parse_recipe,
    recipe_to_yaml,
    to_dict,
    unknown_keys,
)
from ernie_zoo.training.recipe import PretrainRecipe

REPO = Path(__file__).parents[1]
RECIPES_DIR = REPO / "recipes" / "pretrain"
# The zoo's pretraining recipes share the schema, and so do the experiments'.
RECIPES = sorted(RECIPES_DIR.glob("*.yaml")) + sorted((RECIPES_DIR.parent / "zoo").glob("pretrain-*.yaml"))
RECIPES += sorted((RECIPES_DIR.parent / "experiments").glob("pretrain-*.yaml"))
#: every recipe under recipes/, both schemas
ALL_RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))
SHIPPED = ["tiny-cpu.yaml", "mini.yaml", "base.yaml", "10b.yaml", "100b.yaml"]
# Parameter counts the big recipes promise in their names (checked on the meta device, +-15%).
EXPECTED_PARAMS = {"10b.yaml": 10e9, "100b.yaml": 100e9}
MINIMAL = {"data.files": ["corpus.txt"]}


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _slimmer():
    spec = importlib.util.spec_from_file_location("slim_recipes", REPO / "scripts" / "slim_recipes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    # every key of the file is a schema key (load_recipe would raise otherwise); the rest are the defaults
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


def _schema_comments(cls: type) -> dict[str, list[str]]:
    """{dotted key or section: the comment lines recipe_to_yaml writes above it}, read off a full recipe_to_yaml
    of the defaults (so the wrapping is the writer's own)."""
    lines = recipe_to_yaml(cls()).splitlines()
    comments, block, section = {}, [], ""
    for line in lines:
        if line.lstrip().startswith("#"):
            block.append(line.strip())
            continue
        if line.strip() and not line.lstrip().startswith("-"):
            key = line.strip().split(":")[0]
            if not line.startswith(" "):
                section = "" if line.split(":", 1)[1].strip() else key
                comments[key] = block
            else:
                comments[f"{section}.{key}"] = block
        block = []
    return comments


@pytest.mark.parametrize("path", ALL_RECIPES, ids=_rel)
def test_every_comment_is_the_schema_help_or_the_header(path):
    """Each key sits directly under its help, each section under its description (as recipe_to_yaml writes them);
    the only other comments are the header before the first key and `# note`s after values."""
    cls = recipe_schema(path)
    expected = _schema_comments(cls)
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    first -= len(expected.get(lines[first].split(":")[0], []))  # the first key's help: not header
    assert first <= 0 or not lines[first - 1].strip(), f"{_rel(path)}: a blank line ends the header"
    first = max(first, 0)
    section, block, checked = "", [], 0
    for n, line in enumerate(lines[first:], first + 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped)
            continue
        if not stripped or stripped.startswith("-"):
            assert not block, f"{_rel(path)}:{n}: a comment that is no key's help: {block}"
            continue
        key = stripped.split(":")[0]
        if not line.startswith(" "):
            section = "" if line.split(":", 1)[1].split(" #")[0].strip() else key
            dotted = key
        else:
            dotted = f"{section}.{key}"
        assert dotted in expected, f"{_rel(path)}:{n}: {dotted!r} is no key of {cls.__name__}"
        assert block == expected[dotted], f"{_rel(path)}:{n}: {dotted} is not under its help"
        block, checked = [], checked + 1
    assert checked and not block


def _walk(data: dict, cls: type, prefix: str = "") -> typing.Iterator[tuple[str, typing.Any]]:
    """(dotted key, section class path) for every leaf key a recipe file gives."""
    hints = typing.get_type_hints(cls)
    for key, value in data.items():
        if dataclasses.is_dataclass(hints[key]):
            assert value, f"section {prefix}{key} is empty"
            yield from _walk(value, hints[key], f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _get(obj: typing.Any, dotted: str) -> typing.Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("path", ALL_RECIPES, ids=_rel)
def test_no_recipe_repeats_a_default(path):
    """A recipe gives only the keys that differ from the schema's defaults: the three lines that matter are not
    hidden among the two hundred that do not (`--print_config` prints them all)."""
    cls = recipe_schema(path)
    recipe, defaults = load_recipe(path, cls=cls), cls()
    given = list(_walk(yaml.safe_load(path.read_text(encoding="utf-8")), cls))
    assert given
    repeated = [key for key, _ in given if _get(recipe, key) == _get(defaults, key)]
    assert not repeated, f"{_rel(path)} repeats the defaults of {repeated}"


def test_recipes_are_what_the_slimming_script_writes():
    """The committed recipes are scripts/slim_recipes.py's output (header and notes kept, keys at their defaults
    left out, each kept key under its current help), so a docstring change is one rerun away."""
    slimmer = _slimmer()
    stale = [_rel(p) for p in ALL_RECIPES if slimmer.slim(p) != p.read_text(encoding="utf-8")]
    assert not stale, f"run `python scripts/slim_recipes.py`: {stale}"


def test_the_schema_is_told_by_the_keys():
    """`recipe_schema` (what `ernie-zoo plan --recipe` and the model cards use) tells the schema from a file's
    keys alone, even when a slim recipe leaves out task, method and train; the committed recipes agree with
    where they sit (recipes/pretrain/ and pretrain-*.yaml are ernie-pretrain's)."""
    for path in ALL_RECIPES:
        pretrain = path.parent == RECIPES_DIR or path.name.startswith("pretrain-")
        assert recipe_schema(path) is (PretrainRecipe if pretrain else FinetuneArgs), _rel(path)
    assert unknown_keys({"data": {"train_file": "a.jsonl"}}, FinetuneArgs) == []
    assert unknown_keys({"data": {"train_file": "a.jsonl"}}, PretrainRecipe) == ["data.train_file"]
    assert unknown_keys({"model": {"preset": "mini"}, "optim": {"lrr": 1}, "x": 2}, PretrainRecipe) == [
        "optim.lrr",
        "x",
    ]
    assert unknown_keys([1], PretrainRecipe) == ["."]


def test_schema_of_slim_files(tmp_path):
    cases = {
        "data:\n  train_file: a.jsonl\n": FinetuneArgs,  # no task, method or train: the data keys tell
        "train:\n  epochs: 1\n": FinetuneArgs,
        "data:\n  files: [a.txt]\n": PretrainRecipe,
        "max_steps: 3\n": PretrainRecipe,
        "data:\n  train_file: a.jsonl\n  lexcon: x\n": FinetuneArgs,  # a typo: the schema it was meant for
    }
    for i, (text, cls) in enumerate(cases.items()):
        path = tmp_path / f"r{i}.yaml"
        path.write_text(text, encoding="utf-8")
        assert recipe_schema(path) is cls, text
    (tmp_path / "bad.yaml").write_text("- a\n", encoding="utf-8")
    with pytest.raises(ValueError, match="a recipe is a mapping"):
        recipe_schema(tmp_path / "bad.yaml")


def test_changed_only_yaml_loads_to_the_same_recipe():
    recipe = load_recipe(
        None, {**MINIMAL, "optim.lr": "1e-3", "distributed.backend": "deepspeed"}, cls=PretrainRecipe
    )
    text = recipe_to_yaml(recipe, changed_only=True, notes={"optim.lr": "tuned"})
    assert load_recipe(yaml.safe_load(text), cls=PretrainRecipe) == recipe
    assert yaml.safe_load(text) == {
        "data": {"files": ["corpus.txt"]},
        "optim": {"lr": 1e-3},
        "distributed": {"backend": "deepspeed"},
    }
    assert "  lr: 0.001  # tuned\n" in text and "# Peak learning rate.\n" in text
    assert recipe_to_yaml(PretrainRecipe(), changed_only=True) == "\n"  # the defaults: nothing to say


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
