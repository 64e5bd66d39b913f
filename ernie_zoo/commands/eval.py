"""`ernie-zoo eval`: evaluate the shipped zoo models next to the baselines; write the results and the cards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ernie_zoo.data.labelled import DEFAULT_DATASETS


@dataclass
class Args:
    """Evaluate zoo models on their test splits (through Taskflow, as users run them) next to the baselines of
    bench/results/baselines.json; write the results JSON and regenerate the model cards from it."""

    models: list[str]
    """NAME[=DIR] ...: models to evaluate (none: all shipped, ernie_zoo.evaluation.zoo.ZOO_MODELS); NAME=DIR
    evaluates a directory under that name (e.g. before shipping it)."""
    datasets: Path = DEFAULT_DATASETS
    """Prepared labelled sets."""
    baselines: Path = Path("bench/results/baselines.json")
    """Baseline results (ernie-zoo baselines)."""
    multidomain_baselines: Path = Path("bench/results/sentiment_multidomain.json")
    """Sentiment baselines on the multi-domain dev/test sets, shown next to a sentiment model (used if the file
    exists; python -m ernie_zoo.evaluation.baselines --tasks sentiment_multidomain)."""
    out: Path = Path("bench/results/zoo_eval.json")
    """The results JSON to write."""
    cards: Path | None = None
    """Also write <model>.md cards here and README.md into each evaluated model directory."""
    ablation: Path = Path("bench/results/zoo_ablation.json")
    """Ablation results for the base model's card (used if the file exists)."""
    audit: Path = Path("bench/results/sentiment_error_audit.json")
    """Hand audit of the sentiment model's dev errors, quoted in its card when made on the same weights (used if
    the file exists)."""
    threads: int | None = None
    """Torch CPU threads."""
    show: bool = False
    """Evaluate nothing: print the summary table of the existing --out file (what the README quotes); with
    --cards, regenerate the cards from that file."""
    merge: bool = False
    """Keep the other models' entries of an existing --out file (evaluate a few models again)."""


def run(args: Args, argv: list[str]) -> int:
    import json
    import logging
    import shlex

    import torch

    from ernie_zoo.evaluation.zoo import ZOO_MODELS, evaluate_zoo
    from ernie_zoo.taskflow.models import ZOO_DIR
    from ernie_zoo.utils import atomic_write_json

    if args.show:
        results = json.loads(args.out.read_text(encoding="utf-8"))
        if args.cards is not None:
            dirs = {}
            for n, r in results["models"].items():
                where = r.get("model_dir")
                dirs[n] = (
                    None if not where else ZOO_DIR / n if where.startswith("ernie_zoo/zoo/") else Path(where)
                )
            _write_cards(args, results, dirs)
        print(summary_table(results))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    models: dict[str, Path] = {}
    for item in args.models or list(ZOO_MODELS):
        name, _, directory = item.partition("=")
        if name not in ZOO_MODELS:
            raise SystemExit(f"ernie-zoo eval: unknown model {name!r}; expected one of {list(ZOO_MODELS)}")
        path = Path(directory) if directory else ZOO_DIR / name
        if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
            raise SystemExit(
                f"ernie-zoo eval: {path} is not a model directory (no config.json) nor an adapter directory "
                "(no adapter_config.json)"
            )
        models[name] = path
    results = evaluate_zoo(
        models,
        datasets=args.datasets,
        baselines_file=args.baselines,
        multidomain_baselines_file=args.multidomain_baselines,
        results_file=args.out,  # the NER default's score beside an extraction model's, when this run skips it
    )
    command = "ernie-zoo eval " + shlex.join(argv)
    for name, path in models.items():
        results["models"][name]["command"] = command  # per model: --merge keeps the other models' entries
        shipped = path.resolve().parent == ZOO_DIR.resolve()
        results["models"][name]["model_dir"] = f"ernie_zoo/zoo/{name}" if shipped else str(path)
    if args.merge and args.out.is_file():
        old = json.loads(args.out.read_text(encoding="utf-8"))
        # what this run did not measure (the datasets' hashes of a run of self-contained models only) is kept
        results = {**old, **results, "models": {**old.get("models", {}), **results["models"]}}
    atomic_write_json(args.out, results)
    print(f"results: {args.out}")
    if args.cards is not None:
        _write_cards(args, results, models)
    print(summary_table({"models": {n: r for n, r in results["models"].items() if n in models}}))
    return 0


def _write_cards(args: Args, results: dict, models: dict) -> None:
    """`<--cards>/<name>.md` for each of `models` ({name: directory}), and README.md in the directory when it
    exists; the base model's card includes the ablation file when there is one."""
    import json

    from ernie_zoo.evaluation.cards import render_cards
    from ernie_zoo.utils import atomic_write_text

    ablation = json.loads(args.ablation.read_text(encoding="utf-8")) if args.ablation.is_file() else None
    audit = json.loads(args.audit.read_text(encoding="utf-8")) if args.audit.is_file() else None
    chosen = {"models": {n: results["models"][n] for n in models}}
    for name, text in render_cards(chosen, ablation, audit).items():
        atomic_write_text(args.cards / f"{name}.md", text)
        if models[name] is not None and models[name].is_dir():
            atomic_write_text(models[name] / "README.md", text)
        print(f"card: {args.cards / (name + '.md')}")


def summary_table(results: dict) -> str:
    """One row per model: its test metric next to the best baseline on the same split."""
    rows = [("model", "test split", "metric", "model", "best baseline")]
    for name, r in results["models"].items():
        if r["kind"] == "sentiment":
            best = max(r["baselines"].items(), key=lambda kv: kv[1]["accuracy"])
            rows.append(
                (
                    name,
                    "reviews (ours)",
                    "accuracy",
                    f"{r['test']['accuracy']:.4f}",
                    f"{best[1]['accuracy']:.4f} ({best[0]})",
                )
            )
            md = (r.get("multidomain") or {}).get("test")
            if md:
                from ernie_zoo.evaluation.cards import multidomain_baselines

                others = multidomain_baselines(r)
                best_md = max(
                    others.items(), key=lambda kv: kv[1]["test"]["overall"]["macro_f1"], default=None
                )
                rows.append(
                    (
                        name,
                        "multi-domain test",
                        "macro-F1",
                        f"{md['overall']['macro_f1']:.4f}",
                        "-"
                        if best_md is None
                        else f"{best_md[1]['test']['overall']['macro_f1']:.4f} ({best_md[0]})",
                    )
                )
        elif r["kind"] == "ner":
            best = max(r["baselines"].items(), key=lambda kv: kv[1]["micro"]["f1"])
            rows.append(
                (
                    name,
                    "MSRA test",
                    "micro-F1",
                    f"{r['test']['micro']['f1']:.4f}",
                    f"{best[1]['micro']['f1']:.4f} ({best[0]})",
                )
            )
        elif r["kind"] == "extraction":
            ner = r.get("ner_default")
            rows.append(
                (
                    name,
                    "MSRA test",
                    "micro-F1",
                    f"{r['test']['micro']['f1']:.4f}",
                    "-" if ner is None else f"{ner['test_micro_f1']:.4f} ({ner['model']})",
                )
            )
            rows.append(
                (name, "relation set test", "triple F1", f"{r['relations']['triples']['f1']:.4f}", "-")
            )
        elif r["kind"] == "csc":
            ngram = (r.get("baselines") or {}).get("ngram")
            rows.append(
                (
                    name,
                    "SIGHAN-2015 test",
                    "sentence F1",
                    f"{r['sighan2015_test']['sentence_f1']:.4f}",
                    "-" if ngram is None else f"{ngram['test']['sentence_f1']:.4f} (char 4-gram + confusion)",
                )
            )
        elif r["kind"] == "poetry":
            best = min(r["baselines"].items(), key=lambda kv: kv[1]["test_perplexity"])
            rows.append(
                (
                    name,
                    "poetry (ours)",
                    "perplexity",
                    f"{r['test']['perplexity']:.2f}",
                    f"{best[1]['test_perplexity']:.2f} ({best[0]})",
                )
            )
        elif r["kind"] == "generator":
            ppl = r["perplexity_per_char"]
            ngram = next(k for k in ppl if k.endswith("gram_kn"))
            rows.append(
                (
                    name,
                    "held-out modern text",
                    "ppl/char",
                    f"{ppl['generator']['all']:.2f}",
                    f"{ppl[ngram]['all']:.2f} ({ngram})",
                )
            )
            g, b = r["idioms"]["generator"], r["idioms"]["retrieval_baseline"]
            rows.append(
                (name, "held-out idioms", "char F1", f"{g['char_f1']:.4f}", f"{b['char_f1']:.4f} (retrieval)")
            )
        elif r["kind"] == "embedding":
            for test, t in r["retrieval"].items():
                metric = "precision@10" if test == "thucnews-topic" else "recall@1"
                best = max(
                    ((k, v) for k, v in t["baselines"].items() if k.startswith("bm25")),
                    key=lambda kv: kv[1][metric],
                )
                rows.append(
                    (name, test, metric, f"{t['model'][metric]:.4f}", f"{best[1][metric]:.4f} ({best[0]})")
                )
        else:
            for dom, d in r["domains"].items():
                rows.append((name, dom, "masked acc", f"{d['accuracy']:.4f}", "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
