"""Entity F1 of a mean-emission ensemble of CRF taggers (the teachers of train.distill_from, scored as one model).

    python recipes/zoo/ner_ensemble.py runs/zoo/ner-lex-3 runs/zoo/ner-s7-lex-2             # dev
    python recipes/zoo/ner_ensemble.py runs/zoo/ner-lex-3 runs/zoo/ner-s7-lex-2 --split test

Each tagger computes its emissions on the same encoded split (they must share vocabulary, labels and, if they
read one, the entity lexicon); the ensemble decodes the mean emissions with the mean transition scores (Viterbi),
which is what the distillation loss teaches a student to imitate. The data come from --recipe (default: the
shipped tagger's recipe). Prints each tagger's entity F1 and the ensemble's.
"""

from __future__ import annotations

import argparse
import copy

import torch
from torch import nn


class MeanEmissionEnsemble(nn.Module):
    """CRF taggers as one: mean emissions, mean transitions, Viterbi; the output has `loss`, `logits` and
    `predictions` like one tagger's."""

    def __init__(self, models: list[nn.Module]):
        super().__init__()
        self.models = nn.ModuleList(models)
        self.crf = copy.deepcopy(models[0].crf)
        with torch.no_grad():
            for name, p in self.crf.named_parameters():
                p.copy_(torch.stack([dict(m.crf.named_parameters())[name] for m in models]).mean(0))

    def forward(self, **batch):
        from ernie_zoo.finetune.modeling import (
            CRFTokenClassifierOutput,
            default_crf_mask,
            model_inputs,
            viterbi_predictions,
        )

        outs = [m(**model_inputs(m, batch)) for m in self.models]
        emissions = torch.stack([o.logits for o in outs]).mean(0)
        mask = batch.get("crf_mask")
        mask = default_crf_mask(batch["attention_mask"]) if mask is None else mask.bool()
        predictions = viterbi_predictions(self.crf, emissions, mask)
        loss = sum(o.loss for o in outs) / len(outs) if outs[0].loss is not None else None
        return CRFTokenClassifierOutput(loss=loss, logits=emissions, predictions=predictions)


def main(argv: list[str] | None = None) -> None:
    from ernie_zoo.finetune import build_args, load_finetuned
    from ernie_zoo.finetune.distill import check_teacher
    from ernie_zoo.finetune.tasks import make_task

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="fine-tuned CRF tagger directories (two or more)")
    ap.add_argument("--recipe", default="recipes/zoo/ner-lex-3.yaml", help="the recipe whose data are scored")
    ap.add_argument("--split", default="dev", choices=["dev", "test"])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if len(args.models) < 2:
        ap.error("an ensemble needs at least two models")
    torch.set_num_threads(args.threads)
    task = make_task(build_args(args.recipe, {}))
    task.read()
    loaded = [load_finetuned(path) for path in args.models]
    tokenizer = loaded[0][1]
    for path, (model, tok) in zip(args.models, loaded):
        try:  # the checks a distillation teacher passes: same input ids, labels and entity lexicon
            check_teacher(path, model, tok, tokenizer, task, "ensemble member")
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
    examples = task.splits[args.split]
    features = task.encode(examples, tokenizer)

    def f1(model) -> float:
        with torch.no_grad():
            return task.evaluate(model, features, examples, tokenizer, 64, torch.device("cpu"))["f1"]

    for path, (model, _) in zip(args.models, loaded):
        print(f"{path}: {args.split} entity F1 {f1(model):.4f}")
    ensemble = MeanEmissionEnsemble([model for model, _ in loaded]).eval()
    print(f"mean-emission ensemble of {len(loaded)}: {args.split} entity F1 {f1(ensemble):.4f}")


if __name__ == "__main__":
    main()
