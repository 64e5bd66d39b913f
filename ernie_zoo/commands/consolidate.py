"""`ernie-zoo consolidate CHECKPOINT_DIR OUT_DIR`: a sharded checkpoint of the DeepSpeed backend (ZeRO-3,
optionally tensor-parallel) -> a plain `from_pretrained` directory (config.json, model.safetensors,
tokenizer files), written atomically and checked by loading it with AutoModelForMaskedLM.

    ernie-zoo consolidate runs/ernie-100b/checkpoint-20000 models/ernie-100b --dtype bf16
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint_dir", help="a checkpoint-<step> directory with zero/rank<N> shards")
    parser.add_argument("out_dir", help="the from_pretrained directory to write (atomically)")
    parser.add_argument(
        "--tokenizer",
        default="auto",
        help="tokenizer directory to include; auto (default): the checkpoint's, else <run dir>/tokenizer",
    )
    parser.add_argument("--no-tokenizer", action="store_true", help="write the model files only")
    parser.add_argument(
        "--dtype", choices=["fp32", "bf16", "fp16"], default="fp32", help="weights dtype (fp32: the masters)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it exists")


def run(args: argparse.Namespace) -> int:
    from ernie_zoo.parallel.consolidate import consolidate_checkpoint

    try:
        report = consolidate_checkpoint(
            args.checkpoint_dir,
            args.out_dir,
            tokenizer=None if args.no_tokenizer else args.tokenizer,
            dtype=args.dtype,
            overwrite=args.overwrite,
        )
    except (ValueError, FileNotFoundError) as err:
        print(f"ernie-zoo consolidate: error: {err}", file=sys.stderr)
        return 2
    check = (
        f"logits match {report['compared_with']} (max diff {report['max_logit_diff']:.3g})"
        if report["compared_with"]
        else "loaded with AutoModelForMaskedLM (no export in the checkpoint to compare with)"
    )
    print(f"wrote {args.out_dir}: {report['parameters']:,} parameters ({report['dtype']}); {check}")
    return 0
