"""Typed run recipes: dataclasses with a help string per field, loaded from YAML and dotted CLI overrides.

The litgpt pattern: one YAML file fully describes a run; every key is a field of a dataclass whose help text
is what `--help` prints and what the YAML repeats as comments (`recipe_to_yaml` writes both). Overrides use
dotted keys::

    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --optim.lr 1e-3 --max_steps 50

Unknown keys raise a `ValueError` naming the key and the valid keys of its section, values are checked against
the field types (`"1e-3"` becomes a float where a float is declared; `"abc"` for an int is an error).

The machinery here (`load_recipe`, `parse_cli`, `recipe_to_yaml`, `recipe_help`) is generic over any
dataclass, so other commands (fine-tuning) can reuse it with their own recipe class.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def arg(
    default: Any = dataclasses.MISSING, help: str = "", *, default_factory: Any = dataclasses.MISSING
) -> Any:
    """A dataclass field carrying its help text (shown by `--help` and as a YAML comment)."""
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


# --------------------------------------------------------------------------------------------- the recipe
@dataclass
class ModelArgs:
    """The encoder: a size preset plus optional overrides, and the character features."""

    preset: str | None = arg(
        "tiny",
        "Size preset from ernie_zoo.models.presets.PRESETS (tiny, mini, base, 10b, 100b, ...); null to give hidden_size, num_hidden_layers, num_attention_heads and intermediate_size explicitly.",
    )
    hidden_size: int | None = arg(None, "Hidden width; overrides the preset.")
    num_hidden_layers: int | None = arg(None, "Number of transformer layers; overrides the preset.")
    num_attention_heads: int | None = arg(None, "Number of attention heads; overrides the preset.")
    intermediate_size: int | None = arg(None, "Feed-forward width; overrides the preset.")
    max_position_embeddings: int | None = arg(
        None, "Position table size; overrides the preset (must be >= data.max_seq_len)."
    )
    vocab_size: int | None = arg(
        None,
        "Embedding rows; null: the tokenizer's vocabulary size. May exceed it (e.g. padded to a multiple of 64), never be smaller.",
    )
    hidden_dropout_prob: float = arg(0.1, "Dropout on hidden states.")
    attention_probs_dropout_prob: float = arg(0.1, "Dropout on attention probabilities.")
    use_pinyin: bool = arg(True, "Embed the context-aware pinyin (syllable + tone) of each Han character.")
    use_radical: bool = arg(True, "Embed the Kangxi radical of each character.")
    use_strokes: bool = arg(True, "Embed the total stroke count of each character.")
    use_stroke_sequence: bool = arg(False, "Embed the 5-type stroke sequence of each character.")
    feature_fusion: str = arg(
        "add",
        "How character features join the word embedding: add (ERNIE-style sum) or concat (ChineseBERT-style concat + projection).",
    )
    init_from: str | None = arg(
        None,
        "Start from the weights of this from_pretrained directory (e.g. an earlier run's checkpoint: continued pretraining with a new schedule or data); its architecture and vocabulary must match this section's. null: random initialisation.",
    )


@dataclass
class TokenizerArgs:
    """Where the tokenizer comes from."""

    path: str | None = arg(
        None,
        "Saved tokenizer directory (save_pretrained); null: train a WordPiece vocabulary on the training text and save it in output_dir/tokenizer.",
    )
    vocab_size: int = arg(21128, "Vocabulary size when training one (BERT-zh uses 21128).")
    min_frequency: int = arg(
        2, "A character needs this many occurrences to get its own token when training one."
    )
    do_lower_case: bool = arg(True, "Lower-case Latin text.")


@dataclass
class DataArgs:
    """Training text and the held-out split."""

    files: list[str] = arg(
        help="Text files (one document per line) or .jsonl files with a 'text' field. Relative paths resolve against the working directory.",
        default_factory=list,
    )
    dataset_dir: str | None = arg(
        None,
        "A tokenized dataset saved with datasets' save_to_disk (e.g. by `ernie-zoo prepare-data`); used instead of files. Needs tokenizer.path.",
    )
    max_seq_len: int = arg(128, "Tokens per example, [CLS] and [SEP] included.")
    eval_fraction: float = arg(
        0.05, "Fraction of examples held out (seeded) for evaluation; 0 disables evaluation."
    )
    split_seed: int | None = arg(
        None,
        "Seed of the held-out split; null: the recipe's seed. A stage that continues an earlier run with a new seed (new data order and masks) sets this to the earlier run's seed, so the examples that run held out stay held out.",
    )
    num_proc: int = arg(1, "Processes for tokenization and boundary precompute.")
    cache_dir: str | None = arg(None, "Cache for the prepared dataset; null: no cache.")
    lexicon: str | None = arg(
        None,
        "Entity lexicon file (one entity per line) for entity masking; null: none (entities then come only from POS tags, if use_pos_entities).",
    )
    user_dict: str | None = arg(None, "Extra jieba user dictionary for phrase boundaries.")
    sentiment_lexicon: str | None = arg(
        None,
        "Sentiment lexicon written by `python -m ernie_zoo.data.sentiment_lexicon` (word, kind, polarity, strength, sources per line) for the sentiment masking unit: its sentiment words are found as whole words of the segmentation; needed by a sentiment stage in masking.schedule. null: none.",
    )
    sentiment_min_sources: int = arg(
        1,
        "Use only the sentiment words at least this many of the lexicon's sources agree on (precision over coverage).",
    )
    use_pos_entities: bool = arg(
        False, "Also mark person/place/organisation names found by jieba's POS tagger as entities."
    )
    pack: bool = arg(
        False,
        "Join consecutive short documents into examples of up to max_seq_len tokens (no padding wasted on short lines); held-out documents are packed among themselves.",
    )


@dataclass
class MaskingArgs:
    """Knowledge masking (ERNIE 1.0, SKEP): a staged schedule of char -> phrase -> entity (-> sentiment) masking."""

    schedule: list[dict[str, Any]] = arg(
        help="Stages in order: each {strategy: char|phrase|entity|sentiment (or a {name: probability} mixture), until_step: N or null for the last stage}. sentiment (SKEP) masks the words of data.sentiment_lexicon first, within the same budget, and trains the word polarity head.",
        default_factory=lambda: [{"strategy": "char", "until_step": None}],
    )
    mlm_probability: float = arg(0.15, "Fraction of tokens selected for prediction.")
    max_ngram: int = arg(
        1, "Mask spans of up to this many consecutive units, n drawn with p(n) ~ 1/n; 1: single units."
    )
    eval_strategy: str = arg(
        "char",
        "Masking of the held-out split. Its masks are drawn once, so evaluations are comparable across the whole schedule.",
    )
    polarity_weight: float = arg(
        1.0,
        "With a sentiment stage: weight of the sentiment-word polarity loss (SKEP; a linear head on the final hidden state of each masked sentiment-word token, saved with the model) added to the MLM loss. 0: no polarity head.",
    )

    def uses_sentiment(self) -> bool:
        """Whether a stage of the schedule, or the held-out split's masking, uses the sentiment unit."""
        strategies = [stage.get("strategy") for stage in self.schedule if isinstance(stage, dict)]
        strategies.append(self.eval_strategy)
        return any(s == "sentiment" or (isinstance(s, dict) and bool(s.get("sentiment"))) for s in strategies)


@dataclass
class OptimArgs:
    """AdamW with linear warmup and cosine/linear decay."""

    lr: float = arg(5e-4, "Peak learning rate.")
    betas: list[float] = arg(help="AdamW betas (beta1, beta2).", default_factory=lambda: [0.9, 0.999])
    eps: float = arg(1e-8, "AdamW epsilon.")
    weight_decay: float = arg(
        0.01, "Decoupled weight decay; biases, LayerNorm weights and embeddings are not decayed."
    )
    warmup_steps: int = arg(0, "Steps of linear warmup from 0 to lr.")
    decay: str = arg("cosine", "Decay after warmup: cosine, linear or constant.")
    min_lr_ratio: float = arg(0.0, "Final learning rate as a fraction of lr.")
    grad_clip: float | None = arg(1.0, "Clip the global gradient norm to this value; null or 0 disables.")


@dataclass
class CheckpointArgs:
    """Atomic checkpoints with rotation."""

    interval: int = arg(1000, "Save a checkpoint every this many optimizer steps (0: only at the end).")
    keep_last: int = arg(3, "Keep the newest N checkpoints; older ones are deleted.")
    save_final: bool = arg(True, "Also save a checkpoint after the last step.")


@dataclass
class EvalArgs:
    """Periodic evaluation on the held-out split."""

    interval: int = arg(500, "Evaluate every this many optimizer steps (0: only at the end).")
    max_batches: int | None = arg(
        None, "Evaluate on at most this many batches; null: the whole held-out split."
    )
    batch_size: int | None = arg(None, "Evaluation batch size; null: micro_batch_size.")


@dataclass
class LoggingArgs:
    """Progress bar, TensorBoard and metrics files."""

    interval: int = arg(10, "Log training metrics every this many optimizer steps.")
    tensorboard: bool = arg(True, "Write TensorBoard event files to output_dir/tensorboard.")
    progress_bar: bool = arg(True, "Show a tqdm progress bar.")
    peak_flops: float | None = arg(
        None,
        "Peak FLOP/s of one device for the MFU estimate; null: looked up for known GPUs at the run's precision, not reported on CPU.",
    )


@dataclass
class DistributedArgs:
    """How training is spread over processes and devices (ernie-pretrain and ernie-finetune alike)."""

    backend: str = arg(
        "single",
        "single (one process, one device) or deepspeed (DeepSpeed ZeRO data parallelism over the ranks a launcher "
        "such as torchrun or deepspeed starts, ernie_zoo.parallel.deepspeed_backend; gloo on CPU). Fine-tuning "
        "under deepspeed splits every batch of train.batch_size examples over the ranks, runs method full or "
        "lora only, takes train.device as each rank's own, and resumes with the same number of ranks under ZeRO "
        "stage 3.",
    )
    deepspeed_config: str | None = arg(
        None,
        "deepspeed backend: the DeepSpeed json (ZeRO stage, communication); the run's batch sizes, gradient "
        "accumulation and clipping (and, pretraining, precision) are written over it. null: the built-in ZeRO-3 "
        "default.",
    )
    tp_size: int | None = arg(
        None,
        "deepspeed backend: AutoTP tensor-parallel size (the TP plan's Linear layers split over groups of this "
        "many ranks, which read the same rows; it must divide the ranks and the attention heads); null: the "
        "json's autotp_size, else 1. Fine-tuning: full and lora (LoRA's factors split with the layers they wrap).",
    )
    zero_stage: int | None = arg(None, "deepspeed backend: ZeRO stage 0-3 over the json's; null: the json's.")
    recompute: str = arg(
        "none",
        "deepspeed backend: full recomputes every encoder layer in backward (activation checkpointing); none "
        "keeps activations. Fine-tuning: none only.",
    )

    def validate(self) -> None:
        """The rules of both commands; raises `ValueError` naming the key."""
        _check(self.backend in BACKENDS, "distributed.backend", self.backend, "must be single or deepspeed")
        _check(
            self.tp_size is None or self.tp_size >= 1,
            "distributed.tp_size",
            self.tp_size,
            "must be >= 1 or null",
        )
        _check(
            self.zero_stage in (None, 0, 1, 2, 3),
            "distributed.zero_stage",
            self.zero_stage,
            "must be 0-3 or null",
        )
        _check(
            self.recompute in ("none", "full"),
            "distributed.recompute",
            self.recompute,
            "must be none or full",
        )
        if self.backend == "single":
            unset = {"deepspeed_config": None, "tp_size": None, "zero_stage": None, "recompute": "none"}
            for key, default in unset.items():
                value = getattr(self, key)
                _check(value == default, f"distributed.{key}", value, "needs distributed.backend deepspeed")


@dataclass
class PretrainRecipe:
    """Masked-language-model pretraining of an ErnieZoo encoder with knowledge masking."""

    output_dir: str = arg(
        "runs/pretrain", "Checkpoints, TensorBoard events, metrics.jsonl and summary.json go here."
    )
    seed: int = arg(0, "Seeds initialisation, the data order, the masks and dropout.")
    max_steps: int = arg(1000, "Optimizer steps to train.")
    micro_batch_size: int = arg(32, "Examples per forward/backward pass.")
    grad_accum_steps: int = arg(
        1,
        "Micro batches per optimizer step (global batch = micro_batch_size * grad_accum_steps * data-parallel size).",
    )
    precision: str = arg(
        "fp32",
        "fp32, bf16 (autocast; slow on CPUs without bf16 units) or fp16 (autocast + loss scaling; CUDA only).",
    )
    device: str = arg("auto", "auto (cuda if available, else cpu), cpu, cuda or cuda:N.")
    num_threads: int | None = arg(None, "torch CPU threads; null: torch's default.")
    sparse_last_layer: bool = arg(
        True,
        "Run the last encoder layer's queries and feed-forward, and the MLM head, only at masked positions (the "
        "loss reads nothing else: same value, less compute). Off: the full last layer, then the head on the masked rows.",
    )
    resume: str = arg(
        "auto",
        "auto: continue from the newest valid checkpoint in output_dir if there is one; latest: the same but one must exist; never: start fresh (output_dir must hold no checkpoints); or the path of a checkpoint directory.",
    )
    model: ModelArgs = arg(help="", default_factory=ModelArgs)
    tokenizer: TokenizerArgs = arg(help="", default_factory=TokenizerArgs)
    data: DataArgs = arg(help="", default_factory=DataArgs)
    masking: MaskingArgs = arg(help="", default_factory=MaskingArgs)
    optim: OptimArgs = arg(help="", default_factory=OptimArgs)
    checkpoint: CheckpointArgs = arg(help="", default_factory=CheckpointArgs)
    eval: EvalArgs = arg(help="", default_factory=EvalArgs)
    logging: LoggingArgs = arg(help="", default_factory=LoggingArgs)
    distributed: DistributedArgs = arg(help="", default_factory=DistributedArgs)

    def validate(self) -> None:
        """Check values that types alone cannot; raises `ValueError` naming the key."""
        from ernie_zoo.models.presets import PRESETS

        _check(self.max_steps > 0, "max_steps", self.max_steps, "must be > 0")
        _check(self.micro_batch_size > 0, "micro_batch_size", self.micro_batch_size, "must be > 0")
        _check(self.grad_accum_steps > 0, "grad_accum_steps", self.grad_accum_steps, "must be > 0")
        _check(self.precision in PRECISIONS, "precision", self.precision, f"must be one of {PRECISIONS}")
        _check(
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
            "device",
            self.device,
            "must be auto, cpu, cuda or cuda:N",
        )
        _check(
            self.num_threads is None or self.num_threads > 0, "num_threads", self.num_threads, "must be > 0"
        )
        m = self.model
        if m.preset is not None:
            _check(m.preset in PRESETS, "model.preset", m.preset, f"must be one of {sorted(PRESETS)} or null")
        else:
            missing = [k for k in ARCH_FIELDS if getattr(m, k) is None]
            _check(
                not missing, "model.preset", None, f"is null, so model.{', model.'.join(missing)} must be set"
            )
        _check(
            m.feature_fusion in ("add", "concat"),
            "model.feature_fusion",
            m.feature_fusion,
            "must be add or concat",
        )
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(m, key)
            _check(0.0 <= value < 1.0, f"model.{key}", value, "must be in [0, 1)")
        _check(
            self.tokenizer.vocab_size > 5, "tokenizer.vocab_size", self.tokenizer.vocab_size, "must be > 5"
        )
        d = self.data
        _check(
            bool(d.files) != (d.dataset_dir is not None),
            "data.files",
            d.files,
            "give exactly one of data.files or data.dataset_dir",
        )
        _check(
            d.dataset_dir is None or self.tokenizer.path is not None,
            "tokenizer.path",
            None,
            "must be set when data.dataset_dir is used (a vocabulary cannot be trained on token ids)",
        )
        _check(d.max_seq_len >= 8, "data.max_seq_len", d.max_seq_len, "must be >= 8")
        _check(0.0 <= d.eval_fraction < 1.0, "data.eval_fraction", d.eval_fraction, "must be in [0, 1)")
        _check(d.num_proc > 0, "data.num_proc", d.num_proc, "must be > 0")
        k = self.masking
        _check(
            0.0 < k.mlm_probability < 1.0, "masking.mlm_probability", k.mlm_probability, "must be in (0, 1)"
        )
        _check(k.max_ngram >= 1, "masking.max_ngram", k.max_ngram, "must be >= 1")
        _check(
            k.polarity_weight >= 0 and k.polarity_weight != float("inf"),
            "masking.polarity_weight",
            k.polarity_weight,
            "must be finite and >= 0",
        )
        _check(
            d.sentiment_min_sources >= 1,
            "data.sentiment_min_sources",
            d.sentiment_min_sources,
            "must be >= 1",
        )
        _check(bool(k.schedule), "masking.schedule", k.schedule, "needs at least one stage")
        for i, stage in enumerate(k.schedule):
            _check(
                isinstance(stage, dict) and "strategy" in stage,
                f"masking.schedule[{i}]",
                stage,
                "needs a strategy",
            )
        _check(
            not k.uses_sentiment() or d.sentiment_lexicon is not None or d.dataset_dir is not None,
            "data.sentiment_lexicon",
            d.sentiment_lexicon,
            "must be set when masking.schedule (or masking.eval_strategy) uses the sentiment unit",
        )
        o = self.optim
        _check(o.lr > 0, "optim.lr", o.lr, "must be > 0")
        _check(
            len(o.betas) == 2 and all(0.0 <= b < 1.0 for b in o.betas),
            "optim.betas",
            o.betas,
            "must be two values in [0, 1)",
        )
        _check(o.eps > 0, "optim.eps", o.eps, "must be > 0")
        _check(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, "must be >= 0")
        _check(o.warmup_steps >= 0, "optim.warmup_steps", o.warmup_steps, "must be >= 0")
        _check(o.decay in DECAYS, "optim.decay", o.decay, f"must be one of {DECAYS}")
        _check(0.0 <= o.min_lr_ratio <= 1.0, "optim.min_lr_ratio", o.min_lr_ratio, "must be in [0, 1]")
        _check(
            o.grad_clip is None or o.grad_clip >= 0, "optim.grad_clip", o.grad_clip, "must be >= 0 or null"
        )
        _check(self.checkpoint.interval >= 0, "checkpoint.interval", self.checkpoint.interval, "must be >= 0")
        _check(
            self.checkpoint.keep_last >= 1, "checkpoint.keep_last", self.checkpoint.keep_last, "must be >= 1"
        )
        _check(self.eval.interval >= 0, "eval.interval", self.eval.interval, "must be >= 0")
        for key in ("max_batches", "batch_size"):
            value = getattr(self.eval, key)
            _check(value is None or value > 0, f"eval.{key}", value, "must be > 0 or null")
        _check(self.logging.interval > 0, "logging.interval", self.logging.interval, "must be > 0")
        pf = self.logging.peak_flops
        _check(pf is None or pf > 0, "logging.peak_flops", pf, "must be > 0 or null")
        self.distributed.validate()


PRECISIONS = ("fp32", "bf16", "fp16")
DECAYS = ("cosine", "linear", "constant")
BACKENDS = ("single", "deepspeed")  # the names of ernie_zoo.training.engine.ENGINES
ARCH_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def _check(ok: bool, key: str, value: Any, message: str) -> None:
    if not ok:
        raise ValueError(f"recipe key {key!r} = {value!r}: {message}")


# ----------------------------------------------------------------------------------- generic machinery
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = " | ".join(_type_name(a) for a in args)
        return f"{inner} | null" if len(args) < len(typing.get_args(tp)) else inner
    if origin is list:
        return f"list[{_type_name(typing.get_args(tp)[0])}]"
    if origin is dict:
        return "dict"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`, converting strings from the CLI / YAML where unambiguous."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        nullable = type(None) in args
        if value is None or (nullable and isinstance(value, str) and value.lower() in ("null", "none", "~")):
            if nullable:
                return None
            raise TypeError(f"recipe key {key!r}: null is not allowed (expected {_type_name(tp)})")
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except (TypeError, ValueError):
                pass
        raise TypeError(f"recipe key {key!r}: {value!r} is not a {_type_name(tp)}")
    if value is None:
        raise TypeError(f"recipe key {key!r}: null is not allowed (expected {_type_name(tp)})")
    if origin is list:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise TypeError(f"recipe key {key!r}: expected a list, got {value!r}")
        (inner,) = typing.get_args(tp)
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            raise TypeError(f"recipe key {key!r}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _BOOLS:
            return _BOOLS[value.lower()]
        raise TypeError(f"recipe key {key!r}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise TypeError(f"recipe key {key!r}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                number = float(value) if any(c in value for c in ".eE") else int(value)
            except ValueError:
                raise TypeError(f"recipe key {key!r}: expected an integer, got {value!r}") from None
            return _coerce(number, int, key)
        raise TypeError(f"recipe key {key!r}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise TypeError(f"recipe key {key!r}: expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise TypeError(f"recipe key {key!r}: expected a number, got {value!r}") from None
        raise TypeError(f"recipe key {key!r}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (dict, list)):
            raise TypeError(f"recipe key {key!r}: expected a string, got {value!r}")
        return (
            value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
        )
    raise TypeError(f"recipe key {key!r}: unsupported annotation {tp!r}")


_BOOLS = {
    "true": True,
    "false": False,
    "yes": True,
    "no": False,
    "1": True,
    "0": False,
    "on": True,
    "off": False,
}


def from_dict(cls: type[T], data: dict[str, Any] | None, prefix: str = "") -> T:
    """Build dataclass `cls` from a nested dict; unknown keys and wrong types raise naming the dotted key."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise TypeError(f"recipe section {prefix.rstrip('.') or '<root>'!r} must be a mapping, got {data!r}")
    fields, hints = _fields(cls), _hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = f"{prefix}{unknown[0]}"
        raise ValueError(
            f"unknown recipe key {key!r}; valid keys{' in ' + prefix.rstrip('.') if prefix else ''}: "
            f"{', '.join(sorted(fields))}"
        )
    kwargs = {}
    for name, value in data.items():
        tp = hints[name]
        if _is_dataclass_type(tp):
            kwargs[name] = from_dict(tp, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, tp, f"{prefix}{name}")
    return cls(**kwargs)


def to_dict(obj: Any) -> dict[str, Any]:
    """The recipe as a plain nested dict (YAML/JSON-ready)."""
    return dataclasses.asdict(obj)


def _set_dotted(data: dict[str, Any], cls: type, dotted: str, raw: Any) -> None:
    """Set `a.b.c = raw` in the nested dict, checking every part of the key against the dataclasses."""
    parts = dotted.split(".")
    node, node_cls = data, cls
    for i, part in enumerate(parts):
        fields = _fields(node_cls)
        prefix = ".".join(parts[:i])
        if part not in fields:
            raise ValueError(
                f"unknown recipe key {dotted!r}; valid keys{' in ' + prefix if prefix else ''}: "
                f"{', '.join(sorted(fields))}"
            )
        tp = _hints(node_cls)[part]
        if i == len(parts) - 1:
            if _is_dataclass_type(tp):
                raise ValueError(
                    f"recipe key {dotted!r} is a section; set one of its keys, e.g. --{dotted}.KEY VALUE"
                )
            node[part] = _coerce(raw, tp, dotted)
            return
        if not _is_dataclass_type(tp):
            raise ValueError(
                f"recipe key {'.'.join(parts[: i + 1])!r} is not a section, so {dotted!r} is unknown"
            )
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ValueError(f"recipe section {'.'.join(parts[: i + 1])!r} must be a mapping, got {node!r}")
        node_cls = tp


def load_recipe(
    path: str | os.PathLike | None = None,
    overrides: dict[str, Any] | None = None,
    cls: type[T] = PretrainRecipe,
) -> T:
    """Read a YAML recipe (or start from the defaults), apply dotted overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a recipe must be a mapping of keys, got {type(data).__name__}")
    for key, value in (overrides or {}).items():
        _set_dotted(data, cls, key, value)
    try:
        recipe = from_dict(cls, data)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{path}: {e}" if path is not None else str(e)) from None
    if hasattr(recipe, "validate"):
        recipe.validate()
    return recipe


def iter_fields(cls: type, prefix: str = "") -> typing.Iterator[tuple[str, Any, dataclasses.Field]]:
    """(dotted key, type, field) for every leaf field, depth first in declaration order."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if _is_dataclass_type(tp):
            yield from iter_fields(tp, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", tp, f


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def recipe_help(
    cls: type = PretrainRecipe,
    prog: str = "ernie-pretrain",
    recipes_dir: str = "recipes/pretrain/",
    example: str = "--optim.lr 1e-3",
) -> str:
    """`--help` text: usage, then every dotted key with its type, default and help."""
    lines = [
        f"usage: {prog} [RECIPE.yaml] [--KEY VALUE ...] [--resume [PATH]] [--print-recipe] [--help]",
        "",
        (cls.__doc__ or "").strip(),
        "",
        f"RECIPE.yaml is a YAML file of the keys below (see {recipes_dir}); --KEY VALUE overrides one key,",
        f"with dotted keys for sections ({example}). --resume alone means resume=latest.",
        "--print-recipe prints the resolved recipe as commented YAML and exits.",
        "",
        "keys:",
    ]
    section = None
    for key, tp, f in iter_fields(cls):
        head = key.split(".")[0] if "." in key else None
        if head != section and head is not None:
            sub = _hints(cls)[head]
            lines.append(f"\n  {head}: {(sub.__doc__ or '').strip()}")
        section = head
        default = _default(f)
        lines.append(f"  --{key} {_type_name(tp).upper()}  (default: {_yaml_scalar(default)})")
        for wrapped in textwrap.wrap(f.metadata.get("help", ""), 96):
            lines.append(f"        {wrapped}")
    return "\n".join(lines)


def _yaml_float(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}[repr(value)]
    if value == 0 or 1e-4 <= abs(value) < 1e6:
        return repr(value)
    mantissa, exponent = f"{value:.6e}".split("e")
    mantissa = mantissa.rstrip("0")
    mantissa = mantissa + "0" if mantissa.endswith(".") else mantissa
    return f"{mantissa}e{int(exponent):+03d}"  # 1.6e+11: YAML 1.1 (PyYAML) needs the dot to read a float


def _yaml_scalar(value: Any) -> str:
    """One-line YAML for a value (floats always in a form PyYAML reads back as float)."""
    if isinstance(value, float):
        return _yaml_float(value)
    if isinstance(value, list) and all(isinstance(v, float) for v in value) and value:
        return "[" + ", ".join(_yaml_float(v) for v in value) + "]"
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1 << 16).strip()
    return text.removesuffix("...").strip()


def recipe_to_yaml(recipe: Any, header: str | None = None) -> str:
    """The recipe as YAML with each field's help as a comment above it (`yaml.safe_load` reads it back)."""
    out: list[str] = []
    if header:
        out += [f"# {line}".rstrip() for line in header.strip().splitlines()] + [""]

    def emit(obj: Any, indent: str) -> None:
        cls = type(obj)
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            value = getattr(obj, f.name)
            if _is_dataclass_type(hints[f.name]):
                out.append("")
                doc = (hints[f.name].__doc__ or "").strip()
                if doc:
                    out.append(f"{indent}# {doc}")
                out.append(f"{indent}{f.name}:")
                emit(value, indent + "  ")
                continue
            for wrapped in textwrap.wrap(f.metadata.get("help", ""), 100 - len(indent)):
                out.append(f"{indent}# {wrapped}")
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                out.append(f"{indent}{f.name}:")  # a list of mappings: one per line
                out.extend(f"{indent}  - {_yaml_scalar(v)}" for v in value)
            else:
                out.append(f"{indent}{f.name}: {_yaml_scalar(value)}")

    emit(recipe, "")
    return "\n".join(out) + "\n"


def parse_cli(
    argv: list[str], cls: type = PretrainRecipe
) -> tuple[str | None, dict[str, Any], dict[str, bool]]:
    """Split argv into (recipe path, {dotted key: raw value}, flags). Flags: help, print_recipe.

    `--key value`, `--key=value`; a boolean key with no value means true; `--resume` alone means `latest`.
    """
    path: str | None = None
    overrides: dict[str, Any] = {}
    flags = {"help": False, "print_recipe": False}
    leaf_types = {key: tp for key, tp, _ in iter_fields(cls)}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token in ("-h", "--help"):
            flags["help"] = True
            continue
        if token == "--print-recipe":
            flags["print_recipe"] = True
            continue
        if not token.startswith("--"):
            if path is not None:
                raise ValueError(
                    f"unexpected argument {token!r}: only one recipe file may be given (got {path!r})"
                )
            path = token
            continue
        key, eq, value = token[2:].partition("=")
        key = key.replace("-", "_") if key not in leaf_types else key
        if not eq:
            next_is_value = i < len(argv) and not argv[i].startswith("--")
            if key == "resume" and next_is_value and argv[i].endswith((".yaml", ".yml")):
                next_is_value = False  # `--resume recipe.yaml`: the file is the recipe, not a checkpoint
            if next_is_value:
                value = argv[i]
                i += 1
            elif key == "resume":
                value = "latest"
            elif leaf_types.get(key) is bool:
                value = "true"
            else:
                raise ValueError(f"--{key} needs a value")
        if key in overrides:
            raise ValueError(f"--{key} given twice")
        overrides[key] = value
    return path, overrides, flags


__all__ = [
    "CheckpointArgs",
    "DataArgs",
    "DistributedArgs",
    "EvalArgs",
    "LoggingArgs",
    "MaskingArgs",
    "ModelArgs",
    "OptimArgs",
    "PretrainRecipe",
    "TokenizerArgs",
    "arg",
    "from_dict",
    "iter_fields",
    "load_recipe",
    "parse_cli",
    "recipe_help",
    "recipe_to_yaml",
    "to_dict",
]
