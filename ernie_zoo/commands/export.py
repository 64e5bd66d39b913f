"""`ernie-zoo export --onnx MODEL_DIR OUT_DIR`: a model directory's encoder head as an ONNX graph for ONNX Runtime.

    ernie-zoo export --onnx ernie_zoo/zoo/ernie-zoo-mini-ner exported/ner
    ernie-zoo export --onnx ernie_zoo/zoo/ernie-zoo-mini-zh exported/features --task feature_extraction
    ernie-zoo taskflow ner --task_path exported/ner --backend onnxruntime "李明在北京大学发表讲话"

The output directory runs with `Taskflow(task, task_path=OUT_DIR, backend="onnxruntime")` and
`ernie-zoo serve --backend onnxruntime`. See docs/onnx.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Args:
    """Export a model directory's encoder head to ONNX (dynamic batch and length axes) with a manifest."""

    model_dir: str
    """A model directory (save_pretrained / ernie-finetune output, or a shipped model's directory)."""
    out_dir: str
    """The exported directory to write: new, empty, or an earlier export (written beside it and renamed into place;
    a file there is never replaced)."""
    onnx: bool = False
    """Export to ONNX (the one export format; required, so that the command says what it writes)."""
    task: str | None = None
    """The Taskflow task to export for (default: the head's: sequence classification -> sentiment_analysis, token
    classification / CRF / ensemble -> ner, masked LM -> fill_mask, spelling correction -> text_correction; a
    masked-LM directory also exports for feature_extraction)."""
    int8: bool = True
    """Also write the int8 graph (model.int8.onnx: per-token input scales, as Taskflow's torch int8 mode; run it
    with precision='int8'); --int8 false writes the fp32 graph only."""
    overwrite: bool = False
    """Replace out_dir even when it is a directory that holds something other than an earlier export (everything
    in it is deleted)."""


def run(args: Args, argv: list[str]) -> int:
    from ernie_zoo.taskflow.onnx import export_onnx, read_spec

    if not args.onnx:
        raise ValueError("say the format: ernie-zoo export --onnx MODEL_DIR OUT_DIR (ONNX is the one format)")
    out = export_onnx(args.model_dir, args.out_dir, task=args.task, int8=args.int8, overwrite=args.overwrite)
    spec = read_spec(out)
    print(f"wrote {out} ({spec['task']}, {spec['architecture']}; graphs: {', '.join(spec['graphs'])})")
    return 0
