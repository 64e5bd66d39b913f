"""The starting point of the fast NER tagger (#23): a shallow copy of one tagger of the shipped ensemble.

Takes tagger `--member` out of ernie-zoo-mini-ner (`model.member(i)`: its embeddings, character features,
entity-lexicon projection, classifier and CRF) and keeps only the encoder layers given by `--layers`, renumbered
from 0. The result is a plain `ErnieZooForTokenClassificationCRF` directory (fp32 weights, tokenizer, entity
lexicon) that `ernie-finetune` continues from (recipes/zoo/ner-fast*.yaml, distilled from the whole ensemble).

    python recipes/zoo/ner_fast_init.py --member 0 --layers 0 1 --out runs/zoo/ner-fast-init
"""

from __future__ import annotations

import argparse
import copy
import re
import shutil
import tempfile
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "ernie_zoo/zoo/ernie-zoo-mini-ner"
LAYER = re.compile(r"^ernie\.encoder\.layer\.(\d+)\.")


def shallow_tagger(ensemble, member: int, layers: list[int]):
    """Tagger `member` of `ensemble` with only encoder `layers` (in that order, renumbered 0..k-1)."""
    from ernie_zoo.models.crf_tagger import ErnieZooForTokenClassificationCRF

    full = ensemble.member(member)
    n = full.config.num_hidden_layers
    if not layers or any(not 0 <= i < n for i in layers) or len(set(layers)) != len(layers):
        raise ValueError(f"--layers must be distinct indices in [0, {n}), got {layers}")
    config = copy.deepcopy(full.config)
    config.num_hidden_layers = len(layers)
    student = ErnieZooForTokenClassificationCRF(config)
    renumber = {old: new for new, old in enumerate(layers)}
    state = {}
    for key, value in full.state_dict().items():
        m = LAYER.match(key)
        if m is None:
            state[key] = value
        elif int(m.group(1)) in renumber:
            state[f"ernie.encoder.layer.{renumber[int(m.group(1))]}.{key[m.end() :]}"] = value
    student.load_state_dict(state, strict=True)
    student.set_entity_lexicon(full.entity_lexicon)
    return student.eval()


def main(argv: list[str] | None = None) -> None:
    import torch

    from ernie_zoo.models.ensemble import ErnieZooEnsembleForTokenClassificationCRF
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=SHIPPED, help="the ensemble directory")
    ap.add_argument("--member", type=int, default=0, help="which tagger of the ensemble")
    ap.add_argument("--layers", type=int, nargs="+", default=[0, 1], help="encoder layers kept, in order")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; remove it or pick another --out")
    ensemble = ErnieZooEnsembleForTokenClassificationCRF.from_pretrained(
        str(args.source), dtype=torch.float32
    )
    if not 0 <= args.member < ensemble.config.ensemble_size:
        raise SystemExit(f"--member must be in [0, {ensemble.config.ensemble_size})")
    student = shallow_tagger(ensemble, args.member, args.layers)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.", dir=args.out.parent))
    try:
        student.save_pretrained(str(tmp))
        ErnieZooTokenizerFast.from_pretrained(str(args.source)).save_pretrained(str(tmp))
        tmp.rename(args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    params = sum(p.numel() for p in student.parameters())
    print(
        f"{args.out}: {len(args.layers)} layers {args.layers} of member {args.member}, {params / 1e6:.2f}M params"
    )


if __name__ == "__main__":
    main()
