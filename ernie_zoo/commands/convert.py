"""`ernie-zoo convert SRC DST`: an ERNIE 3.0 / BERT-zh transformers directory -> an ErnieZoo directory."""

from __future__ import annotations

import argparse

HEADS = {
    "base": "ErnieZooModel",
    "mlm": "ErnieZooForMaskedLM",
    "seq-cls": "ErnieZooForSequenceClassification",
    "token-cls": "ErnieZooForTokenClassification",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "src", help="directory with config.json, model.safetensors (or pytorch_model.bin), vocab.txt"
    )
    parser.add_argument("dst", help="output directory (written atomically)")
    parser.add_argument("--head", choices=sorted(HEADS), default="mlm")
    parser.add_argument("--fusion", choices=["add", "concat"], default="add")
    parser.add_argument("--no-pinyin", action="store_true")
    parser.add_argument("--no-radical", action="store_true")
    parser.add_argument("--no-strokes", action="store_true")
    parser.add_argument("--stroke-sequence", action="store_true")


def run(args: argparse.Namespace) -> int:
    import ernie_zoo.models as models
    from ernie_zoo.models.convert import load_pretrained_checkpoint
    from ernie_zoo.utils import atomic_directory

    model, tokenizer = load_pretrained_checkpoint(
        args.src,
        model_class=getattr(models, HEADS[args.head]),
        feature_fusion=args.fusion,
        use_pinyin=not args.no_pinyin,
        use_radical=not args.no_radical,
        use_strokes=not args.no_strokes,
        use_stroke_sequence=args.stroke_sequence,
    )
    with atomic_directory(args.dst) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    print(
        f"wrote {args.dst} ({type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters)"
    )
    return 0
