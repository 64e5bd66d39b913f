#!/usr/bin/env python
"""Pretraining throughput: the `ernie-pretrain` loop against transformers' `BertForMaskedLM` + `Trainer`.

Both train a masked LM of the same shape (default: the `mini` preset, 6 layers x 384, 12 heads, FFN 1536) with
a BERT-zh sized vocabulary (21,128 tokens: the specials, ASCII and every CJK character U+4E00-U+9FA5, like
bert-base-chinese), on the same tokenized rows (sentences of tests/data/zh_sentences.txt packed into full
`--seq-len` rows), with the same micro batch, sequence length, torch threads, fp32, AdamW, warmup + cosine,
gradient clipping, dropout 0.1 and 15% masking, in one process, one after the other.

* ours: `ernie_zoo.training.pretrain.pretrain(recipe)` -- the real loop (knowledge-masking collator with char
  masking, ErnieZoo model with pinyin/radical/stroke features, masked-only last layer and MLM head, fused AdamW;
  checkpoints, eval and TensorBoard off).
* baseline: `Trainer(BertForMaskedLM, DataCollatorForLanguageModeling)` with its defaults (fused AdamW).

Both are timed the same way: the gap between consecutive step ends (`on_step_end` callbacks), which covers
collation, forward, backward, optimizer step and the loop's bookkeeping; the first `--warmup` steps of each
round are dropped. The two sides alternate for `--rounds` rounds so that load from other processes on a
shared machine hits both alike; tokens/s is median tokens per step / median step time (robust to bursts of
load), with the mean-based and CPU-time-based ratios reported too. tokens/s counts non-padding tokens.

Usage::

    .venv/bin/python bench/bench_pretrain.py [--rounds 3] [--steps 5] [--warmup 1] [--batch 16] [--seq-len 128]
        [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from ernie_zoo.models.presets import PRESETS  # noqa: E402
from ernie_zoo.recipe_cli import load_recipe  # noqa: E402
from ernie_zoo.tokenization import SPECIAL_TOKENS, ErnieZooTokenizerFast  # noqa: E402
from ernie_zoo.training.logging_utils import read_metrics  # noqa: E402
from ernie_zoo.training.pretrain import pretrain  # noqa: E402
from ernie_zoo.training.recipe import PretrainRecipe  # noqa: E402

SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"


def bert_zh_vocab() -> dict[str, int]:
    """bert-base-chinese's shape: specials, printable ASCII, then the CJK Unified Ideographs block."""
    tokens = list(SPECIAL_TOKENS)
    tokens += [chr(c) for c in range(33, 127)]
    tokens += [chr(c) for c in range(0x4E00, 0x9FA6)]
    tokens += [f"##{chr(c)}" for c in range(ord("a"), ord("z") + 1)]
    tokens += [f"[unused{i}]" for i in range(21128 - len(tokens))]
    return {t: i for i, t in enumerate(tokens)}


def write_corpus(path: Path, n_docs: int, seed: int = 0) -> None:
    """Documents of ~600 characters: shuffled sentences of the test corpus; prepare_dataset packs them into
    rows of seq_len tokens."""
    sentences = [s for s in SENTENCES.read_text(encoding="utf-8").splitlines() if s.strip()]
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n_docs):
            doc = []
            while sum(map(len, doc)) < 600:
                doc.append(rng.choice(sentences))
            f.write("".join(doc) + "\n")


class StepClock:
    """Wall and CPU time at the end of every step; a step's duration is the gap to the previous end, so both
    sides are timed the same way (collation + forward + backward + optimizer + the loop's own bookkeeping)."""

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.tokens: list[int] = []

    def tick(self, tokens: int) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())
        self.tokens.append(tokens)

    def timed(self, warmup: int) -> list[tuple[int, float, float]]:
        """(tokens, wall s, cpu s) of the steps after the first `warmup`."""
        return [
            (self.tokens[i], self.wall[i] - self.wall[i - 1], self.cpu[i] - self.cpu[i - 1])
            for i in range(warmup, len(self.wall))
        ]


def run_ours(args, tokenizer_dir: Path, corpus: Path, work: Path) -> tuple[list, dict]:
    out = work / f"ours-{time.monotonic_ns()}"
    overrides = {
        "output_dir": str(out),
        "max_steps": args.warmup + args.steps,
        "micro_batch_size": args.batch,
        "num_threads": args.threads,
        "device": "cpu",
        "resume": "never",
        "model.preset": args.preset,
        "model.max_position_embeddings": 512,
        "tokenizer.path": str(tokenizer_dir),
        "data.files": [str(corpus)],
        "data.max_seq_len": args.seq_len,
        "data.eval_fraction": 0.0,
        "masking.schedule": [{"strategy": "char", "until_step": None}],
        "optim.warmup_steps": 1,
        "checkpoint.interval": 0,
        "checkpoint.save_final": False,
        "eval.interval": 0,
        "logging.interval": 1,
        "logging.tensorboard": False,
        "logging.progress_bar": False,
    }
    clock = StepClock()
    clock.tick(0)  # reference point: the end of setup
    summary = pretrain(
        load_recipe(None, overrides, cls=PretrainRecipe), on_step_end=lambda step, m: clock.tick(m["tokens"])
    )
    losses = [round(r["train/loss"], 4) for r in read_metrics(out / "metrics.jsonl") if "train/loss" in r]
    return clock.timed(args.warmup + 1), {"parameters": summary["parameters"], "losses": losses}


def run_hf(args, tokenizer_dir: Path, corpus: Path, work: Path) -> tuple[list, dict]:
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from ernie_zoo.masking import prepare_dataset

    torch.set_num_threads(args.threads)
    tokenizer = ErnieZooTokenizerFast.from_pretrained(str(tokenizer_dir))
    ds = prepare_dataset(
        [str(corpus)], tokenizer, max_seq_len=args.seq_len, input_type="file", show_progress=False
    )
    ds = ds.select_columns(["input_ids"])
    shape = PRESETS[args.preset]
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape["hidden_size"],
        num_hidden_layers=shape["num_hidden_layers"],
        num_attention_heads=shape["num_attention_heads"],
        intermediate_size=shape["intermediate_size"],
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    clock = StepClock()
    batch_tokens: list[int] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, a, state, control, **kw):
            clock.tick(0)

        def on_step_end(self, a, state, control, **kw):
            clock.tick(batch_tokens[-1])

    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)

    def counting_collator(features):
        batch = collator(features)
        batch_tokens.append(int(batch["attention_mask"].sum()))
        return batch

    targs = TrainingArguments(
        output_dir=str(work / "hf"),
        per_device_train_batch_size=args.batch,
        max_steps=args.warmup + args.steps,
        learning_rate=5e-4,
        weight_decay=0.01,
        warmup_steps=1,
        lr_scheduler_type="cosine",
        max_grad_norm=1.0,
        logging_steps=10**6,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model, args=targs, train_dataset=ds, data_collator=counting_collator, callbacks=[Clock()]
    )
    trainer.train()
    return clock.timed(args.warmup + 1), {"parameters": sum(p.numel() for p in model.parameters())}


def _flop_ratio(args) -> float:
    """FLOPs per step of the baseline (full head, full last layer) over ours (masked-only head and last
    layer), with 15% of the tokens masked: what the ratio would be if both ran their matmuls equally fast."""
    from ernie_zoo.models import ErnieZooConfig
    from ernie_zoo.training.mfu import training_flops

    config = ErnieZooConfig(vocab_size=21128, **PRESETS[args.preset])
    tokens = args.batch * args.seq_len
    masked = round(0.15 * tokens)
    return training_flops(config, tokens, args.seq_len) / training_flops(
        config, tokens, args.seq_len, masked, sparse_last_layer=True
    )


def _rates(samples: list[tuple[int, float, float]]) -> dict:
    tokens = [t for t, _, _ in samples]
    wall = [w for _, w, _ in samples]
    cpu = [c for _, _, c in samples]
    return {
        "tokens_per_s_median": statistics.median(tokens) / statistics.median(wall),
        "tokens_per_s_mean": sum(tokens) / sum(wall),
        "tokens_per_cpu_s": sum(tokens) / sum(cpu),
        "step_s_median": statistics.median(wall),
        "step_s_all": [round(w, 3) for w in wall],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="mini")
    p.add_argument("--steps", type=int, default=5, help="timed steps per side and round")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per side and round")
    p.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds (baseline, ours, baseline, ours, ...)"
    )
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for both sides (1: on a shared machine, OpenMP barriers stall whenever another "
        "process preempts one thread, which punishes whichever side runs more, smaller kernels)",
    )
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "pretrain_throughput.json"))
    args = p.parse_args()
    if args.warmup < 0 or args.steps < 1 or args.rounds < 1:
        p.error("--warmup must be >= 0, --steps and --rounds >= 1")
    torch.set_num_threads(args.threads)

    ours_samples, hf_samples = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = ErnieZooTokenizerFast(vocab=bert_zh_vocab())
        tokenizer.save_pretrained(str(work / "tokenizer"))
        corpus = work / "corpus.txt"
        write_corpus(corpus, n_docs=(args.warmup + args.steps) * args.batch // 4 + 8)
        # Alternate the two sides so that load from other processes on a shared machine hits both alike.
        for _ in range(args.rounds):
            samples, hf = run_hf(args, work / "tokenizer", corpus, work)
            hf_samples += samples
            samples, ours = run_ours(args, work / "tokenizer", corpus, work)
            ours_samples += samples
    o, b = _rates(ours_samples), _rates(hf_samples)
    flop_ratio = _flop_ratio(args)
    result = {
        "what": "MLM pretraining tokens/s, ernie-pretrain loop vs transformers BertForMaskedLM + Trainer",
        "preset": args.preset,
        "shape": PRESETS[args.preset],
        "vocab_size": 21128,
        "micro_batch": args.batch,
        "seq_len": args.seq_len,
        "threads": args.threads,
        "precision": "fp32",
        "rounds": args.rounds,
        "timed_steps_per_round": args.steps,
        "warmup_steps_per_round": args.warmup,
        "ratio": round(o["tokens_per_s_median"] / b["tokens_per_s_median"], 2),
        "ratio_mean": round(o["tokens_per_s_mean"] / b["tokens_per_s_mean"], 2),
        "ratio_cpu_time": round(o["tokens_per_cpu_s"] / b["tokens_per_cpu_s"], 2),
        "target_ratio": 1.8,
        "model_flop_ratio": round(flop_ratio, 2),
        "ours": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in o.items()},
        "baseline": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in b.items()},
        "ours_parameters": ours["parameters"],
        "baseline_parameters": hf["parameters"],
        "ours_losses_last_round": ours["losses"],
        "load_average_1m": round(os.getloadavg()[0], 2),
        "command": shlex.join(["python", "bench/bench_pretrain.py", *sys.argv[1:]]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
