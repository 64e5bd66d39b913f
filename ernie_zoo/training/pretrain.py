"""`ernie-pretrain`: masked-LM pretraining of an ErnieZoo encoder with ERNIE's staged knowledge masking.

    ernie-pretrain recipes/pretrain/tiny-cpu.yaml                       # train (auto-resumes if interrupted)
    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --optim.lr 1e-3 --max_steps 50
    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --resume              # must continue from a checkpoint
    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --print_config        # the resolved recipe as YAML
    ernie-pretrain --help                                               # every recipe key with its help

One optimizer step (grad_accum_steps micro batches)::

    collator.set_step(step)                       masks depend only on (seed, step): resumable
    for each micro batch:
        rows = train[next indices of the epoch's seeded permutation, this data-parallel rank's share]
        batch = KnowledgeMaskingCollator(rows)     char / phrase / entity / sentiment masking by the schedule's stage
        loss = engine.loss(batch)                  masked_lm_loss (mlm.py): logits at masked positions only
                                                   (+ polarity_weight x the sentiment-word polarity loss, SKEP)
        engine.backward(loss / grad_accum_steps)
    engine.step()                                  clip, AdamW, LR schedule
    log / eval / checkpoint at their intervals

Model building, backward, the optimizer step and checkpoint save/load live in the engine (engine.py), so a
sharded backend (DeepSpeed ZeRO-3 + tensor parallelism) replaces them without touching this loop.

Exact resume: a checkpoint holds the weights, AdamW and LR-schedule state, the RNG states and the data
position; masks are a function of (seed, step), so a run killed at any point and resumed from its newest
valid checkpoint produces the same losses and the same final weights as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from ernie_zoo.utils import atomic_write_text, resolve_device, run_console

from . import checkpoint as ckpt
from .core import seed_everything
from .data import DataPosition, ShardedBatchSampler, load_dataset, load_tokenizer, rows
from .engine import build_model_config, build_model_for, make_engine
from .logging_utils import MetricsLogger, format_count, progress_bar, write_json_atomic
from .mfu import mfu, peak_flops_for, training_flops
from .mlm import masked_lm_loss  # noqa: F401  (re-exported: the loop's loss lives in mlm.py)
from .recipe import PretrainRecipe, recipe_from_cli, recipe_to_yaml, to_dict

logger = logging.getLogger(__name__)

#: Test hook: SIGKILL this process right after the optimizer step with this number (exact-resume tests).
KILL_ENV = "ERNIE_ZOO_TEST_KILL_AT_STEP"
#: Files every checkpoint of the loop has (the engine's own files are checked by its load()).
REQUIRED_FILES = ("model.safetensors", "trainer_state.json", "rng.json", "recipe.yaml")


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
            loss, n, c = engine.loss(batches[j if j < len(batches) else 0])
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
    """The checkpoint to continue from, by `recipe.resume`."""
    mode = recipe.resume
    if mode in ("auto", "latest"):
        found = ckpt.latest_valid_checkpoint(
            output_dir, REQUIRED_FILES, start_fresh="choose another output_dir"
        )
        if found is None and mode == "latest":
            raise ValueError(f"resume=latest, but {output_dir} holds no valid checkpoint")
        return found
    if mode == "never":
        existing = ckpt.list_checkpoints(output_dir)
        if existing:
            raise ValueError(
                f"resume=never, but {output_dir} already holds {existing[-1].name}: choose another output_dir, "
                "delete the checkpoints, or resume"
            )
        return None
    path = Path(mode)
    problem = ckpt.verify_checkpoint(path, REQUIRED_FILES) if path.is_dir() else "not a directory"
    if problem:
        raise ValueError(f"recipe key 'resume' = {mode!r}: cannot resume from it: {problem}")
    return path


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
    resume_from = _resume_dir(recipe, output_dir)

    # ---- tokenizer and data (errors about the data surface here, before any model is built)
    # Only the main process (RANK 0) talks: logs, progress bars, metrics, TensorBoard, summary.json.
    is_main = int(os.environ.get("RANK", "0")) == 0
    tokenizer = load_tokenizer(recipe, output_dir)
    train_ds, eval_ds, data_stats = load_dataset(recipe, tokenizer)
    if is_main:
        logger.info(
            "data: %d train / %d eval examples", data_stats["train_examples"], data_stats["eval_examples"]
        )

    # ---- model and engine (ZeRO-3 builds the model already partitioned: no rank holds all of it)
    config = build_model_config(recipe.model, len(tokenizer), recipe.data.max_seq_len)
    # SKEP: a sentiment stage trains a word-polarity head (positive / negative) next to the MLM head
    polarity = recipe.masking.uses_sentiment() and recipe.masking.polarity_weight > 0
    if polarity:
        config.num_word_polarities = 2
    # A resumed run loads its weights from the checkpoint: model.init_from only seeds a fresh start.
    build_recipe = (
        recipe
        if resume_from is None
        else dataclasses.replace(recipe, model=dataclasses.replace(recipe.model, init_from=None))
    )
    model = build_model_for(build_recipe, config, tokenizer)
    engine = make_engine(recipe, model, device)
    model = engine.model
    is_main = engine.is_main
    n_params = engine.num_parameters()
    n_devices = getattr(engine, "world_size", 1)  # MFU is per device: TP ranks share one replica's FLOPs
    if is_main:
        logger.info("model: %s parameters, %s", format_count(n_params), device)
    sampler = ShardedBatchSampler(
        len(train_ds), recipe.micro_batch_size, recipe.seed, engine.dp_rank, engine.dp_world_size
    )

    from ernie_zoo.masking import KnowledgeMaskingCollator, MaskingSchedule

    m = recipe.masking
    collator = KnowledgeMaskingCollator(
        tokenizer,
        schedule=MaskingSchedule.from_config(m.schedule),
        mlm_probability=m.mlm_probability,
        max_ngram=m.max_ngram,
        seed=recipe.seed + 1_000_003 * engine.dp_rank,  # ranks mask differently; rank 0 uses the seed itself
    )
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
    }
    if resume_from is not None:
        engine.load(resume_from)
        ckpt.load_rng_state(resume_from, rank=getattr(engine, "rank", 0))
        state.update(ckpt.read_json(resume_from / "trainer_state.json"))
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
    position = DataPosition(state["epoch"], state["index"])
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
    bar = progress_bar(recipe.max_steps, start_step, enabled=recipe.logging.progress_bar and is_main)
    kill_at = int(os.environ.get(KILL_ENV, "0") or 0)

    def save(step: int) -> None:
        rank = getattr(engine, "rank", 0)

        def write(tmp: Path) -> None:
            ckpt.save_rng_state(tmp, rank=rank)
            if engine.is_main:
                deterministic = {k: window[k] for k in (*DETERMINISTIC_WINDOW, *POLARITY_WINDOW)}
                ckpt.write_json(tmp / "trainer_state.json", {**state, "window": deterministic})
                (tmp / "recipe.yaml").write_text(recipe_to_yaml(recipe), encoding="utf-8")
            engine.save(tmp)  # last: a sharded engine writes its shard on every rank, then synchronises

        path = ckpt.save_checkpoint(
            output_dir, step, write, is_main=engine.is_main, barrier=getattr(engine, "barrier", None)
        )
        if engine.is_main:
            removed = ckpt.rotate_checkpoints(output_dir, recipe.checkpoint.keep_last, REQUIRED_FILES)
            logger.info(
                "saved %s%s", path, f"; removed {', '.join(p.name for p in removed)}" if removed else ""
            )

    def run_eval(step: int) -> None:
        if not eval_batches:
            return
        result = evaluate(engine, eval_batches)
        if not result:
            return
        state["last_eval"] = {"step": step, **result}
        if state["best_eval"] is None or result["eval/loss"] < state["best_eval"]["eval/loss"]:
            state["best_eval"] = {"step": step, **result}
        metrics.log(step, result)
        if is_main:  # tqdm.write prints even through a disabled bar
            bar.write(
                f"step {step}: eval loss {result['eval/loss']:.4f}  ppl {result['eval/perplexity']:.2f}  "
                f"acc {result['eval/accuracy']:.4f}"
            )

    # ---- the loop
    model.train()
    step = start_step
    # Sums over the current logging window. The deterministic ones travel in checkpoints, so a resumed run
    # logs the same window means as an uninterrupted one.
    window = _new_window()
    window.update(state.pop("window", None) or {})
    session_tokens, session_flops, session_time = 0, 0.0, 0.0
    last_saved = start_step if resume_from is not None else None
    try:
        while step < recipe.max_steps:
            t0 = time.perf_counter()
            collator.set_step(step)
            step_loss, step_tokens, step_flops, step_masked, step_correct = 0.0, 0, 0.0, 0, 0
            step_parts = [0.0, 0.0, 0, 0]  # mlm loss, polarity loss x positions, polarity positions, correct
            for _ in range(recipe.grad_accum_steps):
                indices, position = sampler.next_batch(position)
                batch = collator(rows(train_ds, indices))
                loss, n_masked, n_correct = engine.loss(batch)
                engine.backward(loss / recipe.grad_accum_steps)
                details = getattr(engine, "last_details", None) if polarity else None
                if details:
                    step_parts[0] += details["mlm_loss"] / recipe.grad_accum_steps
                    n_pol = details.get("polarity_n", 0)
                    step_parts[1] += details.get("polarity_loss", 0.0) * n_pol
                    step_parts[2] += n_pol
                    step_parts[3] += details.get("polarity_correct", 0)
                tokens = int(batch["attention_mask"].sum())
                step_loss += float(loss.detach()) / recipe.grad_accum_steps
                step_tokens += tokens
                step_flops += training_flops(
                    config, tokens, batch["input_ids"].shape[1], n_masked, recipe.sparse_last_layer
                )
                step_masked += n_masked
                step_correct += n_correct
            grad_norm = engine.step()
            step += 1
            dt = time.perf_counter() - t0
            if on_step_end is not None:  # this rank's own numbers
                on_step_end(
                    step, {"loss": step_loss, "tokens": step_tokens, "masked": step_masked, "seconds": dt}
                )
            # The step over all data-parallel ranks (one small all-reduce): the loss is the mean of the ranks'
            # losses, the counts are sums. Every rank then logs, checks and checkpoints the same numbers.
            loss_sum, tokens_sum, flops_sum, masked_sum, correct_sum, *parts_sum = engine.dp_sum(
                [
                    step_loss,
                    step_tokens,
                    step_flops,
                    step_masked,
                    step_correct,
                    *(step_parts if polarity else []),
                ]
            )
            step_loss = loss_sum / engine.dp_world_size
            if not math.isfinite(step_loss):
                raise FloatingPointError(
                    f"loss is {step_loss} at step {step}: lower optim.lr, enable optim.grad_clip, or use fp32"
                )
            if state["first_loss"] is None:
                state["first_loss"] = step_loss
            state.update(step=step, epoch=position.epoch, index=position.index)
            state["tokens"] += int(tokens_sum)
            state["flops"] += flops_sum
            state["train_time_s"] += dt
            session_tokens += int(tokens_sum)
            session_flops += flops_sum
            session_time += dt
            for key, value in (
                ("loss", step_loss),
                ("steps", 1),
                ("tokens", int(tokens_sum)),
                ("flops", flops_sum),
                ("time", dt),
                ("masked", int(masked_sum)),
                ("correct", int(correct_sum)),
            ):
                window[key] += value
            if parts_sum:
                window["mlm_loss"] += parts_sum[0] / engine.dp_world_size
                window["polarity_loss"] += parts_sum[1]
                window["polarity_n"] += int(parts_sum[2])
                window["polarity_correct"] += int(parts_sum[3])
            bar.update(1)

            if step % recipe.logging.interval == 0 or step == recipe.max_steps:
                record = {
                    "train/loss": window["loss"] / window["steps"],
                    "train/accuracy": window["correct"] / max(1, window["masked"]),
                    "train/lr": engine.lr,
                    "train/grad_norm": grad_norm,
                    "train/tokens_per_s": window["tokens"] / window["time"],
                    "train/mfu": mfu(window["flops"] / n_devices, window["time"], peak),
                    "train/epoch": position.epoch,
                    "train/tokens": state["tokens"],
                }
                if polarity and getattr(engine, "last_details", None) is not None:
                    record["train/mlm_loss"] = window["mlm_loss"] / window["steps"]
                    if window["polarity_n"]:
                        record["train/polarity_loss"] = window["polarity_loss"] / window["polarity_n"]
                        record["train/polarity_accuracy"] = window["polarity_correct"] / window["polarity_n"]
                metrics.log(step, record)
                state["last_train_loss"] = record["train/loss"]
                bar.set_postfix(
                    loss=f"{record['train/loss']:.4f}",
                    tok_s=format_count(record["train/tokens_per_s"]),
                    **({"mfu": f"{record['train/mfu']:.1%}"} if record["train/mfu"] is not None else {}),
                )
                window = _new_window()
            if recipe.eval.interval and step % recipe.eval.interval == 0:
                run_eval(step)
            if recipe.checkpoint.interval and step % recipe.checkpoint.interval == 0:
                save(step)
                last_saved = step
            if step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

        if state["last_eval"] is None or state["last_eval"]["step"] != step:
            run_eval(step)
        if recipe.checkpoint.save_final and last_saved != step:
            save(step)
    finally:
        bar.close()
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
        "tokens_per_s": session_tokens / session_time if session_time else None,
        "model_flops": state["flops"],
        "mfu": mfu(session_flops / n_devices, session_time, peak),
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


#: Window sums that travel in checkpoints (a resumed run logs the same means as an uninterrupted one).
DETERMINISTIC_WINDOW = ("loss", "steps", "masked", "correct")
POLARITY_WINDOW = ("mlm_loss", "polarity_loss", "polarity_n", "polarity_correct")


def _new_window() -> dict[str, float]:
    return {
        "loss": 0.0,
        "steps": 0,
        "tokens": 0,
        "flops": 0.0,
        "time": 0.0,
        "masked": 0,
        "correct": 0,
        **dict.fromkeys(POLARITY_WINDOW, 0),
    }


def _eval_batches(recipe: PretrainRecipe, tokenizer, eval_ds) -> list[dict[str, torch.Tensor]]:
    """The held-out split, masked once with `masking.eval_strategy` (fixed masks, comparable over time)."""
    if eval_ds is None or len(eval_ds) == 0:
        return []
    from ernie_zoo.masking import KnowledgeMaskingCollator, MaskingSchedule

    m = recipe.masking
    collator = KnowledgeMaskingCollator(
        tokenizer,
        schedule=MaskingSchedule.constant(m.eval_strategy),
        mlm_probability=m.mlm_probability,
        max_ngram=m.max_ngram,
        seed=recipe.seed + 7919,
    )
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
