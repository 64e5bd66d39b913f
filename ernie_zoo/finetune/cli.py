"""`ernie-finetune`: fine-tune from a YAML recipe with `--key value` overrides.

ernie-finetune recipes/finetune/sentiment_lora.yaml --train.output_dir outputs/senta
ernie-finetune --task token_classification --train_file msra.bmes --use_crf true --model_name_or_path ernie-zoo-mini-zh
ernie-finetune merge ADAPTER_DIR OUTPUT_DIR     # fold a LoRA-style adapter into a plain model directory
ernie-finetune ensemble OUTPUT_DIR TAGGER_DIR TAGGER_DIR [...] [--int8]   # CRF taggers as one model
"""

from __future__ import annotations

import json
import logging
import sys

from ernie_zoo.training.recipe import parse_cli

from .args import FinetuneArgs, build_args, dotted_key, dump_recipe, format_help


def _dotted_argv(argv: list[str]) -> list[str]:
    """Rewrite `--flat_key` tokens as `--section.flat_key` so parse_cli knows their types."""
    out = []
    for token in argv:
        # `--resume` stays flat: parse_cli reads it alone as resume=latest (build_args maps it to train.resume).
        if token.startswith("--") and token not in ("--help", "--print-recipe", "--resume"):
            key, eq, value = token[2:].partition("=")
            token = f"--{dotted_key(key.replace('-', '_'))}{eq}{value}"
        out.append(token)
    return out


def main(argv: list[str] | None = None) -> int:
    """Console script; returns the exit status (2 for bad arguments or data)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "merge":
        if len(argv) != 3:
            print(
                "ernie-finetune: error: usage: ernie-finetune merge ADAPTER_DIR OUTPUT_DIR", file=sys.stderr
            )
            return 2
        from .export import merge_adapter

        try:
            print(f"merged model written to {merge_adapter(argv[1], argv[2])}")
        except (ValueError, OSError) as e:
            print(f"ernie-finetune: error: {e}", file=sys.stderr)
            return 2
        return 0
    if argv and argv[0] == "ensemble":
        dirs = [a for a in argv[1:] if a != "--int8"]
        if len(dirs) < 3 or any(a.startswith("--") for a in dirs):
            print(
                "ernie-finetune: error: usage: ernie-finetune ensemble OUTPUT_DIR TAGGER_DIR TAGGER_DIR [...] [--int8]",
                file=sys.stderr,
            )
            return 2
        from .export import build_ensemble

        try:
            out = build_ensemble(dirs[1:], dirs[0], int8="--int8" in argv)
        except (ValueError, OSError) as e:
            print(f"ernie-finetune: error: {e}", file=sys.stderr)
            return 2
        size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
        print(f"ensemble of {len(dirs) - 1} taggers written to {out} ({size / 1e6:.1f} MB)")
        return 0
    try:
        path, overrides, flags = parse_cli(_dotted_argv(argv), cls=FinetuneArgs)
        if flags["help"] or not argv:
            print(__doc__ + "\n" + format_help())
            return 0
        args = build_args(path, overrides)
    except (OSError, TypeError, ValueError) as e:
        print(f"ernie-finetune: error: {e}", file=sys.stderr)
        return 2
    if flags["print_recipe"]:
        print(dump_recipe(args), end="")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .loop import run_finetune

    try:
        result = run_finetune(args)
    except (OSError, ValueError, TypeError, FloatingPointError) as e:
        print(f"ernie-finetune: error: {e}", file=sys.stderr)
        return 2
    if "task" not in result:  # a DeepSpeed rank other than 0: rank 0 evaluates, exports and reports
        return 0
    summary = {k: result[k] for k in ("task", "method", "trainable_fraction", "steps", "best_step")}
    for split in ("dev", "test"):
        if split in result:
            summary[split] = {k: v for k, v in result[split].items() if isinstance(v, (int, float))}
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    print(f"model: {args.train.output_dir}  (all scores: {args.train.output_dir}/eval_results.json)")
    return 0


def console_main(argv: list[str] | None = None) -> int:
    """Entry point of `ernie-finetune` (and `python -m ernie_zoo.finetune.cli`): `main` with any error as one
    line (`--debug`: the traceback)."""
    from ernie_zoo.utils import run_console

    return run_console("ernie-finetune", main, argv)


if __name__ == "__main__":
    sys.exit(console_main())
