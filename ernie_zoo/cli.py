"""`ernie-zoo` command: one entry point with subcommands; each lives in its own module.

A subcommand module exposes `add_arguments(parser)` and `run(args) -> int`. Register it in `SUBCOMMANDS`
(name -> "module.path"); modules are imported only when their subcommand runs, so `--help` stays fast.
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
    "consolidate": ("ernie_zoo.commands.consolidate", "turn a sharded checkpoint into a from_pretrained dir"),
    "taskflow": ("ernie_zoo.commands.taskflow", "run a Taskflow task on text, a file or stdin"),
    "serve": ("ernie_zoo.commands.serve", "serve Taskflow tasks over HTTP with dynamic batching"),
    "baselines": (
        "ernie_zoo.commands.baselines",
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
    parser = argparse.ArgumentParser(
        prog="ernie-zoo",
        description=__doc__.splitlines()[0],
        epilog="--debug (anywhere): show the traceback of an error instead of one line",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        # Import only the selected subcommand's module to add its arguments.
        if argv and argv[0] == name:
            importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    args.argv = list(argv)  # as given, e.g. for a results file to record the command that wrote it
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
