"""Generation speed: Taskflow("text_generation") against transformers.pipeline("text-generation"), same weights,
same prompts, greedy, KV cache on, one run.

The prompts are the 60 hand-written everyday prefixes (data/eval/generation/everyday.txt). Each engine generates
--new-tokens tokens per prompt (end token suppressed with min_new_tokens, so every engine does the same work):

- `taskflow`: one call with the whole list (Taskflow batches prompts of equal token length, no padding);
- `taskflow_one`: one call per prompt;
- `taskflow_stream`: one `stream=True` call per prompt, consumed to the end;
- `pipeline`: transformers' pipeline, one prompt per call;
- `pipeline_batched`: the pipeline with the whole list and batch_size=--batch-size (left padding).

Rounds are interleaved (median reported); results are tokens/s and ratios against `pipeline`, with a check that
the one-prompt-at-a-time continuations of Taskflow and the pipeline are identical (spaces aside: the pipeline's
decode puts one between every two tokens).

    python bench/generation_speed.py                                      # the shipped general generator
    python bench/generation_speed.py --model DIR --rounds 1 --out /tmp/generation_speed.json
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "bench/results/generation_speed.json"
PROMPTS = REPO / "data/eval/generation/everyday.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ernie-zoo-mini-generator", help="shipped model name or directory")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    torch.set_num_threads(args.threads)
    import transformers

    from ernie_zoo.taskflow import Taskflow
    from ernie_zoo.taskflow.models import resolve_model

    location = resolve_model("text_generation", args.model, None, args.model).location
    lines = PROMPTS.read_text(encoding="utf-8").splitlines()
    prompts = [p.strip() for p in lines if p.strip() and not p.startswith("#")]
    n = args.new_tokens
    opts = dict(max_new_tokens=n, min_new_tokens=n, repetition_penalty=1.0)
    flow = Taskflow("text_generation", model=args.model, batch_size=args.batch_size, **opts)
    stream = Taskflow("text_generation", model=args.model, stream=True, **opts)
    tok = transformers.AutoTokenizer.from_pretrained(location)
    model = transformers.AutoModelForCausalLM.from_pretrained(location).eval()
    pipe = transformers.pipeline("text-generation", model=model, tokenizer=tok, device="cpu")
    gen = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, return_full_text=False,
               add_special_tokens=False, prefix=tok.cls_token or "", repetition_penalty=1.0)  # fmt: skip
    tok.padding_side = "left"

    def pipe_one():
        return [pipe(p, **gen)[0]["generated_text"].replace(" ", "") for p in prompts]

    def pipe_batched():
        return [o[0]["generated_text"] for o in pipe(prompts, batch_size=args.batch_size, **gen)]

    engines = {
        "taskflow": lambda: [r["generated"][0] for r in flow(prompts)],
        "taskflow_one": lambda: [flow(p)["generated"][0] for p in prompts],
        "taskflow_stream": lambda: ["".join(stream(p)) for p in prompts],
        "pipeline": pipe_one,
        "pipeline_batched": pipe_batched,
    }
    times: dict[str, list[float]] = {k: [] for k in engines}
    outputs: dict[str, list[str]] = {}
    for name, fn in engines.items():  # warm-up (first-call costs)
        outputs[name] = fn()
    for _ in range(args.rounds):
        for name, fn in engines.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    tokens = n * len(prompts)
    base = statistics.median(times["pipeline"])
    rows = {
        name: {
            "seconds": round(statistics.median(t), 3),
            "tokens_per_s": round(tokens / statistics.median(t), 1),
            "speedup_vs_pipeline": round(base / statistics.median(t), 2),
        }
        for name, t in times.items()
    }
    result = {
        "what": __doc__.splitlines()[0],
        "command": "python bench/generation_speed.py " + " ".join(sys.argv[1:]),
        "model": args.model,
        "parameters": sum(p.numel() for p in model.parameters()),
        "prompts": len(prompts),
        "new_tokens_per_prompt": n,
        "threads": args.threads,
        "rounds": args.rounds,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}, "
        f"transformers {transformers.__version__}",
        "engines": rows,
        "same_continuations": {
            # the pipeline's decode puts a space between every two tokens, Taskflow's only between Latin words
            "taskflow_one_vs_pipeline": [t.replace(" ", "") for t in outputs["taskflow_one"]] == outputs["pipeline"],
            "taskflow_batch_vs_one": outputs["taskflow"] == outputs["taskflow_one"],
            "stream_vs_one": outputs["taskflow_stream"] == outputs["taskflow_one"],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
