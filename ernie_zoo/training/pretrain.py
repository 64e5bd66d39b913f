"""`ernie-pretrain`: masked-LM pretraining of an ErnieZoo encoder with ERNIE's staged knowledge masking, or
causal-LM pretraining of an ERNIE 4.5 decoder when `model.preset` is a decoder preset (causal_lm.py).

    ernie-pretrain recipes/pretrain/tiny-cpu.yaml                       # train (auto-resumes if interrupted)
    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --optim.lr 1e-3 --max_steps 50
    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --resume              # must continue from a checkpoint
    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --print_config        # the resolved recipe as YAML
    ernie-pretrain --help                                               # every recipe key with its help

A task on the one training loop (`loop.TrainLoop`, which owns accumulation, backward, the optimizer step, the
cadences and the non-finite-loss check): a step's micro batches are the next indices of the epoch's seeded
permutation (this data-parallel rank's share), masked by `KnowledgeMaskingCollator` (char / phrase / entity /
sentiment by the schedule's stage; masks depend only on (seed, step)); the loss is the objective's
(`objective.PretrainObjective`, run by `engine.forward`: mlm.py's logits at masked positions only, + polarity_weight
x the SKEP word-polarity loss; causal_lm.py's next-token loss for a decoder). The engine of the recipe's backend
(`backends.engine_for_recipe`, with the recipe's optimizer, precision and objective) steps the optimizer and saves
/ loads its state.

Exact resume: a checkpoint holds the weights, AdamW and LR-schedule state, the RNG states and the data
position; masks are a function of (seed, step), so a run killed at any point and resumed from its newest
valid checkpoint produces the same losses and the same final weights as an uninterrupted run. That is what a
restart by torchrun's elastic agent or a Slurm requeue does (docs/scale.md, Failures and restarts); the process
group starts first, with `distributed.timeout_s`, so a dead or hung rank fails every rank's step instead of
blocking it. `logging.profile_steps` records a window of steps with torch.profiler (training/profiling.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm.auto import tqdm

from ernie_zoo.models.decoder import is_decoder_config
from ernie_zoo.parallel.distributed import finish_distributed, init_from_env
from ernie_zoo.recipe_cli import recipe_from_cli, recipe_to_yaml, to_dict
from ernie_zoo.utils import atomic_write_text, resolve_device, run_console

from . import checkpoint as ckpt
from .backends import build_model_for, engine_for_recipe
from .build import build_model_config, to_device
from .causal_lm import (
    CausalCollator,
    decoder_config_for,
    decoder_training_flops,
    is_decoder_preset,
    load_packed_dataset,
)
from .core import seed_everything
from .data import DataPosition, ShardedBatchSampler, load_dataset, load_tokenizer, rows
from .logging_utils import MetricsLogger, format_count, write_json_atomic
from .loop import KILL_ENV, TrainLoop  # noqa: F401  (KILL_ENV re-exported for the resume tests)
from .mfu import mfu, peak_flops_for, training_flops
from .mlm import masked_lm_loss  # noqa: F401  (re-exported: the loop's loss lives in mlm.py)
from .recipe import PretrainRecipe

logger = logging.getLogger(__name__)

#: Files every checkpoint of the loop has (the engine's own files are checked by its load()).
REQUIRED_FILES = ("model.safetensors", "trainer_state.json", "rng.json", "recipe.yaml")


def objective_loss(engine, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
    """(mean loss, predicted tokens, correct predictions) of a collated batch: pretraining's objective
    (`objective.PretrainObjective`; the pipeline's last stage) run by `engine.forward` on the engine's device."""
    return engine.forward(to_device(batch, engine.device))


@torch.no_grad()
def evaluate(engine, batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Masked-token loss, perplexity and accuracy over fixed, pre-masked batches (dropout off).

    Data-parallel ranks share the work: rank r evaluates batches r, r + W, r + 2W, ... and the token-weighted
    sums are added up over the ranks (`engine.dp_sum`), so every rank returns the metrics of all the batches.
    A rank whose share is one batch short runs the first batch again with weight 0: every rank runs the same
    number of forwards, which ZeRO-3 needs (each forward gathers the parameters collectively).
    """
    model = engine.model
    was_training = model.training
    model.eval()
    rank, world = engine.dp_rank, engine.dp_world_size
    total_loss, total, correct = 0.0, 0, 0
    try:
        for i in range(-(-len(batches) // world)):  # ceil(len / world) forwards on every rank
            j = rank + i * world
            loss, n, c = objective_loss(engine, batches[j if j < len(batches) else 0])
            if j < len(batches):
                total_loss += float(loss) * n
                total += n
                correct += c
    finally:
        model.train(was_training)
    total_loss, total, correct = engine.dp_sum([total_loss, total, correct])
    if total == 0:
        return {}
    mean = total_loss / total
    return {
        "eval/loss": mean,
        "eval/perplexity": math.exp(min(mean, 700.0)),
        "eval/accuracy": correct / total,
    }


# ------------------------------------------------------------------------------------------- the run
def _resume_dir(recipe: PretrainRecipe, output_dir: Path) -> Path | None:
    """The checkpoint to continue from, by `recipe.resume`; resume=never refuses a directory with checkpoints."""
    existing = ckpt.list_checkpoints(output_dir) if recipe.resume == "never" else None
    if existing:
        raise ValueError(
            f"resume=never, but {output_dir} already holds {existing[-1].name}: choose another output_dir, "
            "delete the checkpoints, or resume"
        )
    return ckpt.resume_checkpoint(
        output_dir, recipe.resume, REQUIRED_FILES, "resume", "choose another output_dir"
    )


def _move_data_position(state: dict[str, Any], dp_world_size: int, micro_batch_size: int) -> None:
    """A checkpoint written with another number of data-parallel ranks: rank r of D reads the epoch's permutation
    at r, r + D, ..., so after `index` examples per rank the run has read the permutation's first index x D; the
    same point under D' ranks is index x D / D' (the global batch, micro_batch_size x grad_accum_steps x D, kept)."""
    saved = int(state.get("dp_world_size") or 1)
    if saved == dp_world_size:
        return
    consumed = state["index"] * saved
    if consumed % (dp_world_size * micro_batch_size):
        raise ValueError(
            f"the checkpoint's data position ({consumed} examples of epoch {state['epoch']} over {saved} data-parallel "
            f"ranks) does not split into micro batches of {micro_batch_size} over {dp_world_size} ranks: keep the "
            "global batch (micro_batch_size x grad_accum_steps x data-parallel ranks) of the run that wrote it"
        )
    logger.warning(
        "resuming %d data-parallel rank(s) from a checkpoint of %d: the data position moves to the same example "
        "(%d of epoch %d), but each rank's masks and dropout draw from its own stream, so the steps differ from "
        "an uninterrupted run's by sampling, not by state",
        dp_world_size,
        saved,
        consumed,
        state["epoch"],
    )
    state["index"], state["dp_world_size"] = consumed // dp_world_size, dp_world_size


def _log_recipe_changes(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> None:
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            _log_recipe_changes(a, b, f"{prefix}{key}.")
        elif a != b and f"{prefix}{key}" != "resume":
            logger.warning("resuming with %s%s = %r (the checkpoint was written with %r)", prefix, key, b, a)


def pretrain(
    recipe: PretrainRecipe, on_step_end: Callable[[int, dict[str, float]], None] | None = None
) -> dict[str, Any]:
    """Run (or continue) the pretraining a recipe describes; returns the summary also written to
    `output_dir/summary.json`.

    on_step_end: called after every optimizer step with (step, {"loss", "tokens", "masked", "seconds"}),
    this rank's own numbers (benchmarks and notebooks use it; the loop does not depend on it). What the loop
    logs is the mean loss and the summed counts over the data-parallel ranks.
    """
    t_start = time.perf_counter()
    recipe.validate()
    output_dir = Path(recipe.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    if recipe.num_threads is not None:
        torch.set_num_threads(recipe.num_threads)
    device = resolve_device(recipe.device, key="device")
    if recipe.distributed.backend != "single":
        # First: the process group, with the recipe's collective timeout (a dead or hung rank then fails every
        # rank's step, and torchrun / Slurm restart the job from the newest valid checkpoint).
        init_from_env(timeout_s=recipe.distributed.timeout_s)
    resume_from = _resume_dir(recipe, output_dir)

    # ---- tokenizer and data (errors about the data surface here, before any model is built)
    # Only the main process (RANK 0) talks: logs, progress bars, metrics, TensorBoard, summary.json.
    is_main = int(os.environ.get("RANK", "0")) == 0
    tokenizer = load_tokenizer(recipe, output_dir)
    decoder = is_decoder_preset(recipe.model.preset)  # causal-LM pretraining of an ERNIE 4.5 decoder
    train_ds, eval_ds, data_stats = (load_packed_dataset if decoder else load_dataset)(recipe, tokenizer)
    if is_main:
        logger.info(
            "data: %d train / %d eval examples", data_stats["train_examples"], data_stats["eval_examples"]
        )

    # ---- model and engine (ZeRO-3 builds the model already partitioned: no rank holds all of it)
    if decoder:
        config = decoder_config_for(recipe.model, tokenizer, recipe.data.max_seq_len)
    else:
        config = build_model_config(recipe.model, len(tokenizer), recipe.data.max_seq_len)
    # SKEP: a sentiment stage trains a word-polarity head (positive / negative) next to the MLM head
    polarity = not decoder and recipe.masking.uses_sentiment() and recipe.masking.polarity_weight > 0
    if polarity:
        config.num_word_polarities = 2
    # A resumed run loads its weights from the checkpoint: model.init_from only seeds a fresh start.
    build_recipe = (
        recipe
        if resume_from is None
        else dataclasses.replace(recipe, model=dataclasses.replace(recipe.model, init_from=None))
    )
    model = build_model_for(build_recipe, config, tokenizer)
    engine = engine_for_recipe(build_recipe, model, device)  # the pipeline's stages load model.init_from
    is_main = engine.is_main
    n_params = engine.num_parameters()
    if is_main:
        logger.info("model: %s parameters, %s", format_count(n_params), device)
    sampler = ShardedBatchSampler(
        len(train_ds), recipe.micro_batch_size, recipe.seed, engine.dp_rank, engine.dp_world_size
    )

    # ranks mask differently; rank 0 uses the seed itself
    if decoder:
        collator = CausalCollator()
        eval_batches = _eval_batches(recipe, tokenizer, eval_ds, collator)
    else:
        collator = _collator(recipe, tokenizer, recipe.seed + 1_000_003 * engine.dp_rank)
        eval_batches = _eval_batches(recipe, tokenizer, eval_ds)

    # ---- state (fresh or resumed)
    seed_everything(recipe.seed)
    state: dict[str, Any] = {
        "step": 0,
        "epoch": 0,
        "index": 0,
        "tokens": 0,
        "flops": 0.0,
        "train_time_s": 0.0,
        "first_loss": None,
        "last_train_loss": None,
        "best_eval": None,
        "last_eval": None,
        "dp_world_size": engine.dp_world_size,  # the data position's unit: `index` counts one rank's share
    }
    if resume_from is not None:
        engine.load(resume_from)  # the pipeline backend: from any pipeline layout (a logical checkpoint)
        ckpt.load_rng_state(resume_from, rank=engine.rank)
        state.update(ckpt.read_json(resume_from / "trainer_state.json"))
        _move_data_position(state, engine.dp_world_size, recipe.micro_batch_size)
        if is_main:
            saved_recipe = yaml.safe_load((resume_from / "recipe.yaml").read_text(encoding="utf-8"))
            _log_recipe_changes(saved_recipe, to_dict(recipe))
            logger.info(
                "resumed from %s (step %d, epoch %d, index %d)",
                resume_from,
                state["step"],
                state["epoch"],
                state["index"],
            )
    if is_main:
        ckpt.remove_stale_temporaries(output_dir)
        atomic_write_text(output_dir / "recipe.yaml", recipe_to_yaml(recipe))
    start_step = state["step"]
    if recipe.optim.warmup_steps >= recipe.max_steps and is_main:
        logger.warning(
            "optim.warmup_steps (%d) >= max_steps (%d): the learning rate never reaches optim.lr",
            recipe.optim.warmup_steps,
            recipe.max_steps,
        )
    peak = recipe.logging.peak_flops or peak_flops_for(device, recipe.precision)
    metrics = MetricsLogger(
        output_dir, tensorboard=recipe.logging.tensorboard, resume_step=start_step, enabled=is_main
    )
    task = Pretraining(
        recipe, engine, config, train_ds, sampler, collator, eval_batches, state, metrics, peak
    )
    loop = TrainLoop(
        total_steps=recipe.max_steps,
        grad_accum=recipe.grad_accum_steps,
        log_every=recipe.logging.interval,
        eval_every=recipe.eval.interval or 0,
        save_every=recipe.checkpoint.interval or 0,
        save_final=recipe.checkpoint.save_final,
        progress=recipe.logging.progress_bar,
        desc="pretrain",
        nonfinite_hint="lower optim.lr, enable optim.grad_clip, or use fp32",
        profile_steps=recipe.logging.profile_steps,
        profile_dir=output_dir / "profile",
    )
    try:
        step = loop.run(
            engine,
            task,
            start_step,
            resumed=resume_from is not None,
            last_eval=(state["last_eval"] or {}).get("step"),
            on_step_end=on_step_end,
        )
    finally:
        try:
            task.wait_for_save()  # the last checkpoint is complete before the run returns
        finally:
            metrics.close()

    final_loss = state["last_train_loss"]
    summary = {
        "steps": step,
        "resumed_from_step": start_step if resume_from is not None else None,
        "tokens": state["tokens"],
        "examples_per_step": recipe.micro_batch_size * recipe.grad_accum_steps * engine.dp_world_size,
        "parameters": n_params,
        "first_loss": state["first_loss"],
        "final_loss": final_loss,
        "final_eval": state["last_eval"],
        "best_eval": state["best_eval"],
        "train_time_s": state["train_time_s"],
        "wall_time_s": time.perf_counter() - t_start,
        "tokens_per_s": task.session["tokens"] / task.session["time"] if task.session["time"] else None,
        "model_flops": state["flops"],
        "mfu": mfu(task.session["flops"] / task.n_devices, task.session["time"], peak),
        "peak_flops": peak,
        "device": str(device),
        "precision": recipe.precision,
        "data": data_stats,
    }
    if is_main:
        write_json_atomic(output_dir / "summary.json", summary)
        logger.info(
            "done: %d steps, %s tokens, %.1fs; final loss %s",
            step,
            format_count(state["tokens"]),
            summary["wall_time_s"],
            f"{final_loss:.4f}" if final_loss is not None else "n/a",
        )
    return summary


@dataclasses.dataclass
class Pretraining:
    """Masked-LM pretraining as a task on the training loop (`loop.TrainTask`): the micro batches of a step
    (the sampler's data position, the collator's step-seeded masks), the loss and its counts, the metrics
    window, evaluation and checkpoints."""

    recipe: PretrainRecipe
    engine: Any
    config: Any
    train_ds: Any
    sampler: ShardedBatchSampler
    collator: Any
    eval_batches: list[dict[str, torch.Tensor]]
    state: dict[str, Any]
    metrics: MetricsLogger
    peak: float | None

    def __post_init__(self) -> None:
        self.position = DataPosition(self.state["epoch"], self.state["index"])
        self.decoder = is_decoder_config(self.config)
        self.polarity = (
            not self.decoder
            and self.recipe.masking.uses_sentiment()
            and self.recipe.masking.polarity_weight > 0
        )
        # MFU is per device: TP ranks share a replica's FLOPs
        self.n_devices = getattr(self.engine, "world_size", 1)
        # Sums over the current logging window. The deterministic ones travel in checkpoints, so a resumed run
        # logs the same window means as an uninterrupted one.
        self.window = {**WINDOW, **(self.state.pop("window", None) or {})}
        self.session = {"tokens": 0, "flops": 0.0, "time": 0.0}
        self._saver: ThreadPoolExecutor | None = None  # publishes asynchronous saves (checkpoint.async_save)
        self._pending_save: Future | None = None

    def micro_batches(self, step: int):
        self.collator.set_step(step)
        # tokens, flops, masked, correct (+ mlm loss, polarity loss x positions, positions, correct)
        self.sums = dict.fromkeys(
            ("tokens", "flops", "masked", "correct", *(POLARITY if self.polarity else ())), 0
        )
        for i in range(self.recipe.grad_accum_steps):
            indices, self.position = self.sampler.next_batch(self.position)
            yield self.collator(rows(self.train_ds, indices)), i == self.recipe.grad_accum_steps - 1

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        loss, n_masked, n_correct = objective_loss(self.engine, batch)
        sums, tokens = self.sums, int(batch["attention_mask"].sum())
        details = self._details() if self.polarity else None
        if details:
            n_pol = details.get("polarity_n", 0)
            sums["mlm_loss"] += details["mlm_loss"] / self.recipe.grad_accum_steps
            sums["polarity_loss"] += details.get("polarity_loss", 0.0) * n_pol
            sums["polarity_n"] += n_pol
            sums["polarity_correct"] += details.get("polarity_correct", 0)
        sums["tokens"] += tokens
        shape = batch["input_ids"].shape[1]
        if self.decoder:
            sums["flops"] += decoder_training_flops(self.config, tokens, shape)
        else:
            sums["flops"] += training_flops(
                self.config, tokens, shape, n_masked, self.recipe.sparse_last_layer
            )
        sums["masked"] += n_masked
        sums["correct"] += n_correct
        routing = getattr(self.engine, "take_routing_counts", lambda: None)()
        if routing is not None:  # a MoE decoder under distributed.moe_capacity_factor
            sums["moe_routed"] = sums.get("moe_routed", 0) + routing[0]
            sums["moe_dropped"] = sums.get("moe_dropped", 0) + routing[1]
        return loss

    def _details(self) -> dict[str, float] | None:
        """The parts of the last loss (mlm.masked_lm_loss), where the objective keeps them."""
        return getattr(self.engine.objective, "last_details", None)

    def step_sums(self) -> dict[str, float]:
        return self.sums

    def end_step(self, step: int, loss: float, grad_norm: float, sums: dict, seconds: float) -> None:
        sums = {k: v if k in ("flops", "mlm_loss", "polarity_loss") else int(v) for k, v in sums.items()}
        if "mlm_loss" in sums:  # a mean over the ranks, as the loss is
            sums["mlm_loss"] /= self.engine.dp_world_size
        state, self.grad_norm = self.state, grad_norm
        if state["first_loss"] is None:
            state["first_loss"] = loss
        state.update(step=step, epoch=self.position.epoch, index=self.position.index)
        state["tokens"] += sums["tokens"]
        state["flops"] += sums["flops"]
        state["train_time_s"] += seconds
        for key, value in {"tokens": sums["tokens"], "flops": sums["flops"], "time": seconds}.items():
            self.session[key] += value
        for key, value in {"loss": loss, "steps": 1, "time": seconds, **sums}.items():
            self.window[key] += value

    def log(self, step: int) -> dict[str, str]:
        window = self.window
        record = {
            "train/loss": window["loss"] / window["steps"],
            "train/accuracy": window["correct"] / max(1, window["masked"]),
            "train/lr": self.engine.lr,
            "train/grad_norm": self.grad_norm,
            "train/tokens_per_s": window["tokens"] / window["time"],
            "train/mfu": mfu(window["flops"] / self.n_devices, window["time"], self.peak),
            "train/epoch": self.position.epoch,
            "train/tokens": self.state["tokens"],
        }
        if self.polarity and self._details() is not None:
            record["train/mlm_loss"] = window["mlm_loss"] / window["steps"]
            if window["polarity_n"]:
                record["train/polarity_loss"] = window["polarity_loss"] / window["polarity_n"]
                record["train/polarity_accuracy"] = window["polarity_correct"] / window["polarity_n"]
        if window["moe_routed"]:  # (token, expert) pairs over capacity, over every rank and MoE layer
            record["train/moe_dropped"] = window["moe_dropped"]
            record["train/moe_dropped_fraction"] = window["moe_dropped"] / window["moe_routed"]
        self.metrics.log(step, record)
        self.state["last_train_loss"] = record["train/loss"]
        self.window = dict(WINDOW)
        return {
            "loss": f"{record['train/loss']:.4f}",
            "tok_s": format_count(record["train/tokens_per_s"]),
            **({"mfu": f"{record['train/mfu']:.1%}"} if record["train/mfu"] is not None else {}),
        }

    def run_eval(self, step: int) -> bool:
        result = evaluate(self.engine, self.eval_batches) if self.eval_batches else {}
        if result:
            state = self.state
            state["last_eval"] = {"step": step, **result}
            if state["best_eval"] is None or result["eval/loss"] < state["best_eval"]["eval/loss"]:
                state["best_eval"] = {"step": step, **result}
            self.metrics.log(step, result)
            if self.engine.is_main:  # tqdm.write prints even through a disabled bar
                tqdm.write(
                    f"step {step}: eval loss {result['eval/loss']:.4f}  ppl {result['eval/perplexity']:.2f}  "
                    f"acc {result['eval/accuracy']:.4f}"
                )
        return False

    def save(self, step: int) -> None:
        """Write checkpoint-<step>: the loop's state (step, data position, window, RNG, recipe) and the engine's.
        Under `checkpoint.async_save` on an engine that saves in the background (the pipeline's), wait for the
        previous save, copy the state and return; the checkpoint is published when every rank's files are
        written (`checkpoint.save_checkpoint_async`)."""
        engine, recipe, output_dir = self.engine, self.recipe, Path(self.recipe.output_dir)
        single = engine.backend == "single"
        background = recipe.checkpoint.async_save and engine.backend == "pipeline"
        self.wait_for_save()

        def write(tmp: Path):
            ckpt.save_rng_state(tmp, rank=engine.rank)
            if engine.is_main:
                deterministic = {k: self.window[k] for k in (*DETERMINISTIC_WINDOW, *POLARITY)}
                ckpt.write_json(tmp / "trainer_state.json", {**self.state, "window": deterministic})
                (tmp / "recipe.yaml").write_text(recipe_to_yaml(recipe), encoding="utf-8")
            # last: a sharded engine writes its shard on every rank, then synchronises (or, in the background,
            # returns the future of every rank's write)
            return engine.save(tmp, asynchronous=True) if background else engine.save(tmp)

        if background:
            if self._saver is None:
                self._saver = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-publish")
            self._pending_save = ckpt.save_checkpoint_async(
                output_dir,
                step,
                write,
                executor=self._saver,
                is_main=engine.is_main,
                on_published=self._published,
            )
            return
        path = ckpt.save_checkpoint(
            output_dir, step, write, is_main=engine.is_main, barrier=None if single else engine.barrier
        )
        if engine.is_main:
            self._published(path)

    def _published(self, path: Path) -> None:
        """Rotation, on the main rank, once a checkpoint is in place."""
        output_dir = Path(self.recipe.output_dir)
        removed = ckpt.rotate_checkpoints(output_dir, self.recipe.checkpoint.keep_last, REQUIRED_FILES)
        logger.info("saved %s%s", path, f"; removed {', '.join(p.name for p in removed)}" if removed else "")

    def wait_for_save(self) -> None:
        """Block until the save in the background (if any) is complete; re-raises its error."""
        pending, self._pending_save = self._pending_save, None
        if pending is not None:
            pending.result()


#: Window sums that travel in checkpoints (a resumed run logs the same means as an uninterrupted one).
DETERMINISTIC_WINDOW = ("loss", "steps", "masked", "correct")
POLARITY = ("mlm_loss", "polarity_loss", "polarity_n", "polarity_correct")
WINDOW = {"loss": 0.0, "steps": 0, "tokens": 0, "flops": 0.0, "time": 0.0, "masked": 0, "correct": 0}
WINDOW.update(dict.fromkeys(POLARITY, 0))
WINDOW.update(moe_routed=0, moe_dropped=0)  # MoE token dropping (distributed.moe_capacity_factor)


def _collator(recipe: PretrainRecipe, tokenizer, seed: int, eval_strategy: bool = False):
    """The recipe's knowledge-masking collator: its masking schedule, or the constant `masking.eval_strategy`."""
    from ernie_zoo.masking import KnowledgeMaskingCollator, MaskingSchedule

    m = recipe.masking
    schedule = (
        MaskingSchedule.constant(m.eval_strategy)
        if eval_strategy
        else MaskingSchedule.from_config(m.schedule)
    )
    return KnowledgeMaskingCollator(
        tokenizer, schedule=schedule, mlm_probability=m.mlm_probability, max_ngram=m.max_ngram, seed=seed
    )


def _eval_batches(recipe: PretrainRecipe, tokenizer, eval_ds, collator=None) -> list[dict[str, torch.Tensor]]:
    """The held-out split, masked once with `masking.eval_strategy` (fixed masks, comparable over time); a
    decoder's (`collator` given) packed rows as they are."""
    if eval_ds is None or len(eval_ds) == 0:
        return []
    collator = collator or _collator(recipe, tokenizer, recipe.seed + 7919, eval_strategy=True)
    collator.set_step(0)
    size = recipe.eval.batch_size or recipe.micro_batch_size
    batches = []
    for start in range(0, len(eval_ds), size):
        if recipe.eval.max_batches is not None and len(batches) >= recipe.eval.max_batches:
            break
        batch = collator(rows(eval_ds, range(start, min(start + size, len(eval_ds)))))
        # eval/loss stays the masked-LM loss alone: comparable between runs with the polarity objective and without
        batch.pop("polarity_labels", None)
        batches.append(batch)
    return batches


# ---------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    """Console script `ernie-pretrain RECIPE.yaml [--key value ...]`; any error is one line (`--debug`: traceback)."""
    return run_console("ernie-pretrain", _main, argv)


def _main(argv: list[str]) -> int:
    usage = "\n\n".join(__doc__.split("\n\n")[:2])  # the title and the example commands
    recipe = recipe_from_cli(argv, PretrainRecipe, "ernie-pretrain", usage)
    if isinstance(recipe, int):  # --help, --print_config or an error
        return recipe
    is_main = int(os.environ.get("RANK", "0")) == 0  # under torchrun / deepspeed: only rank 0 reports
    logging.basicConfig(
        level=logging.INFO if is_main else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        summary = pretrain(recipe)
    except (ValueError, FileNotFoundError, FloatingPointError) as e:
        logger.error("%s", e)
        return 1
    finish_distributed()
    if not is_main:
        return 0
    print(
        f"ernie-pretrain: {summary['steps']} steps, final loss "
        f"{summary['final_loss'] if summary['final_loss'] is None else round(summary['final_loss'], 4)}, "
        f"summary in {Path(recipe.output_dir) / 'summary.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
