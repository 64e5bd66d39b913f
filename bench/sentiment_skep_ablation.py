"""Issue #19 ablations on dev: SKEP objectives on vs off, silver general-domain labels on vs off, and the sentiment
lexicon as input bits on vs off.

Each arm is fine-tuned the same way (recipes/experiments/sentiment-*.yaml and
recipes/experiments/sentiment-lexicon-skep-seed3.yaml: 3 epochs, lr 3e-4, batch 32, max_length 160, checkpoint chosen
on the multi-domain dev) with two seeds; this script scores every run's exported model with
`Taskflow("sentiment_analysis", task_path=..., precision="fp32")` on the multi-domain dev (per domain) and on
the review dev split, and writes per-run numbers, each arm's mean and its seeds' spread. Dev only: no test
split is read. Runs not finished yet are listed under ``missing``.

    SKEP on  + silver:  recipes/experiments/sentiment-silver-skep.yaml,  -skep-seed7.yaml  (from pretrain-skep-s7)
    SKEP off + silver:  recipes/experiments/sentiment-silver-base.yaml,  -base-seed7.yaml  (from the shipped base)
    SKEP off, reviews:  recipes/experiments/sentiment-reviews-base.yaml, -base-seed7.yaml  (no silver sentences)
    candidates:         recipes/experiments/sentiment-skep.yaml, -skep-seed7.yaml
                        (SKEP on, silver2: twice the silver)
                        recipes/experiments/sentiment-frames-skep.yaml, recipes/experiments/sentiment-frames-skep-seed7.yaml
                        (SKEP on, silver + framed sentences)
    lexicon input:      recipes/experiments/sentiment-lexicon-skep.yaml, -skep-seed7.yaml (the same as the
                        frames runs, plus the sentiment lexicon's bits as input: data.lexicon), and -skep-seed3.yaml
                        (a third seed, no frames run to pair it with)
    turn frames:        recipes/experiments/sentiment-turns-seed3.yaml, -seed7.yaml (the lexicon runs' data plus
                        sentences whose turn decides, 本来担心会很{n}，结果挺{p}的。, and negated negative adjectives,
                        一点也不{n}。: sentiment_silver.py --turns), compared with the lexicon runs of the same seeds

    python bench/sentiment_skep_ablation.py     # ~1 min per run on one thread

The two candidates not shipped (silver2, turn frames) have their recipes in git history only
(`git show 5a6af2f:recipes/experiments/sentiment-turns-seed3.yaml`; recipes/experiments/README.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench/results/sentiment_skep_ablation.json"
ARMS = {
    "skep_on_silver": ("sentiment-silver-skep", "sentiment-silver-skep-seed7"),
    "skep_off_silver": ("sentiment-silver-base", "sentiment-silver-base-seed7"),
    "skep_off_reviews_only": ("sentiment-reviews-base", "sentiment-reviews-base-seed7"),
    # other candidates for shipping (not part of either ablation), SKEP on: twice the silver sentences; the silver
    # sentences plus framed sentences (太{w}了！ ...)
    "skep_on_silver2": ("sentiment-skep", "sentiment-skep-seed7"),
    "skep_on_silver_frames": ("sentiment-frames-skep", "sentiment-frames-skep-seed7"),
    # the same with the sentiment lexicon as input bits (data.lexicon; ernie_zoo.text.sentiment.FEATURES)
    "skep_on_silver_frames_lexicon": ("sentiment-lexicon-skep", "sentiment-lexicon-skep-seed7"),
    # a third seed of it (no frames run with that seed: a candidate for shipping, outside the ablation)
    "skep_on_silver_frames_lexicon_seed3": ("sentiment-lexicon-skep-seed3",),
    # the lexicon runs' data plus turn frames (sentiment_silver.py --turns), seeds 3 and 7
    "skep_on_silver_frames_lexicon_turns": ("sentiment-turns-seed3", "sentiment-turns-seed7"),
}
#: (arm, the runs of the same seeds without it, key): an effect measured on matched seeds
MATCHED = (
    (
        "skep_on_silver_frames_lexicon_turns",
        ("sentiment-lexicon-skep-seed3", "sentiment-lexicon-skep-seed7"),
        "turn_frames_effect",
    ),
)


def recipe_path(name: str) -> str:
    """The recipe of a run: the shipped one in recipes/zoo/, the others in recipes/experiments/."""
    zoo = f"recipes/zoo/{name}.yaml"
    return zoo if (REPO / zoo).is_file() else f"recipes/experiments/{name}.yaml"


def score_run(run_dir: Path, md_dev: list[dict], review_dev: list[dict]) -> dict:
    from ernie_zoo import Taskflow
    from ernie_zoo.evaluation.baselines import scores_by_domain
    from ernie_zoo.text.metrics import accuracy

    flow = Taskflow("sentiment_analysis", task_path=str(run_dir), precision="fp32", batch_size=64)
    md_pred = [o["label"] for o in flow([r["text"] for r in md_dev])]
    md = scores_by_domain(md_dev, md_pred)
    rv_pred = [o["label"] for o in flow([r["text"] for r in review_dev])]
    return {
        "multidomain_dev_macro_f1": md["overall"]["macro_f1"],
        "multidomain_dev_domains": {d: b["macro_f1"] for d, b in md["domains"].items()},
        "review_dev_accuracy": accuracy([r["label"] for r in review_dev], rv_pred),
    }


def summarise(runs: list[dict]) -> dict:
    def stat(values: list[float]) -> dict:
        return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}

    domains = runs[0]["multidomain_dev_domains"]
    return {
        "seeds": len(runs),
        "multidomain_dev_macro_f1": stat([r["multidomain_dev_macro_f1"] for r in runs]),
        "domains": {d: stat([r["multidomain_dev_domains"][d] for r in runs]) for d in domains},
        "review_dev_accuracy": stat([r["review_dev_accuracy"] for r in runs]),
    }


def effect(arm: dict, base: dict) -> dict:
    """`arm`'s mean scores less `base`'s (two `summarise` results): overall, review dev, per domain."""
    return {
        "multidomain_dev_macro_f1": arm["multidomain_dev_macro_f1"]["mean"]
        - base["multidomain_dev_macro_f1"]["mean"],
        "review_dev_accuracy": arm["review_dev_accuracy"]["mean"] - base["review_dev_accuracy"]["mean"],
        "domains": {d: arm["domains"][d]["mean"] - base["domains"][d]["mean"] for d in arm["domains"]},
    }


def main(argv: list[str] | None = None) -> None:
    import torch

    from ernie_zoo.data.labelled import load_split
    from ernie_zoo.evaluation.baselines import MULTIDOMAIN_DIR, load_sentiment_multidomain
    from ernie_zoo.utils import atomic_write_json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=REPO / "runs/zoo", help="where the recipes' output_dirs are")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    md_dev = load_sentiment_multidomain(MULTIDOMAIN_DIR / "dev.jsonl")
    review_dev = load_split("sentiment", "dev")
    result: dict = {
        "command": "python bench/sentiment_skep_ablation.py",
        "protocol": __doc__.split("\n\n")[1].replace("\n", " "),
        "torch_threads": args.threads,
        "runs": {},
        "arms": {},
        "missing": [],
    }
    for arm, names in ARMS.items():
        done = []
        for name in names:
            run_dir = args.runs / name
            if not (run_dir / "model.safetensors").is_file():
                result["missing"].append(name)
                continue
            result["runs"][name] = {
                "arm": arm,
                "recipe": recipe_path(name),
                **score_run(run_dir, md_dev, review_dev),
            }
            done.append(result["runs"][name])
            print(name, json.dumps(result["runs"][name]))
        if done:
            result["arms"][arm] = summarise(done)
    arms = result["arms"]
    for a, b, key in (
        ("skep_on_silver", "skep_off_silver", "skep_effect"),
        ("skep_off_silver", "skep_off_reviews_only", "silver_effect"),
        ("skep_on_silver_frames_lexicon", "skep_on_silver_frames", "lexicon_input_effect"),
    ):
        if a in arms and b in arms:
            result[key] = effect(arms[a], arms[b])
    for arm, names, key in MATCHED:
        if arm in arms and all(n in result["runs"] for n in names):
            base = summarise([result["runs"][n] for n in names])
            result[key] = {"against": list(names), **effect(arms[arm], base)}
    atomic_write_json(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("runs",)}, indent=2))


if __name__ == "__main__":
    main()
