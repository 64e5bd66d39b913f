"""`ernie-finetune`: fine-tune from a YAML recipe with `--key value` overrides.

ernie-finetune RECIPE.yaml [--section.key VALUE | --key VALUE ...] [--print_config]
ernie-finetune recipes/finetune/sentiment_lora.yaml --train.output_dir outputs/senta
ernie-finetune --task token_classification --train_file msra.bmes --use_crf true --model_name_or_path ernie-zoo-mini-zh
ernie-finetune merge ADAPTER_DIR OUTPUT_DIR     # fold a LoRA-style adapter into a plain model directory
ernie-finetune ensemble OUTPUT_DIR TAGGER_DIR TAGGER_DIR [...] [--int8]   # CRF taggers as one model
"""

from __future__ import annotations

import json
import logging
import sys

from jsonargparse import ArgumentError, ArgumentParser

from ernie_zoo.parallel.distributed import finish_distributed
from ernie_zoo.recipe_cli import recipe_from_cli

from .args import FinetuneArgs, flat_aliases
from .methods import methods_help


def main(argv: list[str] | None = None) -> int:
    """Console script; returns the exit status (2 for bad arguments or data)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("merge", "ensemble"):
        return _export_command(argv[0], argv[1:])
    description = f"{__doc__}\n{methods_help()}\n"  # the methods registered now, a user's own included
    args = recipe_from_cli(argv or ["--help"], FinetuneArgs, "ernie-finetune", description, flat_aliases())
    if isinstance(args, int):  # --help, --print_config or an error
        return args
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .run import run_finetune

    try:
        result = run_finetune(args)
    except (OSError, ValueError, TypeError, FloatingPointError) as e:
        print(f"ernie-finetune: error: {e}", file=sys.stderr)
        return 2
    finish_distributed()
    if "task" not in result:  # a DeepSpeed rank other than 0: rank 0 evaluates, exports and reports
        return 0
    summary = {k: result[k] for k in ("task", "method", "trainable_fraction", "steps", "best_step")}
    for split in ("dev", "test"):
        if split in result:
            summary[split] = {k: v for k, v in result[split].items() if isinstance(v, (int, float))}
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    print(f"model: {args.train.output_dir}  (all scores: {args.train.output_dir}/eval_results.json)")
    return 0


def _export_command(name: str, argv: list[str]) -> int:
    """`merge ADAPTER_DIR OUTPUT_DIR` or `ensemble OUTPUT_DIR TAGGER_DIR TAGGER_DIR [...] [--int8]`."""
    from .export import build_ensemble, merge_adapter

    command = merge_adapter if name == "merge" else build_ensemble
    parser = ArgumentParser(prog=f"ernie-finetune {name}", description=command.__doc__, exit_on_error=False)
    if name == "merge":
        parser.add_argument("adapter_dir", help="an ernie-finetune output directory or its adapter/")
    parser.add_argument("output_dir", help="the directory to write (atomically)")
    if name == "ensemble":
        parser.add_argument("tagger_dirs", nargs="+", help="two or more fine-tuned CRF tagger directories")
        parser.add_argument(
            "--int8", action="store_true", help="store the weights as int8 rows (about half of fp16)"
        )
    try:
        args = vars(parser.parse_args(argv))
        out = command(**args)
    except (ArgumentError, ValueError, OSError) as e:
        print(f"ernie-finetune {name}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if name == "merge":
        print(f"merged model written to {out}")
    else:
        size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
        print(f"ensemble of {len(args['tagger_dirs'])} taggers written to {out} ({size / 1e6:.1f} MB)")
    return 0


def console_main(argv: list[str] | None = None) -> int:
    """Entry point of `ernie-finetune` (and `python -m ernie_zoo.finetune.cli`): `main` with any error as one
    line (`--debug`: the traceback)."""
    from ernie_zoo.utils import run_console

    return run_console("ernie-finetune", main, argv)


if __name__ == "__main__":
    sys.exit(console_main())
