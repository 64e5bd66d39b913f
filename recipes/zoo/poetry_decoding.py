"""Choose ernie-zoo-mini-poetry's decoding defaults on DEV titles (never test) and write them to a results file.

    python recipes/zoo/poetry_decoding.py                # the shipped model, 100 dev titles
    python recipes/zoo/poetry_decoding.py --model runs/zoo/poetry-s5 --titles 50

Greedy search, as Taskflow("text_generation") runs by default, over a grid of `repetition_penalty` and
`eos_min_prob` (the end token is only taken while the model gives it at least that probability). Each setting
generates from the same dev titles through Taskflow itself and is scored with the format checks of
`ernie_zoo.evaluation.poetry.format_rates` and distinct-2 (the share of distinct character bigrams in a poem, a
repetition check). The chosen setting has the highest mean of the four format checks (line count, line length,
parallel couplets, punctuation) among settings whose distinct-2 is at least 0.9; ties go to the smaller values.
ship.py writes the chosen values into the shipped model's generation_config.json. Output:
bench/results/poetry_decoding_dev.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

CHECKS = ("line_count_ok", "line_length_ok", "couplets_parallel", "punctuation_ok")
PENALTIES = (1.0, 1.2)
MIN_PROBS = (0.0, 0.1, 0.2, 0.3, 0.5)
MIN_DISTINCT2 = 0.9


def choose(rows: list[dict]) -> dict:
    """The row with the best mean format score among rows with enough distinct bigrams (smaller values on ties)."""
    from ernie_zoo.evaluation.generation import choose_decoding

    return choose_decoding(rows, "format_mean", MIN_DISTINCT2, smaller=("eos_min_prob", "repetition_penalty"))


def main(argv: list[str] | None = None) -> None:
    import torch

    from ernie_zoo.data.labelled import load_split
    from ernie_zoo.evaluation.generation import distinct2
    from ernie_zoo.evaluation.poetry import format_rates
    from ernie_zoo.taskflow import Taskflow
    from ernie_zoo.utils import atomic_write_json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", default=None, help="model directory (default: the shipped ernie-zoo-mini-poetry)"
    )
    ap.add_argument("--titles", type=int, default=100, help="dev titles to generate from")
    ap.add_argument("--datasets", type=Path, default=None, help="labelled datasets root (default: the cache)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("bench/results/poetry_decoding_dev.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    titles = [r["title"] for r in load_split("poetry", "dev", args.datasets)[: args.titles]]
    where = {"task_path": args.model} if args.model else {}
    rows = []
    for penalty in PENALTIES:
        for min_prob in MIN_PROBS:
            flow = Taskflow(
                "text_generation",
                max_new_tokens=64,
                repetition_penalty=penalty,
                eos_min_prob=min_prob,
                **where,
            )
            t0 = time.perf_counter()
            gens = [o["generated"][0] for o in flow(titles)]
            rates = format_rates(gens)
            row = {
                "repetition_penalty": penalty,
                "eos_min_prob": min_prob,
                **{k: rates[k] for k in (*CHECKS, "is_regulated")},
                "format_mean": sum(rates[k] for k in CHECKS) / len(CHECKS),
                "distinct2": sum(map(distinct2, gens)) / len(gens),
                "mean_chars": sum(map(len, gens)) / len(gens),
                "seconds": round(time.perf_counter() - t0, 1),
                "examples": gens[:3],
            }
            rows.append(row)
            print(
                f"repetition_penalty {penalty:g} eos_min_prob {min_prob:g}: format mean {row['format_mean']:.3f} "
                f"(lines {row['line_count_ok']:.2f}) distinct-2 {row['distinct2']:.3f} "
                f"chars {row['mean_chars']:.1f}",
                flush=True,
            )
    best = choose(rows)
    result = {
        "model": args.model or "ernie-zoo-mini-poetry (shipped)",
        "prompts": f"the first {len(titles)} dev titles",
        "decoding": "greedy, max_new_tokens 64, through Taskflow('text_generation')",
        "rule": f"highest mean of {', '.join(CHECKS)} among settings with distinct-2 >= {MIN_DISTINCT2}",
        "chosen": {"repetition_penalty": best["repetition_penalty"], "eos_min_prob": best["eos_min_prob"]},
        "grid": rows,
    }
    atomic_write_json(args.out, result)
    print("chosen:", result["chosen"], "->", args.out)


if __name__ == "__main__":
    main()
