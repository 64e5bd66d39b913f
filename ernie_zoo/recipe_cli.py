"""Typed command lines: dataclasses whose field docstrings are the help, parsed by jsonargparse.

The litgpt pattern: one YAML file describes a run; every key is a field of a dataclass whose docstring is what
`--help` prints and what the YAML repeats as a comment above it (`recipe_to_yaml` writes both; a recipe file names
only the keys that differ from the defaults, `--print_config` prints them all). jsonargparse reads the
YAML, applies dotted overrides, checks every value against the field types and rejects unknown keys::

    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --optim.lr 1e-3 --max_steps 50

`load_recipe` (a path and {dotted key: value}) and `recipe_from_cli` (a command line) are generic over any recipe
dataclass: `ernie-pretrain` uses them with `training.recipe.PretrainRecipe`, `ernie-finetune` with
`finetune.args.FinetuneArgs`, each `ernie-zoo` subcommand and `python -m` tool with its `Args` (its fields without
a default as positional arguments). A recipe's `validate()` then checks what types cannot. This module sits at the
bottom layer (it imports no ernie_zoo module), so every layer's command line can use it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import textwrap
import types
import typing
from argparse import RawDescriptionHelpFormatter
from functools import cache
from typing import Any, TypeVar

import docstring_parser
import yaml
from jsonargparse import (
    ActionConfigFile,
    ArgumentError,
    ArgumentParser,
    DefaultHelpFormatter,
    set_parsing_settings,
)

# Field docstrings are the help text; jsonargparse reads them only when asked (litgpt asks the same way).
set_parsing_settings(docstring_parse_attribute_docstrings=True)

T = TypeVar("T")


# ----------------------------------------------------------------------------------- parsing (jsonargparse)
class _HelpFormatter(DefaultHelpFormatter, RawDescriptionHelpFormatter):
    """jsonargparse's help (type and default per key) under a description kept as written (usage examples)."""


@cache
def recipe_parser(
    cls: type, prog: str | None = None, description: str | None = None, positionals: bool = False
) -> ArgumentParser:
    """The jsonargparse parser of recipe class `cls`: `--config RECIPE.yaml`, then `--KEY VALUE` per field
    (dotted for sections, `--optim.lr`) with the field's docstring as its help. `positionals`: the fields without
    a default are positional arguments (an `ernie-zoo` subcommand's `SRC DST`)."""
    parser = ArgumentParser(
        prog=prog,
        usage=None if positionals else "%(prog)s [RECIPE.yaml] [--KEY VALUE ...] [--print_config] [--help]",
        description=description or cls.__doc__,
        exit_on_error=False,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "--config",
        action=ActionConfigFile,
        help="A YAML file of these keys (for a recipe, the positional RECIPE.yaml is the same); later --KEY VALUE "
        "options override it.",
    )
    parser.add_class_arguments(cls, nested_key=None, as_positional=positionals, fail_untyped=True)
    # What recipe_from_cli does with it (jsonargparse's own would print the recipe unchecked, without comments).
    parser._option_string_actions["--print_config"].help = "Print the checked keys as commented YAML; exit."
    return parser


def parse_recipe(cls: type[T], argv: list[str], positionals: bool = False) -> T:
    """The validated recipe for jsonargparse arguments; `ValueError` naming the key for anything wrong."""
    parser = recipe_parser(cls, positionals=positionals)
    try:
        init = parser.instantiate(parser.parse_args(argv))
    except ArgumentError as e:
        raise ValueError(_explain(str(e), cls, positionals)) from None
    recipe = cls(**{f.name: init[f.name] for f in dataclasses.fields(cls)})
    if hasattr(recipe, "validate"):
        recipe.validate()
    return recipe


def load_recipe(
    path: str | os.PathLike | dict[str, Any] | None,
    overrides: dict[str, Any] | None = None,
    *,
    cls: type[T],
) -> T:
    """A YAML recipe of class `cls` (a path or a nested dict; None: the defaults) with dotted overrides applied,
    validated.

    Override values are what a command line would give (`"1e-3"`, `"[a, b]"`, `"null"`) or Python values."""
    argv = []
    if path is not None:
        argv = ["--config", yaml.safe_dump(path) if isinstance(path, dict) else os.fspath(path)]
    for key, value in (overrides or {}).items():
        text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else json.dumps(value, default=str)
        argv += [f"--{key}", text]
    return parse_recipe(cls, argv)


def cli_args(
    argv: list[str], aliases: dict[str, str] | None = None, cls: type | None = None, positionals: bool = False
) -> list[str]:
    """A command line as jsonargparse arguments, read as argparse would have read it.

    A first argument that is not an option is the recipe file (`--config FILE`); with `positionals`, the arguments
    that are no option's value fill `cls`'s fields without a default instead, in order, a list field taking all
    that are left (`NAME ...`; after `--` all are), one that may be None may be missing. `--kebab-case` is
    `--kebab_case`; `aliases` maps other names (`learning_rate`, `i`) to keys (`train.learning_rate`, `input`).
    A bool field given without true/false is true, `--resume` without a value is `--resume latest`; a list field
    collects the values that follow it, once or repeated (`--tasks a b`, `--task a --task b`; so no class has both
    list options and positionals), a dict field its KEY=VALUE pairs (`--task_path ner=runs/ner`).
    """
    args = list(argv)
    if not positionals and args and not args[0].startswith("-"):
        args[:1] = ["--config", args[0]]
    out: list[str] = []
    free: list[str] = []  # arguments that are no option's value
    collected: dict[str, Any] = {}  # the values of list and dict fields
    i = 0
    while i < len(args):
        token, following = args[i], args[i + 1] if i + 1 < len(args) else None
        i += 1
        if token == "--":
            free += args[i:]
            break
        if not token.startswith("-") or token == "-":
            free.append(token)
            continue
        key, eq, value = token.lstrip("-").partition("=")
        key = key.replace("-", "_")
        key = (aliases or {}).get(key, key)
        kind = _kind(cls, key)
        if not eq:
            bare = following is None or following.startswith("--")
            if kind is bool and (
                bare or positionals and following.lower() not in ("true", "false", "yes", "no")
            ):
                value = "true"  # among positionals only true/false is its value: `--no_progress TEXT`
            elif bare:
                if not key.endswith("resume"):
                    out.append(f"--{key}")  # jsonargparse says the value is missing
                    continue
                value = "latest"
            else:
                value, i = following, i + 1
        if kind is list and not value.startswith("["):
            collected.setdefault(key, []).append(value)
            while eq == "" and i < len(args) and not args[i].startswith("-"):  # argparse's nargs="+"
                collected[key].append(args[i])
                i += 1
        elif kind is dict and not value.startswith("{"):
            name, sep, item = value.partition("=")
            if not (name and sep and item):
                raise ValueError(f"{token.partition('=')[0]} expects KEY=VALUE, got {value!r}")
            collected.setdefault(key, {})[name] = item
        else:
            out.append(f"--{key}={value}")
    if positionals and cls is not None:
        fill = []
        for f in dataclasses.fields(cls):
            if _has_default(f):
                continue
            if _kind(cls, f.name) is list:
                fill.append(json.dumps(free, ensure_ascii=False))
                free = []
            elif type(None) in typing.get_args(typing.get_type_hints(cls)[f.name]):
                out += [f"--{f.name}={free.pop(0)}"] if free else []  # jsonargparse's option --NAME
            elif free:
                fill.append(free.pop(0))
        out = fill + out
    out += free  # left over: jsonargparse reports them
    for key, values in collected.items():
        out.append(f"--{key}={json.dumps(values, ensure_ascii=False)}")
    return out


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _kind(cls: type | None, key: str) -> type | None:
    """bool, list or dict when the (dotted) key of recipe class `cls` is one (optionally None), else None."""
    tp: Any = cls
    for part in key.split("."):
        if not dataclasses.is_dataclass(tp):
            return None
        tp = typing.get_type_hints(tp).get(part)
    options = (
        typing.get_args(tp)
        if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union
        else (tp,)
    )
    found = {typing.get_origin(o) or o for o in options} & {bool, list, dict}
    return found.pop() if len(found) == 1 else None


def recipe_from_cli(
    argv: list[str],
    cls: type[T],
    prog: str,
    description: str,
    aliases: dict[str, str] | None = None,
    positionals: bool = False,
) -> T | int:
    """The recipe a command line describes (`cli_args`), or the exit status when there is nothing to run: 0
    after `--help` or `--print_config` (the resolved recipe as commented YAML), 2 after an error (one line on
    stderr)."""
    if "-h" in argv or "--help" in argv:
        print(recipe_parser(cls, prog, description, positionals).format_help(), end="")
        return 0
    bad = _not_utf8(argv)
    if bad:
        print(f"{prog}: error: {bad}", file=sys.stderr)
        return 2
    print_config = any(a.startswith("--print_config") for a in argv)
    argv = [a for a in argv if not a.startswith("--print_config")]
    try:
        recipe = parse_recipe(cls, cli_args(argv, aliases, cls, positionals), positionals)
    except (OSError, ValueError) as e:
        print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if print_config:
        print(recipe_to_yaml(recipe), end="")
        return 0
    return recipe


def _not_utf8(argv: list[str]) -> str | None:
    """Why an argument is not valid UTF-8, naming it (its position, its option), or None. Python decodes such
    bytes in argv as lone surrogates (PEP 383), which fail later as "surrogates not allowed" far from the cause."""
    for i, arg in enumerate(argv):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            raw = os.fsencode(arg)  # the bytes as given
            option, eq, _ = arg.partition("=")
            if arg.startswith("--") and eq:
                which = f"the value of {option}"
            elif i > 0 and argv[i - 1].startswith("--") and "=" not in argv[i - 1]:
                which = f"argument {i + 1} (after {argv[i - 1]})"
            else:
                which = f"argument {i + 1}"
            at = len(arg[: exc.start].encode("utf-8", "surrogateescape"))
            return (
                f"{which} is not valid UTF-8: {raw!r} (undecodable byte at position {at}); give arguments in "
                "UTF-8 (check the terminal's locale)"
            )
    return None


def command_main(
    cls: type[T],
    run: typing.Callable[[T, list[str]], int | None],
    prog: str,
    description: str | None,
    argv: list[str] | None = None,
    aliases: dict[str, str] | None = None,
) -> int:
    """A command on its `Args` dataclass: an `ernie-zoo` subcommand or a `python -m` tool. Its fields without a
    default are positional (`cli_args`); `run(args, argv)` gets the parsed dataclass and the arguments as given
    (to record in a results file). Returns the exit status (`--help`: 0; bad arguments: 2)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = recipe_from_cli(argv, cls, prog, description, aliases, positionals=True)
    return args if isinstance(args, int) else int(run(args, argv) or 0)


_UNKNOWN = re.compile(
    r"unrecognized arguments: --([^\s=]+)|Group '(\S+)' does not accept option '(\S+)'|Option '(\S+)' is not"
)


def _explain(message: str, cls: type, options: bool = False) -> str:
    """jsonargparse's message on one line; for an unknown key, the key and the valid keys of its section
    (`options`: a subcommand's, named as options)."""
    found = _UNKNOWN.search(message)
    if not found:
        return " ".join(message.split())
    key = found[1] or found[4] or f"{found[2]}.{found[3]}"
    if options:
        names = ", ".join(f"--{f.name}" for f in dataclasses.fields(cls) if _has_default(f))
        return f"unknown option '--{key}'; valid options: {names}"
    section, node = "", cls
    for part in key.split(".")[:-1]:
        tp = typing.get_type_hints(node).get(part)
        if not dataclasses.is_dataclass(tp):
            key = f"{section}{part}"  # the first part that is no section of the recipe
            break
        section, node = f"{section}{part}.", tp
    names = ", ".join(sorted(f.name for f in dataclasses.fields(node)))
    return f"unknown recipe key {key!r}; valid keys{' in ' + section.rstrip('.') if section else ''}: {names}"


# ----------------------------------------------------------------------------------- help and YAML output
@cache
def field_help(cls: type) -> dict[str, str]:
    """{field name: its docstring on one line} for a dataclass (what jsonargparse shows as its help)."""
    params = docstring_parser.parse_from_object(cls).params
    return {p.arg_name: " ".join((p.description or "").split()) for p in params}


def iter_fields(cls: type, prefix: str = "") -> typing.Iterator[tuple[str, Any, str]]:
    """(dotted key, type, help) for every leaf field, depth first in declaration order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from iter_fields(tp, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", tp, field_help(cls).get(f.name, "")


def to_dict(obj: Any) -> dict[str, Any]:
    """The recipe as a plain nested dict (YAML/JSON-ready)."""
    return dataclasses.asdict(obj)


def _yaml_float(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}[repr(value)]
    if value == 0 or 1e-4 <= abs(value) < 1e6:
        return repr(value)
    mantissa, exponent = f"{value:.6e}".split("e")
    mantissa = mantissa.rstrip("0")
    mantissa = mantissa + "0" if mantissa.endswith(".") else mantissa
    return f"{mantissa}e{int(exponent):+03d}"  # 1.6e+11: YAML 1.1 (PyYAML) needs the dot to read a float


def _yaml_scalar(value: Any) -> str:
    """One-line YAML for a value (floats always in a form PyYAML reads back as float)."""
    if isinstance(value, float):
        return _yaml_float(value)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, list) and all(isinstance(v, float) for v in value) and value:
        return "[" + ", ".join(_yaml_float(v) for v in value) + "]"
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1 << 16).strip()
    return text.removesuffix("...").strip()


def recipe_to_yaml(
    recipe: Any, header: str | None = None, changed_only: bool = False, notes: dict[str, str] | None = None
) -> str:
    """The recipe as YAML with each field's help as a comment above it (`yaml.safe_load` reads it back).

    `changed_only`: only the keys whose value differs from the schema's default (and the sections holding one):
    a recipe file that loads to the same recipe, the form the shipped recipes take. `notes`: {dotted key: text}
    written after a key's value as `# text` (where a number came from)."""
    out: list[str] = []
    if header:
        out += [f"# {line}".rstrip() for line in header.strip().splitlines()] + [""]

    def emit(obj: Any, indent: str, prefix: str = "") -> None:
        cls = type(obj)
        hints, helps = typing.get_type_hints(cls), field_help(cls)
        default = cls() if changed_only else None
        for f in dataclasses.fields(cls):
            value = getattr(obj, f.name)
            if changed_only and value == getattr(default, f.name):
                continue
            if dataclasses.is_dataclass(hints[f.name]):
                if out and out[-1]:
                    out.append("")
                doc = (hints[f.name].__doc__ or "").strip()
                if doc:
                    out.append(f"{indent}# {doc}")
                out.append(f"{indent}{f.name}:")
                emit(value, indent + "  ", f"{prefix}{f.name}.")
                continue
            # no break after a hyphen: the comment lines joined by spaces must give the help back
            for wrapped in textwrap.wrap(helps.get(f.name, ""), 100 - len(indent), break_on_hyphens=False):
                out.append(f"{indent}# {wrapped}")
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                out.append(f"{indent}{f.name}:")  # a list of mappings: one per line
                out.extend(f"{indent}  - {_yaml_scalar(v)}" for v in value)
            else:
                note = (notes or {}).get(prefix + f.name)
                out.append(f"{indent}{f.name}: {_yaml_scalar(value)}" + (f"  # {note}" if note else ""))

    emit(recipe, "")
    return "\n".join(out) + "\n"


def unknown_keys(data: Any, cls: type, prefix: str = "") -> list[str]:
    """The dotted keys of a recipe mapping (as `yaml.safe_load` reads a file) that are no field of recipe class
    `cls`, section by section (a section's unknown keys, not the section); `["."]` when `data` is no mapping.
    What tells which schema a recipe file is written for: its keys, never its values."""
    if not isinstance(data, dict):
        return [prefix or "."]
    hints = typing.get_type_hints(cls)
    unknown = []
    for key, value in data.items():
        if key not in hints:
            unknown.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(hints[key]) and value is not None:
            unknown += unknown_keys(value, hints[key], f"{prefix}{key}.")
    return unknown


__all__ = [
    "cli_args",
    "command_main",
    "field_help",
    "iter_fields",
    "load_recipe",
    "parse_recipe",
    "recipe_from_cli",
    "recipe_parser",
    "recipe_to_yaml",
    "to_dict",
    "unknown_keys",
]
