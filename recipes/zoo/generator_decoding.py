"""Choose ernie-zoo-mini-generator's decoding default (repetition_penalty) on DEV data (never test) and write it
to a results file that recipes/zoo/ship.py puts into the shipped generation_config.json.

    python recipes/zoo/generator_decoding.py --model runs/zoo/generator/checkpoint-1000
    python recipes/zoo/generator_decoding.py --model DIR --idioms 100 --out /tmp/generator_decoding.json

Greedy search (Taskflow's default) over `repetition_penalty` in PENALTIES, each scored on:
- the dev idioms (`$ERNIE_ZOO_CACHE/datasets/idioms/dev.jsonl`, the first --idioms): the generator answers
  "成语X是什么意思？" and its answer is scored against the dictionary's explanation (character F1);
- continuations of prefixes of a seeded sample of the THUCNews dev headlines and the review dev split (--prefixes
  of each): distinct-2
  (the share of distinct character bigrams, a repetition check) of the continuation.
The chosen penalty has the best dev idiom character F1 among the penalties whose mean distinct-2 is at least
MIN_DISTINCT2 (ties: the smaller penalty). Output: bench/results/generator_decoding_dev.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

PENALTIES = (1.0, 1.1, 1.2, 1.3)
MIN_DISTINCT2 = 0.8


def choose(rows: list[dict]) -> dict:
    """The penalty with the best dev idiom F1 among those with enough distinct bigrams (the smaller on ties)."""
    from ernie_zoo.evaluation.generation import choose_decoding

    return choose_decoding(rows, "idiom_char_f1", MIN_DISTINCT2, smaller=("repetition_penalty",))


def main(argv: list[str] | None = None) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ernie_zoo.data.generation import _prefix, idiom_prompt
    from ernie_zoo.data.labelled import DEFAULT_DATASETS
    from ernie_zoo.evaluation.generation import _continue, distinct2, explanation_scores

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the generator's checkpoint directory")
    parser.add_argument("--tokenizer", default="ernie_zoo/zoo/ernie-zoo-mini-zh")
    parser.add_argument("--datasets", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--idioms", type=int, default=200)
    parser.add_argument("--prefixes", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("bench/results/generator_decoding_dev.json"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)

    def jsonl(path: Path) -> list[dict]:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    idioms = jsonl(args.datasets / "idioms" / "dev.jsonl")[: args.idioms]
    rng = random.Random(0)
    texts = []
    for split in ("headlines", "sentiment"):  # a seeded sample of each dev split (the files are sorted by label)
        rows = jsonl(args.datasets / split / "dev.jsonl")
        texts += [r["text"] for r in rng.sample(rows, min(args.prefixes, len(rows)))]
    prefixes = [_prefix(t, rng) for t in texts]
    rows = []
    for penalty in PENALTIES:
        t0 = time.perf_counter()
        answers = _continue(model, tokenizer, [idiom_prompt(r["word"]) for r in idioms], 64, penalty)
        conts = _continue(model, tokenizer, prefixes, 48, penalty)
        scores = explanation_scores(answers, [r["explanation"] for r in idioms])
        rows.append(
            {
                "repetition_penalty": penalty,
                "idiom_char_f1": scores["char_f1"],
                "idiom_rouge_l": scores["rouge_l"],
                "distinct2": sum(map(distinct2, conts)) / len(conts),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        print(rows[-1], flush=True)
    chosen = choose(rows)
    result = {
        "what": __doc__.splitlines()[0],
        "command": "python recipes/zoo/generator_decoding.py " + " ".join(argv or __import__("sys").argv[1:]),
        "model": args.model,
        "dev": {"idioms": len(idioms), "prefixes": len(prefixes), "min_distinct2": MIN_DISTINCT2},
        "rows": rows,
        "chosen": {"repetition_penalty": chosen["repetition_penalty"], "eos_min_prob": 0.0},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result["chosen"]))


if __name__ == "__main__":
    main()
