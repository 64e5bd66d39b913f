"""Greedy "model soup" (Wortsman et al. 2022) of fine-tunings that share their initialisation, chosen on dev.

    python recipes/experiments/soup.py recipes/experiments/sentiment-tapt-s4.yaml recipes/experiments/sentiment-tapt-s4-b.yaml \\
        --out runs/zoo/sentiment-soup-s4

Each recipe names a finished ernie-finetune run (its output_dir holds the exported full model). The runs must
fine-tune the same base model on the same data and task. The ingredients are sorted by their dev score (the
task's own metric, computed the way ernie-finetune computes it); the soup starts as the best one, and each next
ingredient is averaged in (uniform weights over the ingredients kept) only where the dev score does not go down.
The test split is scored once, on the final soup, for the record. Written to --out (one rename, never
half-written): the averaged model, its tokenizer and soup.json with every dev score and the ingredients kept.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path


def average(states: list[dict]) -> dict:
    """Element-wise mean of state dicts with the same keys and shapes (non-float tensors from the first)."""
    keys = list(states[0])
    for s in states[1:]:
        if list(s) != keys or any(s[k].shape != states[0][k].shape for k in keys):
            raise ValueError("soup ingredients must have the same parameters and shapes")
    out = {}
    for k in keys:
        t = states[0][k]
        out[k] = (
            sum(s[k].double() for s in states).div(len(states)).to(t.dtype) if t.is_floating_point() else t
        )
    return out


def main(argv: list[str] | None = None) -> None:
    import torch

    from ernie_zoo.finetune import build_args, load_finetuned
    from ernie_zoo.finetune.objectives import make_objective
    from ernie_zoo.utils import atomic_directory

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipes", nargs="+", help="ernie-finetune recipes of finished runs (two or more)")
    ap.add_argument("--out", type=Path, required=True, help="directory for the soup")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch_size", type=int, default=64)
    args = ap.parse_args(argv)
    if len(args.recipes) < 2:
        ap.error("a soup needs at least two recipes")
    torch.set_num_threads(args.threads)

    runs = [build_args(r, {}) for r in args.recipes]
    first = runs[0]
    for r, path in zip(runs[1:], args.recipes[1:]):
        for what, a, b in (
            ("task", r.task, first.task),
            ("model.model_name_or_path", r.model.model_name_or_path, first.model.model_name_or_path),
            ("data.train_file", r.data.train_file, first.data.train_file),
            ("data.dev_file", r.data.dev_file, first.data.dev_file),
            ("method.method", r.method.method, first.method.method),
        ):
            if a != b:
                raise SystemExit(f"{path}: {what} is {a!r}, but {args.recipes[0]} has {b!r}: not one soup")
    if first.method.method != "full":
        raise SystemExit("soups are made of full fine-tunings (method: full)")
    if first.model.model_name_or_path is None:
        raise SystemExit(
            "the runs start from random preset weights (no model.model_name_or_path): not one soup"
        )

    task = make_objective(first)
    task.read()
    if "dev" not in task.splits:
        raise SystemExit(f"{args.recipes[0]}: a soup is chosen on dev, and the recipe has no dev_file")
    models, tokenizer = [], None
    for recipe, r in zip(args.recipes, runs):
        out_dir = Path(r.train.output_dir).expanduser()
        if not (out_dir / "config.json").is_file():
            raise SystemExit(f"{recipe}: {out_dir} holds no exported model (has the run finished?)")
        model, tok = load_finetuned(out_dir)
        if tokenizer is None:
            tokenizer = tok
        elif tok.get_vocab() != tokenizer.get_vocab():
            raise SystemExit(f"{recipe}: another vocabulary than {args.recipes[0]}'s: not one soup")
        models.append((recipe, model))
    features = {
        split: task.encode(task.splits[split], tokenizer) for split in task.splits if split != "train"
    }
    metric = task.metric

    def score(model, split: str = "dev") -> dict:
        return task.evaluate(
            model, features[split], task.splits[split], tokenizer, args.batch_size, torch.device("cpu")
        )

    ingredients, dev_scores = [], []
    for recipe, model in models:
        s = score(model)
        dev_scores.append(s)
        ingredients.append({"recipe": recipe, "dev": s[metric]})
        print(f"{recipe}: dev {metric} {s[metric]:.4f}")
    order = sorted(range(len(models)), key=lambda i: -ingredients[i]["dev"])
    kept = [order[0]]
    soup, soup_scores = models[order[0]][1], dev_scores[order[0]]
    steps = []
    for i in order[1:]:
        candidate = copy.deepcopy(soup)
        candidate.load_state_dict(average([models[j][1].state_dict() for j in kept + [i]]))
        s = score(candidate)
        better = s[metric] >= soup_scores[metric]
        steps.append({"add": ingredients[i]["recipe"], "dev": s[metric], "kept": better})
        print(
            f"+ {ingredients[i]['recipe']}: soup dev {metric} {s[metric]:.4f} ({'kept' if better else 'left out'})"
        )
        if better:
            kept.append(i)
            soup, soup_scores = candidate, s
    result = {
        "metric": metric,
        "ingredients": ingredients,
        "greedy_steps": steps,
        "kept": [ingredients[i]["recipe"] for i in kept],
        "dev": soup_scores,
    }
    if "test" in features:
        result["test"] = score(soup, "test")
    with atomic_directory(args.out) as tmp:
        soup.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / "soup.json").write_text(
            json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    print(f"soup of {len(kept)}: dev {metric} {soup_scores[metric]:.4f} -> {args.out}")


if __name__ == "__main__":
    main()
