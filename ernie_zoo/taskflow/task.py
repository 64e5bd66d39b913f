"""The task base classes, the task registry and typed task options.

Every task is one small class in its own file (PaddleNLP's `taskflow/task.py` shape)::

    @register_task("sentiment_analysis", default_model="ernie-zoo-mini-sentiment")
    class SentimentAnalysis(EncoderTask):
        auto_class = "AutoModelForSequenceClassification"
        Options = SentimentOptions             # a dataclass: typed, documented task options
        def run_batch(self, batch, features): ...   # forward one padded batch
        def postprocess(self, prepared, outputs): ...  # -> one result dataclass per input text

`Task.run(texts)` is `postprocess(forward(preprocess(texts)))`. `EncoderTask` implements preprocess (split long
texts, tokenize) and forward (length-sorted batches with dynamic padding under `torch.inference_mode`, results
put back in input order) once for every encoder task.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from ernie_zoo.text.sentences import chunk_spans
from ernie_zoo.utils import NonFiniteError

from .models import LoadedModel
from .text import clean_surrogates

PAD_MULTIPLE = 8
#: config.json key naming the longest token sequence a model was trained on (Taskflow chunks texts to it).
TRAINED_LENGTH_KEY = "taskflow_max_seq_len"
logger = logging.getLogger(__name__)
TASKS: dict[str, type[Task]] = {}
ALIASES: dict[str, str] = {}


def register_task(
    name: str, *, aliases: tuple[str, ...] = (), default_model: str | None = None
) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: register a Task subclass under `name` (and `aliases`) with its shipped default model."""

    def decorate(cls: type[Task]) -> type[Task]:
        for key in (name, *aliases):
            if key in TASKS or key in ALIASES:
                raise ValueError(f"task name {key!r} is registered twice")
        cls.name = name
        cls.aliases = tuple(aliases)
        cls.default_model = default_model
        TASKS[name] = cls
        for alias in aliases:
            ALIASES[alias] = name
        return cls

    return decorate


def get_task(name: str) -> type[Task]:
    """The Task class registered as `name` or an alias; ValueError listing the tasks otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"task must be a str, got {type(name).__name__}")
    key = ALIASES.get(name, name)
    if key not in TASKS:
        names = sorted(TASKS) + sorted(f"{a} (= {t})" for a, t in ALIASES.items())
        raise ValueError(f"unknown task {name!r}; available tasks: {', '.join(names)}")
    return TASKS[key]


def list_tasks() -> dict[str, dict[str, Any]]:
    """{task name: {"aliases", "default_model", "options"}} for every registered task."""
    return {
        name: {
            "aliases": list(cls.aliases),
            "default_model": cls.default_model,
            "modes": dict(cls.modes),
            "options": [f.name for f in dataclasses.fields(cls.Options)],
        }
        for name, cls in sorted(TASKS.items())
    }


# ----------------------------------------------------------------------------------------------- options
def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return value in typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is not None:
        return isinstance(value, origin)
    return isinstance(value, hint)


def build_options(options_cls: type, task: str, given: dict[str, Any]) -> Any:
    """Instantiate a task's options dataclass, rejecting unknown names and values of the wrong type."""
    fields = {f.name for f in dataclasses.fields(options_cls)}
    unknown = sorted(set(given) - fields)
    if unknown:
        valid = ", ".join(sorted(fields)) or "none"
        raise ValueError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for task {task!r}; its options: {valid}"
        )
    hints = typing.get_type_hints(options_cls, globalns=vars(sys.modules[options_cls.__module__]))
    for name, value in given.items():
        if not _matches(value, hints[name]):
            raise TypeError(
                f"option {name!r} of task {task!r} must be {_describe(hints[name])}, got {value!r}"
            )
        # NaN fails every comparison, so a range check written `x < bound` lets it through and the task then
        # silently does nothing (threshold=nan corrected no text): no option takes a non-finite number.
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"option {name!r} of task {task!r} must be a finite number, got {value!r}")
    options = options_cls(**given)
    check = getattr(options, "validate", None)
    if check is not None:
        check()
    return options


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless condition (for option `validate` methods)."""
    if not condition:
        raise ValueError(message)


@dataclass
class NoOptions:
    """This task takes no options."""


@dataclass
class Settings:
    """Options every task shares (the keyword arguments of `Taskflow` before `**task_options`)."""

    device: torch.device
    batch_size: int = 32
    max_seq_len: int = 512
    precision: str = "fp32"
    user_dict: Any = None


class Result:
    """Base of result dataclasses: `to_dict()` gives the plain dict a Taskflow call returns."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


# ----------------------------------------------------------------------------------------------- tasks
class Task:
    """A task: `run(texts) = postprocess(forward(preprocess(texts)))`, one result dataclass per text."""

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    default_model: ClassVar[str | None] = None
    # transformers Auto class (by name) of the model, or a model class; None: no model
    auto_class: ClassVar[str | type | None] = None
    ignore_missing: ClassVar[
        tuple[str, ...]
    ] = ()  # weight-name prefixes that may be absent from a checkpoint
    uses_user_dict: ClassVar[bool] = False
    # Taskflow(task, mode=M): the shipped model of each mode (the first is default_model's), e.g. ner's
    # {"accurate": ..., "fast": ...}; empty for tasks with one model.
    modes: ClassVar[dict[str, str]] = {}
    Options: ClassVar[type] = NoOptions
    # whether a call may pass a conversation (a list of {role, content} messages) as one input (text_generation)
    takes_conversations: ClassVar[bool] = False
    # whether each input is a pair of texts, [text1, text2] (text_similarity), instead of one text
    takes_pairs: ClassVar[bool] = False

    def __init__(self, settings: Settings, options: Any, loaded: LoadedModel | None = None):
        self.settings = settings
        self.options = options
        self.loaded = loaded

    def run(self, texts: list[str]) -> list[Any]:
        prepared = self.preprocess(texts)
        with without_onednn(self.settings.precision != "bf16"):
            outputs = self.forward(prepared)
        return self.postprocess(prepared, outputs)

    def preprocess(self, texts: list[str]) -> Any:
        raise NotImplementedError

    def forward(self, prepared: Any) -> Any:
        raise NotImplementedError

    def postprocess(self, prepared: Any, outputs: Any) -> list[Any]:
        raise NotImplementedError

    @classmethod
    def usage(cls) -> str:
        """The usage example at the top of the task's file (real Chinese input, real output)."""
        doc = sys.modules[cls.__module__].__doc__ or ""
        return doc.strip()


_ONEDNN_LOCK = threading.Lock()
_ONEDNN_USERS = 0  # forward passes now running with oneDNN off
_ONEDNN_BEFORE = True


@contextlib.contextmanager
def without_onednn(active: bool = True) -> Iterator[None]:
    """Run the block with PyTorch's oneDNN CPU kernels off (`torch.backends.mkldnn.enabled = False`), so that
    matrix products go to MKL's BLAS.

    Why: oneDNN compiles and caches a kernel for every new input shape (up to 1,024 of them), and inference
    traffic brings ever new (batch, length) shapes: 200 random shapes grew RSS by ~390 MiB on the shipped
    sentiment model, and 5,000 mixed calls by ~750 MiB. With oneDNN off the growth was ~8 MiB at the same CPU
    time per call (bench/bench_taskflow_memory.py). Turning the cache off instead
    (ONEDNN_PRIMITIVE_CACHE_CAPACITY=0) made calls ~4x slower, and padding to a few length buckets cost 10% on
    long texts. The flag is process-wide: it is switched off while any Taskflow call of any thread runs and
    restored when the last one ends. bf16 keeps oneDNN (its fast CPU kernels live there)."""
    global _ONEDNN_USERS, _ONEDNN_BEFORE
    if not active:
        yield
        return
    with _ONEDNN_LOCK:
        if _ONEDNN_USERS == 0:
            _ONEDNN_BEFORE = torch.backends.mkldnn.enabled
            torch.backends.mkldnn.enabled = False
        _ONEDNN_USERS += 1
    try:
        yield
    finally:
        with _ONEDNN_LOCK:
            _ONEDNN_USERS -= 1
            if _ONEDNN_USERS == 0:
                torch.backends.mkldnn.enabled = _ONEDNN_BEFORE


def check_finite_outputs(rows: list[Any], text_indices: list[int], where: str) -> None:
    """Raise NonFiniteError when a row's output (tensors, or tuples of them) holds NaN or infinity, naming the
    input text: a model must never hand back a NaN score as a result."""
    for row, index in zip(rows, text_indices):
        parts = row if isinstance(row, (tuple, list)) else (row,)
        for part in parts:
            if isinstance(part, torch.Tensor) and part.is_floating_point() and not torch.isfinite(part).all():
                raise NonFiniteError(
                    f"the model from {where} produced NaN/infinite outputs for input {index}; its weights "
                    "may be corrupted or it was trained to divergence"
                )


@dataclass
class Chunk:
    """A piece of input text `index`: characters [start, end) of it, with its encoding."""

    index: int
    start: int
    end: int
    features: dict[str, list[int]] = field(default_factory=dict)
    offsets: list[tuple[int, int]] = field(default_factory=list)  # into the chunk's text
    special: list[int] = field(default_factory=list)  # 1 for [CLS]/[SEP]-like tokens
    word_ids: list[int | None] = field(default_factory=list)


@dataclass
class Prepared:
    texts: list[str]
    chunks: list[Chunk]


class EncoderTask(Task):
    """Shared preprocess/forward for tasks that run an encoder over (chunks of) each text."""

    # Keys of the tokenizer output passed to the model (when the tokenizer returns them).
    model_keys: ClassVar[tuple[str, ...]] = ("input_ids", "token_type_ids", "pinyin_ids")

    def __init__(self, settings: Settings, options: Any, loaded: LoadedModel | None = None):
        super().__init__(settings, options, loaded)
        assert loaded is not None
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        limits = [settings.max_seq_len]
        max_pos = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(max_pos, int) and max_pos > 0:
            limits.append(max_pos)
        if 0 < getattr(self.tokenizer, "model_max_length", 0) < 1_000_000:
            limits.append(self.tokenizer.model_max_length)
        # The longest sequence the model was trained on, where its directory says so (config.json
        # `taskflow_max_seq_len`): positions beyond it were never trained. The shipped NER models were fine-tuned on
        # 128 tokens, and 20-sentence news documents cut into 512-token chunks scored entity F1 0.70 where 128-token
        # chunks scored 0.88-0.89 (bench/bench_ner_speed.py, documents).
        trained = getattr(self.model.config, TRAINED_LENGTH_KEY, None)
        if isinstance(trained, int) and not isinstance(trained, bool) and trained > 0:
            limits.append(trained)
        self.max_len = min(limits)
        self.n_special = self.tokenizer.num_special_tokens_to_add(pair=False)
        if self.max_len - self.n_special < 4:
            raise ValueError(f"max_seq_len={self.max_len} leaves no room for text")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        from ernie_zoo.models import ErnieZooPreTrainedModel

        # an ONNX Runtime backend names the torch module its graph was exported from as `module`
        module = getattr(self.model, "module", self.model)
        self.keys = self.model_keys if isinstance(module, ErnieZooPreTrainedModel) else self.model_keys[:2]

    # -- preprocess
    def protected_spans(self, text: str) -> list[tuple[int, int]]:
        """Spans the splitter must not cut through (fill-mask protects its [MASK] literals)."""
        return []

    def encode(self, texts: list[str]) -> list[dict[str, Any]]:
        """Tokenize chunk texts (special-token strings in user text stay plain text) -> per-text dicts with
        the model inputs plus "offsets", "special" and "word_ids"."""
        with self.loaded.lock:
            enc = self.tokenizer(
                texts,
                add_special_tokens=True,
                truncation=False,
                return_offsets_mapping=True,
                return_special_tokens_mask=True,
                return_attention_mask=False,
                split_special_tokens=True,
                verbose=False,
            )
        out = []
        for i in range(len(texts)):
            item = {k: enc[k][i] for k in self.keys if k in enc}
            item["offsets"] = [tuple(o) for o in enc["offset_mapping"][i]]
            item["special"] = enc["special_tokens_mask"][i]
            item["word_ids"] = enc.word_ids(i)
            out.append(item)
        return out

    def preprocess(self, texts: list[str]) -> Prepared:
        clean = [clean_surrogates(t) for t in texts]
        chunks: list[Chunk] = []
        budget = self.max_len - self.n_special
        pending = []
        for index, text in enumerate(clean):
            for start, end in chunk_spans(text, budget, self.protected_spans(text)):
                pending.append(Chunk(index, start, end))
        while pending:
            encoded = self.encode([clean[c.index][c.start : c.end] for c in pending])
            retry = []
            for chunk, item in zip(pending, encoded):
                if len(item["input_ids"]) > self.max_len:
                    # NFKC can expand one character into several tokens (㍻ -> 平成): cut this chunk finer.
                    text = clean[chunk.index][chunk.start : chunk.end]
                    protected = self.protected_spans(text)
                    half = max(1, len(text) // 2, *(b - a for a, b in protected))
                    if half < len(text):
                        for s, e in chunk_spans(text, half, protected):
                            retry.append(Chunk(chunk.index, chunk.start + s, chunk.start + e))
                        continue
                if len(item["input_ids"]) > self.max_len:  # one character alone expands beyond max_seq_len
                    logger.warning("a character expands to %d tokens; truncated", len(item["input_ids"]))
                chunk.offsets = item.pop("offsets")[: self.max_len]
                chunk.special = item.pop("special")[: self.max_len]
                chunk.word_ids = item.pop("word_ids")[: self.max_len]
                chunk.features = {k: v[: self.max_len] for k, v in item.items()}
                chunks.append(chunk)
            pending = retry
        chunks.sort(key=lambda c: (c.index, c.start))
        return Prepared(texts=texts, chunks=chunks)

    # -- forward
    def forward(self, prepared: Prepared) -> list[Any]:
        """Run every chunk through `run_batch`, longest first in batches of `batch_size`, each padded only to
        its own longest row; returns the per-chunk outputs in chunk order."""
        chunks = prepared.chunks
        order = sorted(range(len(chunks)), key=lambda i: len(chunks[i].features["input_ids"]), reverse=True)
        outputs: list[Any] = [None] * len(chunks)
        for ids in self.batches(order, [len(c.features["input_ids"]) for c in chunks]):
            batch = self.pad([chunks[i].features for i in ids])
            with torch.inference_mode():
                results = self.run_batch(batch, [chunks[i] for i in ids])
            check_finite_outputs(results, [chunks[i].index for i in ids], self.loaded.source.location)
            for i, row in zip(ids, results):
                outputs[i] = row
        return outputs

    def batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """The chunks of each forward pass: `order` (longest first) cut into batches of `batch_size`.

        In int8 a batch also holds only chunks of one padded width, so every chunk is computed at the width it
        has alone. The int8 products are exact per row (`ernie_zoo.models.int8`), but the float parts around them
        (attention over the padded keys) round differently at another width, by ~1e-7, and the next layer's input
        quantisation can turn that into a whole rounding step: scores moved by up to 2e-4 (1.6e-3 reported) between
        a text alone and in a batch of 64. At one width per batch they are bit-identical. fp32 keeps mixed-width
        batches (its results move by ~1e-7 with the width)."""
        size = self.settings.batch_size
        if self.settings.precision != "int8":
            return [order[b : b + size] for b in range(0, len(order), size)]
        by_width: dict[int, list[int]] = {}
        for i in order:
            by_width.setdefault(self.padded_width(lengths[i]), []).append(i)
        return [group[b : b + size] for group in by_width.values() for b in range(0, len(group), size)]

    def padded_width(self, longest: int) -> int:
        """The width a batch whose longest row has `longest` tokens is padded to: rounded up to a multiple of 8,
        within max_seq_len."""
        return max(longest, min(-(-longest // PAD_MULTIPLE) * PAD_MULTIPLE, self.max_len))

    def pad(self, features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        """Right-pad a batch to its longest row, rounded up to a multiple of 8: (B, T) tensors on the model's
        device plus attention_mask."""
        width = self.padded_width(max(len(f["input_ids"]) for f in features))
        batch: dict[str, torch.Tensor] = {}
        for key in features[0]:
            fill = self.pad_id if key == "input_ids" else 0
            batch[key] = torch.tensor(
                [f[key] + [fill] * (width - len(f[key])) for f in features], dtype=torch.long
            )
        lengths = torch.tensor([len(f["input_ids"]) for f in features])
        batch["attention_mask"] = (torch.arange(width)[None, :] < lengths[:, None]).long()
        return {k: v.to(self.loaded.device) for k, v in batch.items()}

    def run_batch(self, batch: dict[str, torch.Tensor], chunks: list[Chunk]) -> list[Any]:
        """Forward one padded batch; return one output per row (CPU, unpadded)."""
        raise NotImplementedError

    @staticmethod
    def group(prepared: Prepared, outputs: list[Any]) -> list[list[tuple[Chunk, Any]]]:
        """Per input text, its (chunk, output) pairs in text order."""
        grouped: list[list[tuple[Chunk, Any]]] = [[] for _ in prepared.texts]
        for chunk, out in zip(prepared.chunks, outputs):
            grouped[chunk.index].append((chunk, out))
        return grouped


__all__ = [
    "ALIASES",
    "Chunk",
    "EncoderTask",
    "NoOptions",
    "Prepared",
    "Result",
    "Settings",
    "TASKS",
    "Task",
    "build_options",
    "get_task",
    "list_tasks",
    "register_task",
    "require",
]
