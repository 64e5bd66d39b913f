"""Entity F1 of a mean-emission ensemble of CRF taggers (the teachers of train.distill_from, scored as one model).

    python recipes/experiments/ner_ensemble.py runs/zoo/ner-lex-3 runs/zoo/ner-s7-lex-2             # dev
    python recipes/experiments/ner_ensemble.py runs/zoo/ner-lex-3 runs/zoo/ner-s7-lex-2 --split test
    python recipes/experiments/ner_ensemble.py runs/zoo/ner-lex-3 runs/zoo/ner-kd runs/zoo/ner-s7-lex-3 --pairs

Each tagger computes its emissions on the same encoded split (they must share vocabulary, labels and, if they
read one, the entity lexicon); the ensemble (`ErnieZooEnsembleForTokenClassificationCRF.from_members`, what
recipes/zoo/ship.py ships) decodes the mean emissions with the mean transition scores (Viterbi), which is what
the distillation loss teaches a student to imitate. The data come from --recipe (default: tagger A's last recipe).
Prints each tagger's entity F1 and the ensemble's; with --pairs, each tagger's and every pair's, best first (each
tagger's emissions are computed once and replayed for its pairs).
"""

from __future__ import annotations

import argparse
import itertools

import torch
from torch import nn


class Replay(nn.Module):
    """A tagger's emissions on one evaluation pass, recorded, then replayed in the same order (`--pairs` scores
    every pair without recomputing a member's emissions)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.config, self.crf = model, model.config, model.crf
        self.emissions: list[torch.Tensor] = []
        self.calls = 0

    def forward(self, **batch):
        out = self.model(**batch)
        self.emissions.append(out.logits)
        return out

    def replay(self) -> torch.Tensor:
        emissions = self.emissions[self.calls % len(self.emissions)]
        self.calls += 1
        return emissions


class MeanOfReplays(nn.Module):
    """What `ErnieZooEnsembleForTokenClassificationCRF` of the replayed taggers computes, from their recordings."""

    def __init__(self, replays: list[Replay]):
        super().__init__()
        self.replays = replays
        from ernie_zoo.models.ensemble import mean_crf

        self.crf = mean_crf([r.crf for r in replays])

    def forward(self, attention_mask=None, crf_mask=None, labels=None, **_):
        from ernie_zoo.models.crf_tagger import CRFTokenClassifierOutput, crf_outputs

        emissions = torch.stack([r.replay() for r in self.replays]).mean(0)
        loss, predictions = crf_outputs(self.crf, emissions, attention_mask, crf_mask, labels, False)
        return CRFTokenClassifierOutput(loss=loss, logits=emissions, predictions=predictions)


def main(argv: list[str] | None = None) -> None:
    from ernie_zoo.finetune import build_args, load_finetuned
    from ernie_zoo.finetune.distill import check_teacher
    from ernie_zoo.finetune.objectives import make_objective
    from ernie_zoo.models.ensemble import ErnieZooEnsembleForTokenClassificationCRF

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="fine-tuned CRF tagger directories (two or more)")
    ap.add_argument("--recipe", default="recipes/zoo/ner-lex-3.yaml", help="the recipe whose data are scored")
    ap.add_argument("--split", default="dev", choices=["dev", "test"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pairs", action="store_true", help="score every pair of the models (sorted by F1)")
    args = ap.parse_args(argv)
    if len(args.models) < 2:
        ap.error("an ensemble needs at least two models")
    torch.set_num_threads(args.threads)
    task = make_objective(build_args(args.recipe, {}))
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

    if args.pairs:
        replays = [Replay(model.eval()) for model, _ in loaded]
        for path, replay in zip(args.models, replays):
            print(f"{path}: {args.split} entity F1 {f1(replay):.4f}", flush=True)
        scores = [
            (f1(MeanOfReplays([replays[i], replays[j]])), args.models[i], args.models[j])
            for i, j in itertools.combinations(range(len(replays)), 2)
        ]
        for score, a, b in sorted(scores, reverse=True):
            print(f"pair {a} + {b}: {args.split} entity F1 {score:.4f}")
        return
    for path, (model, _) in zip(args.models, loaded):
        print(f"{path}: {args.split} entity F1 {f1(model):.4f}")
    ensemble = ErnieZooEnsembleForTokenClassificationCRF.from_members([model for model, _ in loaded]).eval()
    print(f"mean-emission ensemble of {len(loaded)}: {args.split} entity F1 {f1(ensemble):.4f}")


if __name__ == "__main__":
    main()
