"""`Taskflow`: one line from a task name to results.

>>> from ernie_zoo.taskflow import Taskflow
>>> Taskflow("word_segmentation")("我们周末去长城玩")
{'text': '我们周末去长城玩', 'words': ['我们', '周末', '去', '长城', '玩']}
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch

from ernie_zoo.utils import resolve_device

from .models import INFERENCE_PRECISIONS, check_precision, default_precision, load_model, resolve_model
from .onnx import BACKENDS, load_onnx_model, onnx_default_precision
from .onnx import OUTPUTS as ONNX_TASKS
from .task import TASKS, Settings, Task, build_options, get_task
from .text import normalize_inputs, normalize_pairs


class Taskflow:
    """Run a Chinese NLP task on a text or a list of texts.

    Args:
        task: a task name or alias: sentiment_analysis, ner (named_entity_recognition), text_generation,
            word_segmentation, pos_tagging, fill_mask, feature_extraction, text_similarity, information_extraction (see
            `ernie_zoo.taskflow.list_tasks()`).
        model: a shipped model name (ernie-zoo-mini-...), a local directory or a hub id; defaults to the task's
            shipped model.
        task_path: a local model directory (from save_pretrained / ernie-finetune); exclusive with `model`.
        device: "cpu", "cuda", "cuda:N", an int (cuda index) or None (cuda when available).
        batch_size: texts (or text chunks) per forward pass.
        max_seq_len: longest token sequence fed to the model (capped at the model's max_position_embeddings);
            longer texts are split into chunks and the chunk results joined (each task documents how).
        precision: "fp32"; "fp16"/"bf16" on GPU ("bf16" is accepted on CPU but slow there); "int8": the Linear
            layers computed in int8, CPU only. None (default): fp32, or on CPU the precision the model's directory
            names in config.json `taskflow_cpu_precision` (both shipped NER models: int8, measured lossless on dev
            at over twice the speed; docs/taskflow.md, "NER: accurate and fast modes").
        mode: for tasks that ship several models, which one: ner has "accurate" (the default,
            ernie-zoo-mini-ner) and "fast" (ernie-zoo-mini-ner-fast, a smaller distilled tagger); text_generation
            has "general" (the default, ernie-zoo-mini-generator: continues modern text) and "poetry"
            (ernie-zoo-mini-poetry: classical verse). Exclusive with `model` and `task_path`.
        backend: "torch" (default) or "onnxruntime": run a directory written by `ernie-zoo export --onnx`
            (task_path=) with ONNX Runtime on CPU, fp32 only; same results, options and errors. On one thread it
            measured 1.1-1.4x torch fp32 but 0.6-0.8x the NER models' default torch int8
            (bench/results/onnx_speed.json), so torch stays the default (docs/onnx.md).
        user_dict: a jieba user dictionary (path or list of "word [freq] [tag]" lines) for word_segmentation
            and pos_tagging; for ner, names (tag PER/LOC/ORG or nr/ns/nt) added to the model's entity lexicon.
        **task_options: the task's own options (e.g. `top_k=3` for fill_mask); unknown names raise ValueError.

    Calling it with a `str` returns one result dict; with a `list[str]`, a list of dicts in the same order.
    Instances are thread-safe; models are loaded once per process and shared between instances.
    """

    def __init__(
        self,
        task: str,
        model: str | None = None,
        *,
        task_path: str | os.PathLike | None = None,
        device: str | int | torch.device | None = None,
        batch_size: int = 32,
        max_seq_len: int = 512,
        precision: str | None = None,
        mode: str | None = None,
        backend: str = "torch",
        user_dict: str | os.PathLike | list[str] | None = None,
        **task_options: Any,
    ):
        cls = get_task(task)
        for name, value in (("batch_size", batch_size), ("max_seq_len", max_seq_len)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {value!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_seq_len < 8:
            raise ValueError(f"max_seq_len must be >= 8, got {max_seq_len}")
        if backend not in BACKENDS:
            hint = " (the word segmenter is the `segmenter` option)" if backend in ("rjieba", "jieba") else ""
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}{hint}")
        if precision is not None and precision not in INFERENCE_PRECISIONS:
            raise ValueError(f"precision must be one of {INFERENCE_PRECISIONS} or None, got {precision!r}")
        default_model = cls.default_model
        if mode is not None:
            if not cls.modes:
                with_modes = ", ".join(sorted(n for n, t in TASKS.items() if t.modes))
                raise ValueError(f"task {cls.name!r} has no modes (tasks with modes: {with_modes})")
            if mode not in cls.modes:
                raise ValueError(
                    f"mode must be one of {', '.join(map(repr, cls.modes))} for {cls.name!r}, got {mode!r}"
                )
            if model is not None or task_path is not None:
                raise ValueError(
                    "mode= picks a shipped model: pass either mode or model=/task_path=, not both"
                )
            default_model = cls.modes[mode]
        if user_dict is not None and not cls.uses_user_dict:
            users = ", ".join(sorted(name for name, t in TASKS.items() if t.uses_user_dict))
            raise ValueError(f"user_dict is only used by {users}, not {cls.name!r}")
        options = build_options(cls.Options, cls.name, task_options)
        # model-free tasks run on the CPU whatever device says
        run_on = resolve_device(device) if cls.auto_class is not None else torch.device("cpu")
        source = (
            resolve_model(cls.name, model, task_path, default_model) if cls.auto_class is not None else None
        )
        if backend != "torch" and (source is None or cls.name not in ONNX_TASKS):
            with_onnx = ", ".join(ONNX_TASKS)
            raise ValueError(
                f"backend={backend!r} runs the exported encoder tasks ({with_onnx}), not {cls.name!r}"
            )
        if precision is None and backend != "torch":
            precision = onnx_default_precision(source.location) if source.kind == "local" else "fp32"
        if precision is None:
            precision = default_precision(source, run_on) if source is not None else "fp32"
        settings = Settings(
            device=run_on,
            batch_size=batch_size,
            max_seq_len=max_seq_len,
            precision=precision,
            user_dict=user_dict,
        )
        loaded = None
        if source is not None and backend != "torch":
            check_precision(precision, run_on)
            loaded = load_onnx_model(source, cls.name, precision, run_on)
        elif source is not None:
            loaded = load_model(source, cls.auto_class, precision, settings.device, cls.ignore_missing)
        elif model is not None or task_path is not None:
            raise ValueError(f"task {cls.name!r} uses no model: drop model= / task_path=")
        self.task: str = cls.name
        self.options = options
        self.settings = settings
        self.backend = backend
        self._task: Task = cls(settings, options, loaded)

    def __call__(self, inputs: str | list[str]) -> dict[str, Any] | list[dict[str, Any]] | Iterator[str]:
        """`str` -> one result dict; `list[str]` -> a list of result dicts in input order. With the option
        `stream=True` (text_generation): one `str` -> an iterator of text pieces as they are generated.
        text_generation also takes a conversation, `[{"role": "user", "content": ...}, ...]`, as one input;
        text_similarity takes pairs instead of texts: `[text1, text2]` -> one dict, a list of pairs -> a list."""
        chats = self._task.takes_conversations
        if getattr(self.options, "stream", False):
            texts, single = normalize_inputs(inputs, chats)
            if not single:
                raise ValueError("stream=True takes one text (a str) per call, got a list")
            return self._task.stream(texts[0])
        if self._task.takes_pairs:
            texts, single = normalize_pairs(inputs)
        else:
            texts, single = normalize_inputs(inputs, chats)
        results = [r.to_dict() for r in self._task.run(texts)] if texts else []
        return results[0] if single else results

    def set_schema(self, schema: Any) -> None:
        """information_extraction: extract `schema` from now on (same forms as the `schema=` option; a bad schema
        raises ValueError and leaves the current one in place)."""
        setter = getattr(self._task, "set_schema", None)
        if setter is None:
            raise ValueError(f"task {self.task!r} takes no schema (information_extraction does)")
        setter(schema)
        self.options = self._task.options

    @property
    def model_path(self) -> str | None:
        """The directory or hub id the model was loaded from (None for model-free tasks)."""
        loaded = self._task.loaded
        return loaded.source.location if loaded is not None else None

    def usage(self) -> str:
        """The task's usage example (real Chinese input, real output)."""
        return self._task.usage()

    def help(self) -> None:
        """Print the task's usage example."""
        print(self.usage())

    def __repr__(self) -> str:
        where = f", model={self.model_path!r}" if self.model_path else ""
        return f"Taskflow({self.task!r}{where}, device='{self.settings.device}', precision={self.settings.precision!r})"


def task_usage(task: str) -> str:
    """The usage example of a task, without loading its model."""
    return get_task(task).usage()


__all__ = ["Taskflow", "task_usage"]
