"""The fine-tuning run: `run_finetune(args)` runs `training.supervised.run_supervised` on a `FinetuneJob`, which
says what fine-tuning builds, trains, scores and exports:

    read splits ─ tokenizer (given, or trained on the training texts) ─ encode   (`FinetuneJob.prepare`)
        ─ model (from_pretrained, or a seeded preset) + the objective's extras     (`build_model`)
        ─ apply_method (full / peft / bottleneck)                                   (`FinetuneJob.adapt`)
        ─ distillation teachers ─ dev/test scores (the objective) ─ export         (`FinetuneJob.export`)

The rest -- engine per backend, ZeRO-3 partitioned building, checkpoints and exact resume, data order, the
training loop, clean-up after a failure -- is training/'s (`training.supervised`), shared with any other
supervised run.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoTokenizer

from ernie_zoo.models.decoder import DECODER_CLASSES, begin_end_tokens, is_decoder_config
from ernie_zoo.models.directory import check_model_dir
from ernie_zoo.models.presets import DECODER_PRESETS, preset_config
from ernie_zoo.tokenization import ErnieZooTokenizerFast, load_tokenizer
from ernie_zoo.training.core import seed_everything
from ernie_zoo.training.deepspeed_engine import new_model
from ernie_zoo.training.preference import REFERENCE_LOSSES, unwrap_policy
from ernie_zoo.training.supervised import run_supervised
from ernie_zoo.utils import atomic_write_text, looks_like_local_path
from ernie_zoo.zoo import SHIPPED_MODELS

from .args import FinetuneArgs, dump_recipe
from .distill import Teachers
from .export import export, is_adapter_dir, load_config, merged_for_finetuning
from .methods import MethodInfo, apply_method, default_learning_rate
from .objectives import Objective, PreferenceObjective, make_objective

logger = logging.getLogger(__name__)

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
        load = AutoTokenizer.from_pretrained if task.decoder else load_tokenizer
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
        extra = {}
        if m.quantize_base is not None and source != str(saved):
            extra["quantization_config"] = quantization_config(m.quantize_base)
        model, loading = cls.from_pretrained(
            source, config=config, output_loading_info=True, dtype=torch.float32, **extra
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


def quantization_config(bits: str):
    """transformers' `BitsAndBytesConfig` of model.quantize_base: int8 (LLM.int8()) or NF4 with fp32 compute;
    a missing bitsandbytes is an error naming the extra to install."""
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        raise ValueError(
            f"model.quantize_base {bits!r} needs bitsandbytes: pip install 'ernie-zoo[qlora]' ({e})"
        ) from None
    from transformers import BitsAndBytesConfig

    if bits == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
    )


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
    """A decoder base only for the decoder tasks (instruction, preference), and they only on a decoder; a ValueError
    names the recipe key."""
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
            "fine-tune a decoder with task instruction (or preference)"
        )


# ===================================================================== the job


class FinetuneJob:
    """A fine-tuning run as `training.supervised.run_supervised` trains it: the recipe's objective (read, encode,
    head, scores), its model (pretrained directory or preset, tokenizer), its method (`apply_method`), its
    teachers and its export. `recipe`: as written (saved with the run); `args`: `recipe.resolved()`."""

    def __init__(self, recipe: FinetuneArgs, args: FinetuneArgs):
        self.written, self.recipe = recipe, args
        self.name = args.task
        self.objective: Objective | None = None  # made by prepare, once the run has seeded
        self._reference: nn.Module | None = (
            None  # build_model's frozen base, for a preference loss that needs one
        )

    @property
    def metric(self) -> str:
        return self.objective.metric

    def greater_is_better(self) -> bool:
        return self.objective.greater_is_better()

    def prepare(self, saved: Path | None) -> tuple[Any, dict[str, list]]:
        self.objective = task = make_objective(self.recipe)
        task.read()
        tokenizer = build_tokenizer(self.recipe, task, saved)
        return tokenizer, {split: task.encode(examples, tokenizer) for split, examples in task.splits.items()}

    def build_model(self, tokenizer, saved: Path | None) -> tuple[nn.Module, str | None, list[str]]:
        model, base_path, fresh = build_model(self.recipe, self.objective, tokenizer, saved)
        fresh += [name for name in self.objective.attach(model, tokenizer) if name not in fresh]
        # Preference tuning against a reference under full fine-tuning: the frozen base, built as the model is
        # (from the same directory or seeded preset; under ZeRO-3 partitioned like it). An adapter method needs
        # none: its base with the adapter disabled is the reference.
        self._reference = None
        if self._needs_reference_copy():
            self._reference = build_model(self.recipe, self.objective, tokenizer, saved)[0]
        return model, base_path, fresh

    def _needs_reference_copy(self) -> bool:
        return (
            isinstance(self.objective, PreferenceObjective)
            and self.recipe.preference.loss in REFERENCE_LOSSES
            and self.recipe.method.method == "full"
        )

    def keeps_base_weights(self) -> bool:
        return self.recipe.method.method != "full"

    def adapt(self, model: nn.Module, total_steps: int, fresh: list[str]) -> tuple[nn.Module, MethodInfo]:
        model, info = apply_method(
            model, self.recipe.method, self.name, total_steps, extra_modules_to_save=fresh
        )
        if isinstance(self.objective, PreferenceObjective):
            model = self.objective.wrap(model, self._reference)
        return model, info

    def default_learning_rate(self, method: str) -> float:
        return default_learning_rate(method)

    def teachers(self, tokenizer, device: torch.device) -> Teachers | None:
        t = self.recipe.train
        if not t.distill_from:
            return None
        return Teachers(
            t.distill_from, self.objective, tokenizer, device, t.distill_alpha, t.distill_temperature
        )

    def save_recipe(self, output_dir: Path) -> None:
        atomic_write_text(output_dir / "finetune_args.yaml", dump_recipe(self.written))

    def evaluate(self, model, features, split: str, tokenizer, batch_size: int, device) -> dict[str, Any]:
        task = self.objective
        return task.evaluate(model, features, task.splits[split], tokenizer, batch_size, device)

    def describe(self) -> dict[str, Any]:
        m = self.recipe.model
        return {
            "base_model": {
                "name_or_path": self.written.model.model_name_or_path,
                "location": m.model_name_or_path,
                "preset": None if m.model_name_or_path else m.preset,
            },
            "data": {split: self.objective.where[split] for split in self.objective.splits},
        }

    def export(self, model, tokenizer, output_dir: Path, method: MethodInfo, base_path: str | None) -> dict:
        return export(
            unwrap_policy(model),
            tokenizer,
            output_dir,
            task=self.name,
            method=method.name,
            mergeable=method.mergeable,
            merge=self.recipe.train.merge,
            base_model=base_path,
            config_updates=self.objective.config_updates(),
        )


def run_finetune(args: FinetuneArgs) -> dict[str, Any]:
    """Fine-tune as `args` says (`training.supervised.run_supervised` on a `FinetuneJob`); returns {"dev": scores,
    "test": scores, "trainable_fraction", ...} (also written to output_dir/eval_results.json) plus "model" (the
    exported model), "tokenizer" and "task_object" (the objective).

    Everything that can be checked -- output_dir and resume, model and tokenizer sources, every data file, the
    model itself -- is checked before output_dir is created or changed."""
    check_source("model_name_or_path", args.model.model_name_or_path)
    check_source("tokenizer", args.model.tokenizer)
    # The recipe as written (shipped names, `~`) is what finetune_args.yaml keeps; the run reads locations.
    resolved = args.resolved()
    base = resolved.model.model_name_or_path
    if base is not None and is_adapter_dir(base):
        # an adapter model (ernie-zoo-e5-ie, an earlier run's adapter/): fine-tune its merged weights
        merged = str(merged_for_finetuning(base))
        resolved = dataclasses.replace(
            resolved, model=dataclasses.replace(resolved.model, model_name_or_path=merged)
        )
    if args.model.model_name_or_path is not None:
        logger.info("base model: %s (%s)", args.model.model_name_or_path, resolved.model.model_name_or_path)
    else:
        logger.info(
            "base model: a randomly initialised %r preset (model_name_or_path is null)", resolved.model.preset
        )
    job = FinetuneJob(args, resolved)
    result = run_supervised(job)
    return {**result, "task_object": job.objective} if "model" in result else result


__all__ = [
    "FinetuneJob",
    "build_model",
    "build_tokenizer",
    "run_finetune",
]
