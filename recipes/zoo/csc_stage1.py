"""Export stage 1 of ernie-zoo-mini-csc as the model directory stage 2 starts from.

recipes/zoo/csc.yaml was stopped at step 1200 of its 2,400 (dev sentence F1 0.241 / 0.265 / 0.287 at steps 400 /
800 / 1200: too slow a climb for the session's budget); its newest checkpoint holds the trained weights only
(trainable.safetensors). This writes base weights + those weights, the tokenizer and the confusion sets to
runs/zoo/csc/stage1-step1200, which recipes/zoo/csc-stage2.yaml names as its model:

    python recipes/zoo/csc_stage1.py [--checkpoint runs/zoo/csc/checkpoints/checkpoint-1200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from safetensors.torch import load_file

from ernie_zoo.models.correction import ErnieZooForSpellingCorrection
from ernie_zoo.text.confusion import ConfusionSets
from ernie_zoo.tokenization import ErnieZooTokenizerFast

BASE = "ernie_zoo/zoo/ernie-zoo-mini-zh"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, default=Path("runs/zoo/csc/checkpoints/checkpoint-1200"))
    p.add_argument(
        "--confusion-sets", type=Path, default=Path.home() / ".cache/ernie_zoo/csc/confusion_sets.json"
    )
    p.add_argument("--out", type=Path, default=Path("runs/zoo/csc/stage1-step1200"))
    args = p.parse_args()
    model = ErnieZooForSpellingCorrection.from_pretrained(BASE)
    missing, unexpected = model.load_state_dict(
        load_file(str(args.checkpoint / "trainable.safetensors")), strict=False
    )
    if unexpected or any(
        not k.endswith(("_ids", "stroke_counts", "decoder.weight", "decoder.bias")) for k in missing
    ):
        raise SystemExit(f"checkpoint does not match the model: missing {missing}, unexpected {unexpected}")
    model.config.detection_loss_weight, model.config.correction_copy_rate = 0.3, 0.25
    model.confusion_sets = ConfusionSets.load(args.confusion_sets)
    model.save_pretrained(args.out)
    ErnieZooTokenizerFast.from_pretrained(BASE).save_pretrained(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
