"""`ernie-zoo` command: one entry point with subcommands; each lives in its own module.

A subcommand module exposes a dataclass `Args` (its docstring and its fields' docstrings are the `--help`; fields
without a default are positional) and `run(args, argv) -> int` (argv: the subcommand's arguments as given, for a
results file to record), and optionally `ALIASES` (other flag names -> fields). The command line is parsed by
jsonargparse as `ernie-pretrain`'s recipes are (`ernie_zoo.recipe_cli.recipe_from_cli`): `--print_config`,
`--config FILE`, `--snake_case` or `--kebab-case`. Register it in `SUBCOMMANDS` (name -> "module.path"); modules
are imported only when their subcommand runs, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ernie_zoo.utils import run_console

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, one-line help)
    "info": ("ernie_zoo.commands.info", "show presets and their exact parameter counts"),
    "convert": ("ernie_zoo.commands.convert", "load an ERNIE 3.0 / BERT-zh directory into ErnieZoo classes"),
    "prepare-data": ("ernie_zoo.commands.prepare_data", "tokenize text/jsonl and cache masking boundaries"),
    "plan": (
        "ernie_zoo.commands.plan",
        "per-GPU memory, communication and MFU plan for a recipe on a cluster",
    ),
    "export": (
        "ernie_zoo.commands.export",
        "export a model's encoder head to ONNX for the onnxruntime backend",
    ),
    "consolidate": ("ernie_zoo.commands.consolidate", "turn a sharded checkpoint into a from_pretrained dir"),
    "taskflow": ("ernie_zoo.commands.taskflow", "run a Taskflow task on text, a file or stdin"),
    "serve": ("ernie_zoo.commands.serve", "serve Taskflow tasks over HTTP with dynamic batching"),
    "baselines": (
        "ernie_zoo.evaluation.baselines",
        "run the reference baselines on the prepared labelled splits",
    ),
    "eval": (
        "ernie_zoo.commands.eval",
        "evaluate the zoo models next to the baselines; write results and cards",
    ),
}


def main(argv: list[str] | None = None) -> int:
    """Console script `ernie-zoo`: errors are one line on stderr and a non-zero exit (`--debug`: traceback)."""
    return run_console("ernie-zoo", _main, argv)


def _main(argv: list[str]) -> int:
    if not argv or argv[0] not in SUBCOMMANDS:  # no subcommand: the list of them, or an error naming them
        parser = argparse.ArgumentParser(
            prog="ernie-zoo",
            description=__doc__.splitlines()[0],
            epilog="--debug (anywhere): show the traceback of an error instead of one line",
        )
        sub = parser.add_subparsers(dest="command", required=True)
        for name, (_, help_text) in SUBCOMMANDS.items():
            sub.add_parser(name, help=help_text)
        parser.parse_args(argv)
    from ernie_zoo.recipe_cli import command_main

    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    aliases = getattr(module, "ALIASES", None)  # flag names kept from before the module was typed
    return command_main(module.Args, module.run, f"ernie-zoo {argv[0]}", module.__doc__, argv[1:], aliases)


if __name__ == "__main__":
    sys.exit(main())
