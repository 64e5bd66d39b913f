"""`ernie-zoo consolidate CHECKPOINT_DIR OUT_DIR`: a sharded checkpoint of the DeepSpeed backend (ZeRO stage
0-3, optionally tensor-parallel) or of the pipeline backend (stages, optionally tensor-parallel) -> a plain `from_pretrained` directory (config.json, model.safetensors,
tokenizer files), written atomically and checked by loading it with AutoModelForMaskedLM (a decoder: AutoModelForCausalLM).

    ernie-zoo consolidate runs/ernie-100b/checkpoint-20000 models/ernie-100b --dtype bf16
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal


@dataclass
class Args:
    """Turn a sharded checkpoint into a from_pretrained directory."""

    checkpoint_dir: str
    """A checkpoint-<step> directory with zero/rank<N> shards (deepspeed) or pipeline/pp<P>-tp<T> shards."""
    out_dir: str
    """The from_pretrained directory to write (atomically)."""
    tokenizer: str = "auto"
    """Tokenizer directory to include; auto: the checkpoint's, else <run dir>/tokenizer."""
    no_tokenizer: bool = False
    """Write the model files only."""
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Weights dtype (fp32: the masters)."""
    overwrite: bool = False
    """Replace OUT_DIR if it exists."""


def run(args: Args, argv: list[str]) -> int:
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
