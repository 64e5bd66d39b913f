"""`ernie-finetune` console script; the fine-tuning code lives in `ernie_zoo.finetune`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ernie-finetune` (see `ernie_zoo.finetune.cli`); any error is one line (`--debug`: traceback)."""
    from ernie_zoo.finetune.cli import main as finetune_main
    from ernie_zoo.utils import run_console

    return run_console("ernie-finetune", finetune_main, argv)


if __name__ == "__main__":
    sys.exit(main())
