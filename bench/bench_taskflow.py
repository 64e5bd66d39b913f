#!/usr/bin/env python
"""Taskflow sentiment_analysis vs ``transformers.pipeline("text-classification")`` on the same weights.

Model: a mini-size ErnieZooForSequenceClassification (preset ``mini``: 6 layers, hidden 384, 12 heads) with
a 21,128-token vocabulary trained by ``ErnieZooTokenizerFast.train_vocab`` on jieba's dictionary words. If the
shipped ``ernie-zoo-mini-sentiment`` is installed it is used instead; otherwise the weights are random (speed does
not depend on them) and the classifier bias is centred on calibration texts so that the predicted labels vary
from text to text and label agreement is not trivially 1.0 — the result file says which.

Texts (``reviews`` also needs ``scripts/prepare_corpora.py``): the real Chinese sentences of ``tests/data/zh_sentences.txt`` plus generated mixes of them cut to a target
length of 8-480 characters (``random.Random(0)``), in two workloads:

* ``uniform``: target lengths uniform over 8-480 (mean ~250 characters);
* ``skewed``: target lengths log-uniform over 8-480 (mean ~125: many short texts, a long tail), the usual shape
  of real collections (reviews, news sentences, queries);
* ``reviews``: real reviews of the sentiment test split as they come; with the shipped model the result also
  records fp32 and int8 accuracy against the gold labels (the accuracy change of int8).

No text exceeds 512 tokens, so neither side truncates or splits and the label comparison is exact. What
Taskflow saves is mostly padding: the pipeline pads each batch of 32 to its longest text, Taskflow sorts by
length first. The saving is bounded by (padded tokens of the pipeline) / (real tokens), which the result records
per workload (``padding_ceiling``): about 1.9 for ``uniform``, 3.6 for ``skewed``.

Both sides run in this process with the same torch thread count, the same batch size and fp32; each is warmed up
on 32 texts, then the three systems are timed one after another on all texts, ``--rounds`` times interleaved; the
best round of each counts (the machine is shared). Ratios are wall-clock; the process CPU-time ratios, less
sensitive to other load, are recorded too. Int8 is Taskflow's ``precision="int8"`` (dynamic quantization of
nn.Linear). Agreement: fp32 labels must be identical to the pipeline's (asserted); int8 agreement with fp32 is
recorded (with random weights the label margins are tiny, so int8 flips more labels than it would on a trained
model).

Usage::

    .venv/bin/python bench/bench_taskflow.py [--n 256] [--batch-size 32] [--threads 2] [--rounds 2] [--workloads uniform,skewed]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shlex
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from ernie_zoo import ErnieZooForSequenceClassification, ErnieZooTokenizerFast  # noqa: E402
from ernie_zoo.models.presets import preset_config  # noqa: E402
from ernie_zoo.taskflow import Taskflow  # noqa: E402
from ernie_zoo.taskflow.models import ZOO_DIR  # noqa: E402

SHIPPED = "ernie-zoo-mini-sentiment"


def review_texts(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """`n` texts (and gold labels) of the review test split, shuffled with `seed` (needs the prepared splits)."""
    from ernie_zoo.data.labelled import load_split

    rows = load_split("sentiment", "test")
    random.Random(seed).shuffle(rows)
    rows = rows[:n]
    return [r["text"] for r in rows], [r["label"] for r in rows]


def make_texts(n: int, seed: int = 0, lengths: str = "uniform") -> list[str]:
    sentences = [
        s
        for s in (REPO / "tests" / "data" / "zh_sentences.txt").read_text(encoding="utf-8").splitlines()
        if s
    ]
    rng = random.Random(seed)
    texts = list(sentences)
    while len(texts) < n:
        if lengths == "uniform":
            target = rng.randint(8, 480)
        else:
            target = int(math.exp(rng.uniform(math.log(8), math.log(480))))
        text = ""
        while len(text) < target:
            text += rng.choice(sentences)
        texts.append(text[:target])
    rng.shuffle(texts)
    return texts[:n]


def padding_ceiling(n_tokens: list[int], batch_size: int) -> float:
    """Tokens the pipeline computes (each batch padded to its longest, input order) over the real tokens."""
    padded = sum(
        len(n_tokens[i : i + batch_size]) * max(n_tokens[i : i + batch_size])
        for i in range(0, len(n_tokens), batch_size)
    )
    return padded / sum(n_tokens)


def build_model(directory: Path) -> tuple[Path, str]:
    shipped = ZOO_DIR / SHIPPED
    if shipped.is_dir():
        return shipped, f"shipped {SHIPPED}"
    import jieba

    dict_path = Path(jieba.__file__).parent / "dict.txt"
    words = [line.split(" ", 1)[0] for line in dict_path.read_text(encoding="utf-8").splitlines()]
    tok = ErnieZooTokenizerFast.train_vocab(
        words + make_texts(25), vocab_size=21128, min_frequency=1, show_progress=False
    )
    config = preset_config(
        "mini",
        vocab_size=len(tok),
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    torch.manual_seed(0)
    model = ErnieZooForSequenceClassification(config)
    model.load_char_tables(tok)
    # A random encoder maps every text to nearly the same pooled vector, so one label would win everywhere and
    # label agreement would be trivial. Centre the head on calibration texts (disjoint from the timed ones):
    # about half the texts then get each label, decided by small margins, which makes agreement a real check.
    model.eval()
    margins = []
    with torch.no_grad():
        for text in make_texts(64, seed=2):
            logits = model(**tok(text, return_tensors="pt")).logits[0]
            margins.append(float(logits[1] - logits[0]))
        model.classifier.bias[1] -= sorted(margins)[len(margins) // 2]
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    spread = max(margins) - min(margins)
    return directory, (
        "random init (mini preset; classifier bias centred on 64 calibration texts, logit-margin spread "
        f"{spread:.2g}): no trained mini sentiment model exists yet"
    )


def timed_rounds(systems: dict, texts: list[str], rounds: int) -> tuple[dict, dict, dict]:
    """Run the systems one after another, `rounds` times (interleaved, so load from other processes on a
    shared machine hits all of them alike); best wall-clock and best process CPU time per system."""
    wall = {name: float("inf") for name in systems}
    cpu = dict(wall)
    outputs = {}
    for _ in range(rounds):
        for name, fn in systems.items():
            w0, c0 = time.perf_counter(), time.process_time()
            outputs[name] = fn(texts)
            wall[name] = min(wall[name], time.perf_counter() - w0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
    return wall, cpu, outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default="uniform,skewed,reviews")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "taskflow.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()

    workloads: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, weights = build_model(Path(tmp))
        # dtype fp32: the shipped weights are fp16 on disk and transformers would otherwise load them as fp16
        pipe = transformers.pipeline(
            "text-classification", model=str(model_dir), device="cpu", dtype=torch.float32
        )
        fp32 = Taskflow("sentiment_analysis", task_path=model_dir, device="cpu", batch_size=args.batch_size)
        int8 = Taskflow(
            "sentiment_analysis",
            task_path=model_dir,
            device="cpu",
            batch_size=args.batch_size,
            precision="int8",
        )

        def run_pipe(items):
            return pipe(items, batch_size=args.batch_size, truncation=True, max_length=512)

        for fn in (run_pipe, fp32, int8):
            fn(make_texts(32, seed=1))
        config = fp32._task.model.config
        model_desc = (
            f"{type(fp32._task.model).__name__}, {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
            f"{config.num_attention_heads} heads, ffn {config.intermediate_size}, vocab {config.vocab_size}"
        )
        for name in args.workloads.split(","):
            texts, gold = (
                review_texts(args.n) if name == "reviews" else (make_texts(args.n, lengths=name), None)
            )
            n_tokens = [len(fp32._task.tokenizer(t)["input_ids"]) for t in texts]
            if gold is not None:  # drop the few reviews over 512 tokens: the pipeline would truncate them
                keep = [i for i, n in enumerate(n_tokens) if n <= 512]
                texts, gold, n_tokens = (
                    [texts[i] for i in keep],
                    [gold[i] for i in keep],
                    [n_tokens[i] for i in keep],
                )
            assert max(n_tokens) <= 512, "a text would be truncated by the pipeline"
            wall, cpu, out = timed_rounds(
                {"pipeline": run_pipe, "fp32": fp32, "int8": int8}, texts, args.rounds
            )
            labels = {k: [r["label"] for r in v] for k, v in out.items()}
            agree = sum(a == b for a, b in zip(labels["pipeline"], labels["fp32"])) / len(texts)
            workloads[name] = {
                "n_texts": len(texts),
                "chars_min_mean_max": [
                    min(map(len, texts)),
                    round(sum(map(len, texts)) / len(texts), 1),
                    max(map(len, texts)),
                ],
                "tokens_total": sum(n_tokens),
                "padding_ceiling": round(padding_ceiling(n_tokens, args.batch_size), 2),
                "baseline_texts_per_s": round(len(texts) / wall["pipeline"], 2),
                "taskflow_fp32_texts_per_s": round(len(texts) / wall["fp32"], 2),
                "taskflow_int8_texts_per_s": round(len(texts) / wall["int8"], 2),
                "ratio_fp32": round(wall["pipeline"] / wall["fp32"], 2),
                "ratio_int8": round(wall["pipeline"] / wall["int8"], 2),
                "cpu_time_ratio_fp32": round(cpu["pipeline"] / cpu["fp32"], 2),
                "cpu_time_ratio_int8": round(cpu["pipeline"] / cpu["int8"], 2),
                "meets_target_fp32": wall["pipeline"] / wall["fp32"] >= 2.0,
                "meets_target_int8": wall["pipeline"] / wall["int8"] >= 3.0,
                "fp32_label_agreement_vs_pipeline": agree,
                "fp32_max_score_diff_vs_pipeline": max(
                    abs(a["score"] - b["score"]) for a, b in zip(out["pipeline"], out["fp32"])
                ),
                "int8_label_agreement_vs_fp32": sum(a == b for a, b in zip(labels["fp32"], labels["int8"]))
                / len(texts),
                "fraction_positive_fp32": round(labels["fp32"].count("positive") / len(texts), 3),
            }
            if gold is not None:
                workloads[name]["accuracy_fp32"] = sum(a == b for a, b in zip(gold, labels["fp32"])) / len(
                    texts
                )
                workloads[name]["accuracy_int8"] = sum(a == b for a, b in zip(gold, labels["int8"])) / len(
                    texts
                )
            print(name, json.dumps(workloads[name]), flush=True)

    result = {
        "task": "sentiment_analysis (text classification)",
        "weights": weights,
        "model": model_desc,
        "texts": "tests/data/zh_sentences.txt + generated mixes of them, 8-480 chars (random.Random(0)); "
        "uniform: lengths uniform, skewed: lengths log-uniform; reviews: the review test split (real texts as "
        "they come, shuffled with seed 0, those over 512 tokens dropped), with accuracy against the gold labels",
        "batch_size": args.batch_size,
        "torch_threads": args.threads,
        "rounds": args.rounds,
        "baseline": 'transformers.pipeline("text-classification", dtype=torch.float32, batch_size, truncation=True, max_length=512)',
        "target_ratio_fp32": 2.0,
        "target_ratio_int8": 3.0,
        "workloads": workloads,
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp_out, args.out)
    for name, w in workloads.items():
        agree = w["fp32_label_agreement_vs_pipeline"]
        assert agree == 1.0, f"{name}: fp32 labels differ from the pipeline's on {1 - agree:.1%} of texts"
    return 0


if __name__ == "__main__":
    sys.exit(main())
