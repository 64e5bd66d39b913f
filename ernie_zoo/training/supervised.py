"""Supervised training of a model on encoded examples, for any `SupervisedJob` (fine-tuning's is
`ernie_zoo.finetune.run.FinetuneJob`): the whole run (`run_supervised`), its training task on the one loop
(`SupervisedTraining`, a `loop.TrainTask`), its checkpoints and its output directory.

    output_dir and resume checked ─ process group (DeepSpeed) ─ seed ─ job.prepare: tokenizer, encoded splits
        ─ job.build_model (under ZeRO-3 already partitioned: `backends.zero3_build_context`) ─ output_dir made
        ─ job.adapt (full / peft / bottleneck) ─ engine (`backends.make_engine`) + AdamW + warm-up/decay
        ─ `SupervisedTraining` on `loop.TrainLoop`: every eval_every steps dev metric → best → last → early stop?
        ─ best weights restored (ZeRO: the model rebuilt whole on rank 0) ─ dev/test scores ─ job.export
        ─ eval_results.json

The job says what is built, how it adapts, scores and exports; everything else (engine, ZeRO-3, checkpoints, data
order, resume, clean-up after a failure) is here, so training/ never calls back into the package that runs it
except through the job object. Checkpoints hold only the trainable parameters (safetensors), the optimizer
(safetensors + json), the scheduler and the RNG states (json): no pickle. Data order is a seeded permutation per
epoch, so a resumed run replays exactly the batches the interrupted one would have seen. Under DeepSpeed, every
rank reads its share of each of those batches; under ZeRO-3 every rank builds the model already partitioned,
rank 0 writes (each rank adds its ZeRO-3 optimizer partition and RNG state to the checkpoints), and after
training rank 0 rebuilds the model whole from the base and the best trainable weights (the ZeRO shards
consolidated) to score and export it as one process would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ernie_zoo.parallel.deepspeed_backend import offloads_optimizer
from ernie_zoo.utils import atomic_directory, atomic_write_text, resolve_device

from .backends import make_engine, task_deepspeed_config, zero3_build_context
from .checkpoint import (
    list_checkpoints,
    load_json_state,
    load_rng_state,
    read_json,
    remove_stale_temporaries,
    resume_checkpoint,
    rotate_checkpoints,
    save_checkpoint,
    save_json_state,
    save_rng_state,
    write_json,
)
from .core import adamw, seed_everything, warmup_decay
from .deepspeed_engine import is_partitioned, save_partitioned_weights
from .engine import load_trainable_state
from .loop import TrainLoop

logger = logging.getLogger(__name__)

TRAINABLE = "trainable.safetensors"
#: Files every checkpoint of a supervised run has (checked before resuming from one and before counting it in
#: rotation).
CHECKPOINT_FILES = (TRAINABLE, "trainer_state.json")
IGNORE = -100
#: What each model input is padded with (`input_ids`: the tokenizer's padding id).
PAD_VALUES = {
    "input_ids": None,
    "attention_mask": 0,
    "token_type_ids": 0,
    "pinyin_ids": 0,
    "lexicon_ids": 0,
    "labels": IGNORE,
}
#: Prefixes of the two halves of a preference pair (`chosen_input_ids`, ...): each key pads as the input it names.
PAIR_SIDES = ("chosen_", "rejected_")


def collate(features: Sequence[dict[str, Any]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad the model inputs of `features` into tensors (keys starting with "_" are skipped)."""
    keys = [k for k in features[0] if not k.startswith("_")]
    batch: dict[str, torch.Tensor] = {}
    for key in keys:
        values = [f[key] for f in features]
        if key == "labels" and not isinstance(values[0], list):  # one label per sequence
            batch[key] = torch.tensor(values)
            continue
        if key == "labels" and values and values[0] and isinstance(values[0][0], float):  # multi-hot
            batch[key] = torch.tensor(values, dtype=torch.float)
            continue
        name = next((key[len(side) :] for side in PAIR_SIDES if key.startswith(side)), key)
        pad = pad_token_id if name == "input_ids" else PAD_VALUES.get(name, 0)
        width = max(len(v) for v in values)
        batch[key] = torch.tensor([list(v) + [pad] * (width - len(v)) for v in values], dtype=torch.long)
    return batch


def drop_tokens(
    batch: dict[str, torch.Tensor],
    p: float,
    mask_token_id: int,
    special_ids: Sequence[int],
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """Token dropout (train.token_dropout): a copy of `batch` in which each real token (attention mask 1, not a
    special id) is replaced by `mask_token_id` with probability `p`, its pinyin_ids (if any) set to 0 as the
    pretraining masker does. Labels and the other inputs are unchanged."""
    ids = batch["input_ids"]
    real = ~torch.isin(ids, torch.tensor(list(special_ids), dtype=ids.dtype))
    if "attention_mask" in batch:
        real &= batch["attention_mask"].bool()
    drop = real & (torch.rand(ids.shape, generator=generator) < p)
    out = dict(batch)
    out["input_ids"] = ids.masked_fill(drop, mask_token_id)
    if "pinyin_ids" in batch:
        out["pinyin_ids"] = batch["pinyin_ids"].masked_fill(drop, 0)
    return out


def _save_base(
    model: nn.Module, tokenizer, directory: Path, with_weights: bool, is_main: bool = True
) -> None:
    """Rank 0 writes the tokenizer (and the weights) to `directory`. A ZeRO-3 partitioned model's weights are
    gathered one parameter at a time as they are written: every rank calls this then."""
    partitioned = with_weights and is_partitioned(model)
    if not is_main:
        if partitioned:
            save_partitioned_weights(model, None)
        return
    with atomic_directory(directory) as tmp:
        tokenizer.save_pretrained(str(tmp))
        if partitioned:
            model.save_pretrained(str(tmp), state_dict={})  # config and what the model saves besides weights
            save_partitioned_weights(model, tmp / "model.safetensors")
        elif with_weights:
            model.save_pretrained(str(tmp))


def _cpu(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().cpu() for k, v in state.items()}


def deepspeed_config(recipe) -> dict[str, Any]:
    """`backends.task_deepspeed_config` with the recipe's DeepSpeed json, TP size, ZeRO stage, batch,
    accumulation, clipping and offload settings (a `distributed.backend: deepspeed` run, process group started).
    `recipe`: a fine-tuning recipe (its `train` and `distributed` sections)."""
    from ernie_zoo.parallel.deepspeed_backend import offload_kwargs

    t, d = recipe.train, recipe.distributed
    return task_deepspeed_config(
        d.deepspeed_config,
        tp_size=d.tp_size,
        zero_stage=d.zero_stage,
        batch_size=t.batch_size,
        grad_accum=t.grad_accum,
        max_grad_norm=t.max_grad_norm,
        offload=offload_kwargs(recipe),
    )


def steps_of(t, n_train: int) -> tuple[int, int]:
    """(optimizer steps per epoch, total steps) of a run with `n_train` training examples."""
    per_epoch = max(1, math.ceil(math.ceil(n_train / t.batch_size) / t.grad_accum))
    return per_epoch, t.max_steps or max(1, math.ceil(t.epochs * per_epoch))


class SupervisedTraining:
    """A job's training as a task on `loop.TrainLoop` (`TrainTask`): an adapted model on encoded features; see
    the module docstring. `method`: what the job's `adapt` returned (`.name`: the method's name);
    `teachers`: the job's distillation loss or None; `ds_config`: the run's DeepSpeed config
    (`deepspeed_config`; None on the single backend), the one its model was built with."""

    def __init__(
        self,
        job: SupervisedJob,
        model: nn.Module,
        tokenizer,
        features: dict[str, list],
        output_dir: Path,
        device: torch.device,
        method: Any,
        teachers: Any = None,
        ds_config: dict[str, Any] | None = None,
    ):
        self.job, self.t = job, job.recipe.train
        self.tokenizer = tokenizer
        self.features = features
        self.output_dir = output_dir
        self.method = method
        self.steps_per_epoch, self.total_steps = steps_of(self.t, len(features["train"]))
        self.eval_every = self.t.eval_every or self.steps_per_epoch
        lr = self.t.learning_rate or job.default_learning_rate(method.name)
        # ZeRO-Offload steps the optimizer on the host (DeepSpeed's CPU Adam): read from the run's one config
        cpu_adam = ds_config is not None and offloads_optimizer(ds_config)
        optimizer = adamw(
            model,
            lr,
            self.t.weight_decay,
            cpu_adam=cpu_adam,
            head_modules=tuple(getattr(method, "modules_to_save", ())),
            head_lr=self.t.head_learning_rate,
        )
        scheduler = warmup_decay(
            optimizer,
            warmup_steps=int(self.t.warmup_ratio * self.total_steps),
            total_steps=self.total_steps,
            decay="linear",
        )
        self.engine = make_engine(
            job.recipe.distributed.backend,
            model,
            optimizer,
            scheduler,
            max_grad_norm=self.t.max_grad_norm,
            device=device,
            ds_config=ds_config,
            batch_size=self.t.batch_size,
            n_train=len(features["train"]),
        )
        # the engine's: under DeepSpeed the wrapped optimizer / scheduler and each rank's own device
        e = self.engine
        self.model, self.optimizer, self.scheduler, self.device = e.model, e.optimizer, e.scheduler, e.device
        self.state: dict[str, Any] = {
            "global_step": 0,
            "epoch": 0,
            "batch_in_epoch": 0,
            "best_metric": None,
            "best_step": None,
            "bad_evals": 0,
            "history": [],
            "stopped_early": False,
        }
        # train.token_dropout: the id a dropped token becomes and the ids it never touches, resolved once.
        self._drop_ids: tuple[int, list[int]] | None = None
        if self.t.token_dropout > 0:
            if tokenizer.mask_token_id is None:
                raise ValueError(
                    "train.token_dropout needs a tokenizer with a [MASK] token; this one has none"
                )
            self._drop_ids = (tokenizer.mask_token_id, tokenizer.all_special_ids)
        self.teachers = teachers  # train.distill_from, loaded (and checked) by the job
        self._resumed = False
        self.writer = None
        if self.t.tensorboard and self.engine.is_main:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(output_dir / "runs"))

    # ------------------------------------------------------------- checkpoints
    @property
    def ckpt_dir(self) -> Path:
        return self.output_dir / "checkpoints"

    def save_best(self) -> None:
        """checkpoints/best: the trainable weights (every rank takes part; rank 0 writes)."""
        weights = self.engine.trainable_state()
        if self.engine.is_main:
            with atomic_directory(self.ckpt_dir / "best") as tmp:
                save_file(_cpu(weights), str(tmp / TRAINABLE))
                write_json(
                    tmp / "best.json",
                    {"step": self.state["global_step"], "metric": self.state["best_metric"]},
                )
        self.engine.barrier()

    def _update_train_seconds(self) -> None:
        clock = getattr(self, "_clock", None)
        if clock is not None:
            self.state["train_seconds"] = clock[0] + time.perf_counter() - clock[1]

    def save_last(self) -> None:
        """checkpoints/checkpoint-<step> (atomic, with a manifest); only the newest is kept. Under DeepSpeed every
        rank adds its optimizer partition and RNG state to the shared directory; rank 0 publishes it."""

        self._update_train_seconds()
        weights = self.engine.trainable_state()
        engine = self.engine
        layout = engine.layout()

        def write(tmp: Path) -> None:
            if engine.is_main:
                save_file(_cpu(weights), str(tmp / TRAINABLE))
                save_json_state(self.scheduler, tmp / "scheduler.json", "LR scheduler")
                write_json(
                    tmp / "trainer_state.json",
                    {
                        "state": self.state,
                        "method": self.method.name,
                        "total_steps": self.total_steps,
                        "data_order": self._data_order(),
                        **({} if layout == {"backend": "single"} else {"layout": layout}),
                    },
                )
            engine.save_optimizer_state(tmp)
            save_rng_state(tmp, rank=engine.rank)

        distributed = engine.backend != "single"
        save_checkpoint(
            self.ckpt_dir,
            self.state["global_step"],
            write,
            is_main=engine.is_main,
            barrier=engine.barrier if distributed else None,
        )
        if engine.is_main:
            rotate_checkpoints(self.ckpt_dir, keep_last=1, required=CHECKPOINT_FILES)
        engine.barrier()

    def _data_order(self) -> dict[str, Any]:
        """The settings that fix which batches each step sees (a resume must keep them)."""
        return {
            "seed": self.t.seed,
            "batch_size": self.t.batch_size,
            "group_by_length": self.t.group_by_length,
            "token_dropout": self.t.token_dropout,
        }

    def _drop_tokens(self, batch: dict[str, torch.Tensor], epoch: int, index: int) -> dict[str, torch.Tensor]:
        """train.token_dropout on one batch; the masks depend only on (seed, epoch, batch index), so a resumed
        run draws the same ones."""
        mask_id, special_ids = self._drop_ids
        generator = torch.Generator().manual_seed((self.t.seed * 1_000_003 + epoch) * 1_000_003 + index)
        return drop_tokens(batch, self.t.token_dropout, mask_id, special_ids, generator)

    def resume(self, checkpoint: Path) -> None:
        saved = read_json(checkpoint / "trainer_state.json")
        layout = saved.get("layout", {"backend": "single"})
        if layout != self.engine.layout():
            raise ValueError(
                f"{checkpoint} was written by a run laid out as {layout}, this run is {self.engine.layout()}: its "
                "optimizer state only fits the same backend, ranks and ZeRO stage; run it that way, or start afresh "
                "with train.overwrite true"
            )
        if saved["method"] != self.method.name:
            raise ValueError(
                f"{checkpoint} was trained with method {saved['method']!r}, not {self.method.name!r}"
            )
        current = self._data_order()
        for key, value in (saved.get("data_order") or {}).items():  # checkpoints before it lack the record
            if current[key] != value:
                raise ValueError(
                    f"{checkpoint} was trained with train.{key}={value!r}, not {current[key]!r}: the "
                    "resumed run would see a different data order; set it back, or start afresh with "
                    "train.overwrite true"
                )
        if self.engine.backend == "single":  # deepspeed, any stage: the saved fp32 masters are the weights
            self.engine.load_trainable_state(load_file(str(checkpoint / TRAINABLE), device=str(self.device)))
        self.engine.load_optimizer_state(checkpoint)
        load_json_state(self.scheduler, checkpoint / "scheduler.json")
        load_rng_state(checkpoint, rank=self.engine.rank)
        self.state, self._resumed = saved["state"], True
        logger.info("resumed from %s at step %d", checkpoint, self.state["global_step"])

    # ------------------------------------------------------------- evaluation
    def evaluate(self, split: str) -> dict[str, Any]:
        return self.job.evaluate(
            self.model, self.features[split], split, self.tokenizer, self.t.eval_batch_size, self.device
        )

    def _is_better(self, value: float) -> bool:
        best = self.state["best_metric"]
        if best is None:
            return True
        return value > best if self.job.greater_is_better() else value < best

    def run_eval(self, step: int) -> bool:
        """Evaluate on dev (if any) and keep the best (the loop then saves `last`). Returns True to stop early."""
        stop = False
        if "dev" in self.features:
            scores = self.evaluate("dev")
            metric = self.job.metric
            if metric not in scores:
                raise ValueError(
                    f"train.metric {metric!r} is not among the dev scores "
                    f"{sorted(k for k, v in scores.items() if isinstance(v, float))}"
                )
            value = self.engine.agree(float(scores[metric]))  # every rank takes rank 0's decisions
            self.state["history"].append(
                {"step": step, **{k: v for k, v in scores.items() if isinstance(v, (int, float))}}
            )
            if self.writer is not None:
                for k, v in scores.items():
                    if isinstance(v, (int, float)):
                        self.writer.add_scalar(f"dev/{k}", v, step)
            logger.info("step %d: dev %s = %.4f", step, metric, value)
            if self._is_better(value):
                self.state.update(best_metric=value, best_step=step, bad_evals=0)
                self.save_best()
            else:
                self.state["bad_evals"] += 1
                stop = self.t.patience > 0 and self.state["bad_evals"] >= self.t.patience
        else:
            self.state.update(best_step=step)
            self.save_best()
        self.state["stopped_early"] = stop
        return stop

    # ------------------------------------------------------------- training
    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        """This epoch's batches of training-example indices: a seeded permutation cut into batches, or with
        train.group_by_length the permutation sorted by length within windows of 50 batches, cut, and the batches
        shuffled again (the same seed, so a resumed run sees the same batches)."""
        train, size = self.features["train"], self.t.batch_size
        g = torch.Generator().manual_seed(self.t.seed * 1000 + epoch)
        order = torch.randperm(len(train), generator=g).tolist()
        if not self.t.group_by_length:
            return [order[i : i + size] for i in range(0, len(order), size)]
        window = size * 50
        batches = []
        for w in range(0, len(order), window):
            part = sorted(order[w : w + window], key=lambda i: len(train[i]["input_ids"]), reverse=True)
            batches += [part[i : i + size] for i in range(0, len(part), size)]
        return [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]

    # ------------------------------------------------------------- the task on training.loop.TrainLoop
    def micro_batches(self, step: int):
        """The step's batches: the next `train.grad_accum` of the epoch's (fewer at the epoch's end; a step never
        spans two epochs), each collated, token-dropped, moved and cut to this rank's rows."""
        st, t = self.state, self.t
        if st["batch_in_epoch"] >= len(self._batches_of(st["epoch"])):  # the last epoch's end: the next epoch
            st.update(epoch=st["epoch"] + 1, batch_in_epoch=0)
        batches, first = self._batches_of(st["epoch"]), st["batch_in_epoch"]
        end = min(first + t.grad_accum, len(batches))
        for b in range(first, end):
            clean = collate([self.features["train"][i] for i in batches[b]], self.tokenizer.pad_token_id)
            inputs = self._drop_tokens(clean, st["epoch"], b) if t.token_dropout > 0 else clean
            inputs = self.engine.shard({k: v.to(self.device) for k, v in inputs.items()})
            # train.distill_from: the teachers read the batch as it was before token dropout
            if self.teachers is not None:
                self._clean = {k: v.to(self.device) for k, v in clean.items()} if t.token_dropout else inputs
            yield inputs, b + 1 == end
            st["batch_in_epoch"] = b + 1

    def _batches_of(self, epoch: int) -> list[list[int]]:
        """`_epoch_batches(epoch)`, kept while the epoch lasts."""
        if self._batches[0] != epoch:
            self._batches = (epoch, self._epoch_batches(epoch))
        return self._batches[1]

    def loss(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.engine.forward(inputs)
        # an output's `metrics` (sums over its rows, "rows" their count: a preference loss's rewards) are summed
        # over the step's micro batches and the ranks, and logged as means per row
        for key, value in (getattr(out, "metrics", None) or {}).items():
            self._metric_sums[key] = self._metric_sums.get(key, 0.0) + value
        if self.teachers is None:
            return out.loss
        return self.teachers.loss(out.loss, out.logits, self._clean)

    def step_sums(self) -> dict[str, float]:
        sums, self._metric_sums = self._metric_sums, {}
        return sums

    def end_step(
        self, step: int, loss: float, grad_norm: float, sums: dict[str, float], seconds: float
    ) -> None:
        self.state["global_step"] = step
        if self._adalora:
            self.model.base_model.update_and_allocate(step)  # reads this step's gradients
        self.state.setdefault("train_losses", []).append(loss)
        self.state.setdefault("grad_norms", []).append(grad_norm)
        if sums.get("rows"):
            rows = sums["rows"]
            means = {k: v / rows for k, v in sums.items() if k != "rows"}
            self.state.setdefault("train_metrics", []).append({"step": step, **means})
            logger.info("step %d: %s", step, ", ".join(f"{k} {v:.4f}" for k, v in means.items()))

    def log(self, step: int) -> dict[str, str]:
        loss, grad_norm = self.state["train_losses"][-1], self.state["grad_norms"][-1]
        metrics = self.state.get("train_metrics") or [{}]
        metrics = metrics[-1] if metrics[-1].get("step") == step else {}
        if self.writer is not None:
            self.writer.add_scalar("train/loss", loss, step)
            self.writer.add_scalar("train/grad_norm", grad_norm, step)
            self.writer.add_scalar("train/lr", self.engine.lr, step)
            for key, value in metrics.items():
                if key != "step":
                    self.writer.add_scalar(f"train/{key}", value, step)
        postfix = {"loss": f"{loss:.4f}"}
        if "rewards/margins" in metrics:
            postfix.update(
                margin=f"{metrics['rewards/margins']:.3f}", acc=f"{metrics['rewards/accuracy']:.2f}"
            )
        return postfix

    def save(self, step: int) -> None:
        self.save_last()

    def train(self) -> dict[str, Any]:
        """Train on `training.loop.TrainLoop` (eval, best checkpoint and `last` every eval_every steps and after
        the last; early stop by patience); then restore the best weights."""
        self._adalora = type(getattr(self.model, "base_model", None)).__name__ == "AdaLoraModel"
        self._batches: tuple[int | None, list[list[int]]] = (None, [])
        self._metric_sums: dict[str, float] = {}
        # Training time accumulates over resumes: a resumed run adds to what its checkpoint recorded.
        self._clock = (self.state.get("train_seconds") or 0.0, time.perf_counter())
        history = self.state["history"]
        TrainLoop(
            total_steps=self.total_steps,
            grad_accum=self.t.grad_accum,
            eval_every=self.eval_every,
            save_every=self.eval_every,
            progress=self.t.progress,
            desc=f"finetune ({self.method.name})",
        ).run(
            self.engine,
            self,
            self.state["global_step"],
            resumed=self._resumed,
            # without a dev split every evaluation sets best_step
            last_eval=history[-1]["step"] if history else self.state["best_step"],
            stopped=self.state["stopped_early"],
        )
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
        self._update_train_seconds()
        best = self.ckpt_dir / "best" / TRAINABLE
        self.engine.load_trainable_state(load_file(str(best), device=str(self.device)))
        logger.info("restored the best checkpoint (step %s)", self.state["best_step"])
        return self.state


def resume_point(output_dir: Path, t) -> tuple[Path | None, bool]:
    """(the checkpoint to resume from, whether output_dir's contents are to be removed first), by train.resume
    and train.overwrite. Reads only: nothing is created or removed before the run has checked its data."""
    ckpt_dir = output_dir / "checkpoints"
    if t.overwrite and t.resume not in ("auto", "never"):
        raise ValueError(f"train.overwrite starts afresh, but train.resume is {t.resume!r}; drop one of them")
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"train.output_dir {output_dir} is a file, not a directory")
    found = resume_checkpoint(
        ckpt_dir,
        "never" if t.overwrite else t.resume,
        CHECKPOINT_FILES,
        "train.resume",
        "pass --overwrite true to replace output_dir's contents",
    )
    wipe = found is None and output_dir.is_dir() and any(output_dir.iterdir())
    if wipe and not t.overwrite:
        raise ValueError(
            f"output_dir {output_dir} is not empty and holds no checkpoint to resume; choose "
            "another directory or pass --overwrite true to replace its contents"
        )
    return found, wipe


class OutputDir:
    """output_dir for one run: prepared only once everything has been checked, and on a failure (an error, or
    Ctrl-C: KeyboardInterrupt) before the first complete checkpoint-<step>, cleared of what this run created (a
    directory it made, or the entries it added), so a failed run leaves nothing behind, not even an empty directory
    that the next run would refuse as "not empty". Once a checkpoint-<step> exists the run is resumable and everything
    is kept. A directory that was there before is never removed, nor anything that was in it (except, by design, the
    contents `--overwrite true` replaces)."""

    def __init__(self, path: Path, wipe: bool):
        """Reads only; `prepare` changes the disk (so a Ctrl-C in between leaves nothing unaccounted for)."""
        self.path, self.wipe = path, wipe
        top = path.absolute()
        while not top.parent.exists() and top.parent != top:
            top = top.parent
        self.created = None if top.exists() else top  # the topmost directory this run makes
        # what the directory held before (nothing once --overwrite has cleared it)
        self.before = set() if wipe or not path.is_dir() else {p.name for p in path.iterdir()}

    def prepare(self) -> None:
        if self.wipe:
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.path / "checkpoints")

    def clean_up_after_failure(self) -> None:
        kept = list_checkpoints(self.path / "checkpoints")
        if kept:
            logger.warning(
                "the run stopped after writing %s: %s is kept; run the same command again to resume from it",
                kept[-1].name,
                self.path,
            )
            return
        with _no_interrupt():  # a second Ctrl-C must not leave the removal half done
            self._remove_what_the_run_made()

    def _remove_what_the_run_made(self) -> None:
        try:
            if self.created is not None:
                if self.created.exists():
                    shutil.rmtree(self.created)
                logger.info("removed %s: the run failed before its first checkpoint", self.created)
                return
            if not self.path.is_dir():
                return
            for entry in self.path.iterdir():
                if entry.name not in self.before:
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
                    logger.info("removed %s: the run failed before its first checkpoint", entry)
        except OSError as e:  # the run's own error is the one to report
            logger.warning("could not remove what the failed run wrote in %s: %s", self.path, e)


@contextlib.contextmanager
def _no_interrupt():
    """Ctrl-C ignored inside the block (main thread only: signal handlers can only be set there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class SupervisedJob(Protocol):
    """What a supervised run trains, and how it is scored and exported (fine-tuning's: `finetune.run.FinetuneJob`).
    `run_supervised` calls these in this order; everything between them is its own."""

    recipe: Any  # the resolved recipe: `train` (the run's settings) and `distributed` sections
    name: str  # what is learned (results' "task")
    metric: str  # the dev score that picks the best checkpoint

    def greater_is_better(self) -> bool: ...

    def prepare(self, saved: Path | None) -> tuple[Any, dict[str, list]]:
        """(tokenizer, encoded features by split: "train" and optional "dev" / "test") after reading the data;
        `saved`: the output directory's base_model/ an interrupted run left (its tokenizer), else None."""

    def build_model(self, tokenizer, saved: Path | None) -> tuple[nn.Module, str | None, list[str]]:
        """(model, path of its base weights or None for a fresh one, newly initialised modules); the run builds it
        inside `zero3_build_context`, and again (saved = output_dir/base_model) to rebuild it whole after ZeRO."""

    def keeps_base_weights(self) -> bool:
        """Whether a fresh base must be saved with its weights (adapters refer to it), not just its tokenizer."""

    def adapt(self, model: nn.Module, total_steps: int, fresh: list[str]) -> tuple[nn.Module, Any]:
        """(the model to train, its method info: .name, .trainable, .total, .fraction, .mergeable)."""

    def default_learning_rate(self, method: str) -> float: ...

    def teachers(self, tokenizer, device: torch.device) -> Any:
        """None, or an object whose `loss(loss, logits, clean_inputs)` replaces the model's loss."""

    def save_recipe(self, output_dir: Path) -> None: ...

    def evaluate(
        self, model: nn.Module, features: list, split: str, tokenizer, batch_size: int, device: torch.device
    ) -> dict[str, Any]: ...

    def describe(self) -> dict[str, Any]:
        """What eval_results.json records of the job after the training numbers (base model, data)."""

    def export(
        self, model: nn.Module, tokenizer, output_dir: Path, method: Any, base_path: str | None
    ) -> dict:
        """Write the trained model; {"model": the exported model, ...what eval_results.json records of it}."""


def run_supervised(job: SupervisedJob) -> dict[str, Any]:
    """Train `job` as its recipe says; returns {"dev": scores, "test": scores, "trainable_fraction", ...} (also
    written to output_dir/eval_results.json) plus "model" (the exported model) and "tokenizer"; on a DeepSpeed
    rank other than 0, {"rank", "steps", "shards", "tp_shapes"}.

    Everything that can be checked -- output_dir and resume, the data, the model itself -- is checked before
    output_dir is created or changed; a failure before the first checkpoint removes what the run made."""
    recipe = job.recipe
    t = recipe.train
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    output_dir = Path(t.output_dir).expanduser()
    resume_from, wipe = resume_point(output_dir, t)
    backend = recipe.distributed.backend
    distributed = backend != "single"
    is_main = True
    if resume_from is not None:  # the full layout (ranks, ZeRO stage) is checked by SupervisedTraining.resume
        layout = read_json(resume_from / "trainer_state.json").get("layout", {"backend": "single"})
        if layout.get("backend") != backend:
            raise ValueError(
                f"{resume_from} was written by a run laid out as {layout}, this run's distributed.backend is "
                f"{backend!r}: its optimizer state only fits the same layout; run it that way, or start afresh "
                "with train.overwrite true"
            )
    if distributed:
        from ernie_zoo.parallel.deepspeed_backend import init_deepspeed_distributed

        is_main = init_deepspeed_distributed(timeout_s=recipe.distributed.timeout_s)[0] == 0
    seed_everything(t.seed)
    device = resolve_device(t.device, key="train.device")

    saved_base = None if wipe else output_dir / "base_model"
    tokenizer, features = job.prepare(saved_base)
    # Under ZeRO-3 the model is built already partitioned, from build_model to adapt (zero3_build_context);
    # closed on any failure, and before rank 0 rebuilds the model whole after training.
    building = contextlib.ExitStack()
    out = None
    try:
        ds_config = deepspeed_config(recipe) if distributed else None  # the run's, for building and training
        building.enter_context(zero3_build_context(ds_config))
        model, base_path, fresh = job.build_model(tokenizer, saved_base)
        teachers = job.teachers(tokenizer, device)

        if distributed:
            import torch.distributed as dist

            dist.barrier()  # every rank has checked output_dir before rank 0 changes it
        # from here on, a failure removes what this run created; only rank 0 writes to output_dir
        out = OutputDir(output_dir, wipe) if is_main else None
        if out is not None:
            out.prepare()
        if base_path is None:
            # A random base must be kept: adapters (and resumes) refer to it. Full fine-tuning needs only the tokenizer.
            with_weights = job.keeps_base_weights()
            _save_base(model, tokenizer, output_dir / "base_model", with_weights, is_main=is_main)
            base_path = str(output_dir / "base_model") if with_weights else None

        total_steps = steps_of(t, len(features["train"]))[1]
        seed_everything(t.seed)
        model, info = job.adapt(model, total_steps, fresh)
        building.close()
        model.to(device)
        if is_main:
            job.save_recipe(output_dir)
        logger.info("trainable parameters: %d / %d (%.4f%%)", info.trainable, info.total, 100 * info.fraction)

        trainer = SupervisedTraining(
            job, model, tokenizer, features, output_dir, device, info, teachers, ds_config
        )
        if resume_from is not None:
            trainer.resume(resume_from)
        state = trainer.train()
        layout: dict[str, Any] = {}
        if distributed:
            engine = trainer.engine
            layout = {"shards": engine.shard_report(), "tp_shapes": engine.tp_shapes()}
            if not is_main:  # rank 0 evaluates and exports
                return {"rank": engine.rank, "steps": state["global_step"], **layout}
            # The ZeRO shards consolidated: the same model built whole on rank 0, given the best trainable
            # weights (gathered by save_best); frozen weights never changed, so base + trainable is the model.
            model, _, _ = job.build_model(tokenizer, output_dir / "base_model")
            seed_everything(t.seed)
            model, _ = job.adapt(model, total_steps, fresh)
            load_trainable_state(model, load_file(str(trainer.ckpt_dir / "best" / TRAINABLE)))
            model.to(device)
            model.eval()
            trainer.model, trainer.device = model, device
            layout["distributed"] = {
                "backend": engine.backend,
                "zero_stage": engine.zero_stage,
                "world_size": engine.world_size,
                "tp_size": engine.tp_size,
            }

        results: dict[str, Any] = {
            "task": job.name,
            "method": info.name,
            "trainable_params": info.trainable,
            "total_params": info.total,
            "trainable_fraction": info.fraction,
            "steps": state["global_step"],
            "best_step": state["best_step"],
            "stopped_early": state["stopped_early"],
            "train_seconds": state.get("train_seconds"),
            "metric": job.metric,
            **job.describe(),
            **({"distributed": layout["distributed"]} if distributed else {}),
        }
        for split in ("dev", "test"):
            if split in features:
                results[split] = trainer.evaluate(split)
        exported = job.export(model, tokenizer, output_dir, info, base_path)
        results["export"] = {k: v for k, v in exported.items() if k != "model"}
        atomic_write_text(output_dir / "eval_results.json", json.dumps(results, indent=2, ensure_ascii=False))
        return {**results, **layout, "model": exported["model"], "tokenizer": tokenizer}
    except BaseException:
        building.close()
        if out is not None:
            out.clean_up_after_failure()
        raise


__all__ = [
    "CHECKPOINT_FILES",
    "OutputDir",
    "SupervisedJob",
    "SupervisedTraining",
    "collate",
    "deepspeed_config",
    "drop_tokens",
    "resume_point",
    "run_supervised",
    "steps_of",
]
