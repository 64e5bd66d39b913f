"""The fine-tuning run: `run_finetune(args)` reads data, builds and adapts the model, trains, exports.

    read splits ─ tokenizer (given, or trained on the training texts) ─ encode
        ─ model (from_pretrained, or a seeded preset) ─ apply_method (full / peft / bottleneck)
        ─ train: `FinetuneTask`, the fine-tuning task on the one training loop (training.loop.TrainLoop, shared with
             pretraining: grad accumulation, the step, cadences); AdamW + linear warm-up/decay (training.core),
             clipping (+ distillation from teachers), on the engine training.backends chooses: one process, or
             DeepSpeed ZeRO (+ AutoTP) over the launched ranks (distributed.backend, tp_size)
             every eval_every steps: dev metric → best checkpoint? → last checkpoint → early stop?
        ─ restore best ─ dev/test scores ─ export (merged or full model dir / adapter) ─ eval_results.json

Checkpoints hold only the trainable parameters (safetensors), the optimizer (safetensors + json), the
scheduler and the RNG states (json): no pickle. Data order is a seeded permutation per epoch, so a resumed run
replays exactly the batches the interrupted one would have seen. Under DeepSpeed, every rank reads its share of
each of those batches; under ZeRO-3 every rank builds the model already partitioned (`build_model`), rank 0
writes (each rank adds its ZeRO-3 optimizer partition and RNG state to the checkpoints), and after training rank 0 rebuilds the model whole from the base and the best trainable weights
(the ZeRO shards consolidated) to score and export it as one process would.
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
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoTokenizer

from ernie_zoo.models.decoder import DECODER_CLASSES, begin_end_tokens, is_decoder_config
from ernie_zoo.models.directory import check_model_dir
from ernie_zoo.models.presets import DECODER_PRESETS, preset_config
from ernie_zoo.tokenization import ErnieZooTokenizerFast
from ernie_zoo.training.backends import make_engine, task_deepspeed_config, zero3_build_context
from ernie_zoo.training.checkpoint import (
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
from ernie_zoo.training.core import adamw, seed_everything, warmup_decay
from ernie_zoo.training.deepspeed_engine import is_partitioned, new_model, save_partitioned_weights
from ernie_zoo.training.engine import load_trainable_state
from ernie_zoo.training.loop import TrainLoop
from ernie_zoo.utils import atomic_directory, atomic_write_text, looks_like_local_path, resolve_device
from ernie_zoo.zoo import SHIPPED_MODELS

from .args import FinetuneArgs, dump_recipe
from .distill import Teachers
from .export import export, load_config
from .methods import MethodInfo, apply_method, default_learning_rate
from .tasks import Objective, collate, drop_tokens, make_objective

logger = logging.getLogger(__name__)

TRAINABLE = "trainable.safetensors"
#: Files every fine-tuning checkpoint has (checked before resuming from one and before counting it in rotation).
CHECKPOINT_FILES = (TRAINABLE, "trainer_state.json")
#: Config fields that change a pretrained model's architecture: model.config_overrides may set them on presets only.
ARCHITECTURE_OVERRIDES = {
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "use_pinyin",
    "use_radical",
    "use_strokes",
    "use_stroke_sequence",
    "feature_fusion",
    "char_feature_dim",
    "type_vocab_size",
    "use_task_id",
}


# ===================================================================== building


def check_source(key: str, value: str | None) -> None:
    """Report a model or tokenizer source that can only be a local directory (`looks_like_local_path`, the rule
    Taskflow's model= uses) and is not one, by its recipe key: transformers would take it for a hub id and fail
    with an unrelated message. Checked when the run builds, not when a recipe loads: a recipe may name the output
    of an earlier stage that is still to run."""
    if value is not None and looks_like_local_path(value) and not Path(value).expanduser().is_dir():
        raise ValueError(f"recipe key 'model.{key}' = {value!r}: no such directory")


def _from_source(load, key: str, source: str, **kwargs):
    """`load(source, **kwargs)`; a source that is not a directory (so, after `FinetuneArgs.resolved`, a hub id)
    and cannot be loaded is reported by its recipe key, with the shipped names that would have worked."""
    if Path(source).expanduser().is_dir():  # links, config values, tokenizer.json, blank or corrupt weights
        check_model_dir(Path(source).expanduser())
    try:
        return load(source, **kwargs)
    except (OSError, ValueError) as e:
        if Path(source).expanduser().is_dir():
            raise
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(
            f"recipe key 'model.{key}' = {source!r}: not a shipped model ({', '.join(SHIPPED_MODELS)}), not a "
            f"local directory, and not loadable as a hub id ({reason})"
        ) from e


def build_tokenizer(args: FinetuneArgs, task: Objective, saved: Path | None) -> ErnieZooTokenizerFast:
    """The given tokenizer, the model's, the one an interrupted run saved in `saved` (its base_model/), or one
    trained on the train texts. `args` as `FinetuneArgs.resolved` returns them (shipped names resolved)."""
    m = args.model
    source = m.tokenizer or m.model_name_or_path
    if source is None and saved is not None and (saved / "tokenizer.json").is_file():
        source = str(saved)
    if source is not None:
        key = "tokenizer" if m.tokenizer else "model_name_or_path"
        # a decoder's tokenizer is whatever its directory holds (the zoo's, or ERNIE 4.5's own)
        load = AutoTokenizer.from_pretrained if task.decoder else ErnieZooTokenizerFast.from_pretrained
        return _from_source(load, key, source)
    logger.info("training a %d-token vocabulary on the training texts", m.vocab_size)
    return ErnieZooTokenizerFast.train_vocab(
        task.vocab_texts(), vocab_size=m.vocab_size, min_frequency=1, show_progress=False
    )


def fresh_modules(model: nn.Module, missing_keys: list[str]) -> list[str]:
    """The largest modules whose weights were all missing from a checkpoint (newly initialised), e.g. the task
    head and a pooler an MLM checkpoint lacks. Under an adapter method they train fully and are saved with the
    adapter: frozen at a random init they would be useless, and unsaved they could not be restored."""
    missing = set(missing_keys)
    if not missing:
        return []
    params: dict[str, list[str]] = {}
    for name, _ in model.named_parameters():
        parts = name.split(".")
        for i in range(1, len(parts)):
            params.setdefault(".".join(parts[:i]), []).append(name)
    base = getattr(model, "base_model_prefix", "")
    chosen: list[str] = []
    for key in sorted(missing):
        parts = key.split(".")[:-1]
        best = None
        for i in range(len(parts), 0, -1):
            module = ".".join(parts[:i])
            if module == base or not all(n in missing for n in params.get(module, [None])):
                break
            best = module
        if best is not None and best not in chosen and not any(best.startswith(c + ".") for c in chosen):
            chosen.append(best)
    return chosen


def build_model(
    args: FinetuneArgs, task: Objective, tokenizer, saved: Path | None
) -> tuple[nn.Module, str | None, list[str]]:
    """(model, path of its base weights, newly initialised modules): a pretrained directory (a shipped model once
    `FinetuneArgs.resolved` has turned its name into its directory), the random base an interrupted adapter run
    saved in `saved`, or a seeded preset (saved to base_model/ by the caller).

    Inside `training.backends.zero3_build_context` (ZeRO-3 runs) the model is built already partitioned over
    the ranks, no rank ever holding it whole: from_pretrained loads each checkpoint tensor into its partition,
    and newly initialised weights (a task head, a preset) are those of the same build in one process."""
    m = args.model
    updates = task.config_updates()
    source = m.model_name_or_path
    if source is None and saved is not None and (saved / "model.safetensors").is_file():
        source = str(saved)  # resuming an adapter run on a preset: the same random base
    if source is not None:
        config = _from_source(load_config, "model_name_or_path", source)
        _check_family(args, task, is_decoder_config(config), f"{source} holds {_described(config)}")
        cls = DECODER_CLASSES[type(config)] if task.decoder else task.model_class()
        arch = sorted(set(m.config_overrides) & ARCHITECTURE_OVERRIDES)
        if arch and source != str(saved):
            raise ValueError(
                f"model.config_overrides {arch} change the architecture of the pretrained "
                f"{source}; only presets take architecture overrides"
            )
        for key, value in {**m.config_overrides, **updates}.items():
            setattr(config, key, value)
        if len(tokenizer) > config.vocab_size:
            raise ValueError(
                f"the tokenizer has {len(tokenizer)} tokens but {source} has vocab_size "
                f"{config.vocab_size}; use the model's own tokenizer"
            )
        # fp32 whatever the file holds: transformers would keep fp16 weights (e.g. the shipped zoo models) in
        # fp16, and training in fp16 on CPU overflows to NaN at the first step.
        model, loading = cls.from_pretrained(
            source, config=config, output_loading_info=True, dtype=torch.float32
        )
        base_path = source
        fresh = fresh_modules(model, loading["missing_keys"])
        if fresh:
            logger.info("newly initialised (trained fully under adapter methods): %s", ", ".join(fresh))
    else:
        _check_family(
            args, task, m.preset in DECODER_PRESETS, f"model.preset {m.preset!r} is {_preset_kind(m.preset)}"
        )
        fields = {**m.config_overrides, **updates}
        if task.decoder:  # begin / end / padding ids of the tokenizer, as decoder pretraining sets them
            bos, eos = begin_end_tokens(tokenizer)
            ids = {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": tokenizer.pad_token}
            fields = {**{k: tokenizer.convert_tokens_to_ids(t) for k, t in ids.items() if t}, **fields}
        config = preset_config(m.preset, vocab_size=len(tokenizer), **fields)
        cls = DECODER_CLASSES[type(config)] if task.decoder else task.model_class()
        seed_everything(args.train.seed)
        model = new_model(cls, config)  # inside zero3_build_context: born partitioned, the same weights
        if not task.decoder:
            model.load_char_tables(tokenizer)
        base_path = None
        fresh = []
    return model, base_path, fresh


def _described(config) -> str:
    if is_decoder_config(config):
        return f"an ERNIE 4.5 decoder ({DECODER_CLASSES[type(config)].__name__})"
    return (
        "an ErnieZoo encoder"
        if getattr(config, "architectures", None) is None
        or any(a.startswith("ErnieZoo") for a in config.architectures)
        else f"a {', '.join(config.architectures)}"
    )


def _preset_kind(name: str) -> str:
    return "an ERNIE 4.5 decoder preset" if name in DECODER_PRESETS else "an ErnieZoo encoder preset"


def _check_family(args: FinetuneArgs, task: Objective, is_decoder: bool, what: str) -> None:
    """A decoder base only for task instruction, and task instruction only on a decoder; a ValueError names the
    recipe key."""
    if task.decoder and not is_decoder:
        raise ValueError(
            f"recipe key 'task' = {args.task!r} fine-tunes an ERNIE 4.5 decoder (Ernie4_5ForCausalLM / "
            f"Ernie4_5_MoeForCausalLM), but {what}; give a decoder directory or a decoder preset "
            f"({', '.join(sorted(DECODER_PRESETS))})"
        )
    if is_decoder and not task.decoder:
        raise ValueError(
            f"recipe key 'task' = {args.task!r}: {what}; a decoder has no {args.task.replace('_', ' ')} head "
            "(classification, CRF tagging, correction and the zoo's generation are ErnieZoo encoder tasks); "
            "fine-tune a decoder with task instruction"
        )


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


# ===================================================================== training state


def _cpu(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().cpu() for k, v in state.items()}


def deepspeed_config(args: FinetuneArgs) -> dict[str, Any]:
    """`training.backends.task_deepspeed_config` with the recipe's DeepSpeed json, TP size, ZeRO stage, batch,
    accumulation, clipping and offload settings (a `distributed.backend: deepspeed` run, process group started)."""
    from ernie_zoo.parallel.deepspeed_backend import offload_kwargs

    t, d = args.train, args.distributed
    return task_deepspeed_config(
        d.deepspeed_config,
        tp_size=d.tp_size,
        zero_stage=d.zero_stage,
        batch_size=t.batch_size,
        grad_accum=t.grad_accum,
        max_grad_norm=t.max_grad_norm,
        offload=offload_kwargs(args),
    )


def offloads_optimizer(args: FinetuneArgs) -> bool:
    """Whether the run steps its optimizer on the host (ZeRO-Offload: DeepSpeed's CPU Adam instead of AdamW)."""
    if args.distributed.backend == "single":
        return False
    from ernie_zoo.parallel.deepspeed_backend import recipe_offloads_optimizer

    return recipe_offloads_optimizer(args)


def _steps(t, n_train: int) -> tuple[int, int]:
    """(optimizer steps per epoch, total steps) of a run with `n_train` training examples."""
    per_epoch = max(1, math.ceil(math.ceil(n_train / t.batch_size) / t.grad_accum))
    return per_epoch, t.max_steps or max(1, math.ceil(t.epochs * per_epoch))


class FinetuneTask:
    """Fine-tuning as a task on `training.loop.TrainLoop` (`TrainTask`): an adapted model on encoded features; see
    the module docstring. `ds_config`: the run's DeepSpeed config (`deepspeed_config`; None on the single
    backend), the one its model was built with."""

    def __init__(
        self,
        args: FinetuneArgs,
        task: Objective,
        model: nn.Module,
        tokenizer,
        features: dict[str, list],
        output_dir: Path,
        device: torch.device,
        method: MethodInfo,
        teachers: Teachers | None = None,
        ds_config: dict[str, Any] | None = None,
    ):
        self.args, self.t = args, args.train
        self.task, self.tokenizer = task, tokenizer
        self.features = features
        self.output_dir = output_dir
        self.method = method
        self.steps_per_epoch, self.total_steps = _steps(self.t, len(features["train"]))
        self.eval_every = self.t.eval_every or self.steps_per_epoch
        lr = self.t.learning_rate or default_learning_rate(method.name)
        optimizer = adamw(model, lr, self.t.weight_decay, cpu_adam=offloads_optimizer(args))
        scheduler = warmup_decay(
            optimizer,
            warmup_steps=int(self.t.warmup_ratio * self.total_steps),
            total_steps=self.total_steps,
            decay="linear",
        )
        self.engine = make_engine(
            args.distributed.backend,
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
        self.teachers = teachers  # train.distill_from, loaded (and checked) by the caller
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
        if self.engine.backend == "single":  # under ZeRO-3 the partitions' fp32 masters are the weights
            self.engine.load_trainable_state(load_file(str(checkpoint / TRAINABLE), device=str(self.device)))
        self.engine.load_optimizer_state(checkpoint)
        load_json_state(self.scheduler, checkpoint / "scheduler.json")
        load_rng_state(checkpoint, rank=self.engine.rank)
        self.state, self._resumed = saved["state"], True
        logger.info("resumed from %s at step %d", checkpoint, self.state["global_step"])

    # ------------------------------------------------------------- evaluation
    def evaluate(self, split: str) -> dict[str, Any]:
        return self.task.evaluate(
            self.model,
            self.features[split],
            self.task.splits[split],
            self.tokenizer,
            self.t.eval_batch_size,
            self.device,
        )

    def _is_better(self, value: float) -> bool:
        best = self.state["best_metric"]
        if best is None:
            return True
        return value > best if self.task.greater_is_better() else value < best

    def run_eval(self, step: int) -> bool:
        """Evaluate on dev (if any) and keep the best (the loop then saves `last`). Returns True to stop early."""
        stop = False
        if "dev" in self.features:
            scores = self.evaluate("dev")
            metric = self.task.metric
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
        if self.teachers is None:
            return out.loss
        return self.teachers.loss(out.loss, out.logits, self._clean)

    def step_sums(self) -> dict[str, float]:
        return {}

    def end_step(
        self, step: int, loss: float, grad_norm: float, sums: dict[str, float], seconds: float
    ) -> None:
        self.state["global_step"] = step
        if self._adalora:
            self.model.base_model.update_and_allocate(step)  # reads this step's gradients
        self.state.setdefault("train_losses", []).append(loss)
        self.state.setdefault("grad_norms", []).append(grad_norm)

    def log(self, step: int) -> dict[str, str]:
        loss, grad_norm = self.state["train_losses"][-1], self.state["grad_norms"][-1]
        if self.writer is not None:
            self.writer.add_scalar("train/loss", loss, step)
            self.writer.add_scalar("train/grad_norm", grad_norm, step)
            self.writer.add_scalar("train/lr", self.engine.lr, step)
        return {"loss": f"{loss:.4f}"}

    def save(self, step: int) -> None:
        self.save_last()

    def train(self) -> dict[str, Any]:
        """Train on `training.loop.TrainLoop` (eval, best checkpoint and `last` every eval_every steps and after
        the last; early stop by patience); then restore the best weights."""
        self._adalora = type(getattr(self.model, "base_model", None)).__name__ == "AdaLoraModel"
        self._batches: tuple[int | None, list[list[int]]] = (None, [])
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


# ===================================================================== the whole run


def _resume_point(output_dir: Path, t) -> tuple[Path | None, bool]:
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


class _OutputDir:
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


def run_finetune(args: FinetuneArgs) -> dict[str, Any]:
    """Fine-tune as `args` says; returns {"dev": scores, "test": scores, "trainable_fraction", ...} (also
    written to output_dir/eval_results.json) plus "model" (the exported model) and "tokenizer".

    Everything that can be checked -- output_dir and resume, model and tokenizer sources, every data file, the
    model itself -- is checked before output_dir is created or changed."""
    t = args.train
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    output_dir = Path(t.output_dir).expanduser()
    check_source("model_name_or_path", args.model.model_name_or_path)
    check_source("tokenizer", args.model.tokenizer)
    # The recipe as written (shipped names, `~`) is what finetune_args.yaml keeps; the run reads locations.
    recipe, args = args, args.resolved()
    if recipe.model.model_name_or_path is not None:
        logger.info(
            "base model: %s (%s)",
            recipe.model.model_name_or_path,
            args.model.model_name_or_path,
        )
    else:
        logger.info(
            "base model: a randomly initialised %r preset (model_name_or_path is null)", args.model.preset
        )
    resume_from, wipe = _resume_point(output_dir, t)
    distributed = args.distributed.backend != "single"
    is_main = True
    if resume_from is not None:  # the full layout (ranks, ZeRO stage) is checked by FinetuneTask.resume
        layout = read_json(resume_from / "trainer_state.json").get("layout", {"backend": "single"})
        if layout.get("backend") != args.distributed.backend:
            raise ValueError(
                f"{resume_from} was written by a run laid out as {layout}, this run's distributed.backend is "
                f"{args.distributed.backend!r}: its optimizer state only fits the same layout; run it that way, or "
                "start afresh with train.overwrite true"
            )
    if distributed:
        from ernie_zoo.parallel.deepspeed_backend import init_deepspeed_distributed

        is_main = init_deepspeed_distributed(timeout_s=args.distributed.timeout_s)[0] == 0
    seed_everything(t.seed)
    device = resolve_device(t.device, key="train.device")

    task = make_objective(args)
    task.read()
    saved_base = None if wipe else output_dir / "base_model"
    tokenizer = build_tokenizer(args, task, saved_base)
    features = {split: task.encode(examples, tokenizer) for split, examples in task.splits.items()}
    # Under ZeRO-3 the model is built already partitioned, from build_model to apply_method (zero3_build_context);
    # closed on any failure, and before rank 0 rebuilds the model whole after training.
    building = contextlib.ExitStack()
    out = None
    try:
        ds_config = deepspeed_config(args) if distributed else None  # the run's, for building and training
        building.enter_context(zero3_build_context(ds_config))
        model, base_path, fresh = build_model(args, task, tokenizer, saved_base)
        fresh += [name for name in task.attach(model, tokenizer) if name not in fresh]
        teachers = (
            Teachers(t.distill_from, task, tokenizer, device, t.distill_alpha, t.distill_temperature)
            if t.distill_from
            else None
        )

        if distributed:
            import torch.distributed as dist

            dist.barrier()  # every rank has checked output_dir before rank 0 changes it
        # from here on, a failure removes what this run created; only rank 0 writes to output_dir
        out = _OutputDir(output_dir, wipe) if is_main else None
        if out is not None:
            out.prepare()
        if base_path is None:
            # A random base must be kept: adapters (and resumes) refer to it. Full fine-tuning needs only the tokenizer.
            _save_base(
                model, tokenizer, output_dir / "base_model", args.method.method != "full", is_main=is_main
            )
            base_path = str(output_dir / "base_model") if args.method.method != "full" else None

        total_steps = _steps(t, len(features["train"]))[1]
        seed_everything(t.seed)
        model, info = apply_method(model, args.method, task.name, total_steps, extra_modules_to_save=fresh)
        building.close()
        model.to(device)
        if is_main:
            atomic_write_text(output_dir / "finetune_args.yaml", dump_recipe(recipe))
        logger.info("trainable parameters: %d / %d (%.4f%%)", info.trainable, info.total, 100 * info.fraction)

        trainer = FinetuneTask(
            args, task, model, tokenizer, features, output_dir, device, info, teachers, ds_config
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
            model, _, _ = build_model(args, task, tokenizer, output_dir / "base_model")
            task.attach(model, tokenizer)
            seed_everything(t.seed)
            model, _ = apply_method(model, args.method, task.name, total_steps, extra_modules_to_save=fresh)
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
            "task": task.name,
            "method": info.name,
            "trainable_params": info.trainable,
            "total_params": info.total,
            "trainable_fraction": info.fraction,
            "steps": state["global_step"],
            "best_step": state["best_step"],
            "stopped_early": state["stopped_early"],
            "train_seconds": state.get("train_seconds"),
            "metric": task.metric,
            "base_model": {
                "name_or_path": recipe.model.model_name_or_path,
                "location": args.model.model_name_or_path,
                "preset": None if args.model.model_name_or_path else args.model.preset,
            },
            "data": {split: task.where[split] for split in task.splits},
            **({"distributed": layout["distributed"]} if distributed else {}),
        }
        for split in ("dev", "test"):
            if split in features:
                results[split] = trainer.evaluate(split)
        exported = export(
            model,
            tokenizer,
            output_dir,
            task=task.name,
            method=info.name,
            mergeable=info.mergeable,
            merge=t.merge,
            base_model=base_path,
            config_updates=task.config_updates(),
        )
        results["export"] = {k: v for k, v in exported.items() if k != "model"}
        atomic_write_text(output_dir / "eval_results.json", json.dumps(results, indent=2, ensure_ascii=False))
        return {**results, **layout, "model": exported["model"], "tokenizer": tokenizer, "task_object": task}
    except BaseException:
        building.close()
        if out is not None:
            out.clean_up_after_failure()
        raise


__all__ = [
    "FinetuneTask",
    "build_model",
    "build_tokenizer",
    "deepspeed_config",
    "load_trainable_state",
    "run_finetune",
]
