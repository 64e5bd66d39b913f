"""Where Taskflow's models come from, how they are checked, and the per-process model cache.

A task's model is resolved in this order:

1. `task_path=DIR`: a local directory written by `save_pretrained` (model + tokenizer), e.g. by `ernie-finetune`;
2. `model=NAME` where NAME is a shipped model (`ernie-zoo-mini-sentiment`, ...): the directory
   `ernie_zoo/zoo/NAME/` inside the installed package, verified against its `manifest.json` (sha256 of every
   file) before loading;
3. `model=PATH` that is an existing directory: as 1;
4. `model=HUB_ID` (`org/name`): loaded through transformers' cache. With `HF_HUB_OFFLINE=1` (or
   `TRANSFORMERS_OFFLINE=1`) only the cache is read (`local_files_only=True`) and a model that is not cached
   raises `ModelNotFoundError` at once; online, a model missing from the cache is downloaded with a WARNING in
   the log (nothing is downloaded silently, nothing is ever overwritten).

Before a local or shipped directory is loaded, `ernie_zoo.models.directory.check_model_dir` checks it: symbolic
links out of the directory and non-regular files are refused, config.json values (sizes, dropouts, id2label) and
tokenizer.json's shape are checked, and a safetensors file that is corrupt or whose every tensor is zero is refused,
each error naming the file and the field.

Loaded models and tokenizers are cached per process, keyed by (location, model class, precision, device), so
creating a second Taskflow for the same model is free; `clear_model_cache()` empties it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import threading
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from ernie_zoo.models.directory import check_model_dir
from ernie_zoo.models.int8 import quantize_linear_int8
from ernie_zoo.models.registry import model_class_for
from ernie_zoo.utils import (  # noqa: F401  (MANIFEST, write_manifest: re-exported for Taskflow users)
    MANIFEST,
    ManifestError,
    check_finite_weights,
    unreadable_weights,
    verify_manifest,
    write_manifest,
)
from ernie_zoo.zoo import SHIPPED_MODELS, ZOO_DIR, ModelNotFoundError, ModelSource, resolve_model_source

logger = logging.getLogger(__name__)

# ZOO_DIR, SHIPPED_MODELS, ModelNotFoundError, ModelSource: ernie_zoo.zoo (re-exported here).
INFERENCE_PRECISIONS = ("fp32", "fp16", "bf16", "int8")
#: config.json key in which a model directory names the precision Taskflow runs it at on CPU when the caller names
#: none: "int8" where int8 was measured to give the same results on dev (ernie-zoo-mini-ner), else absent.
CPU_PRECISION_KEY = "taskflow_cpu_precision"
# Vocabulary files of the tokenizer formats transformers saves (fast, WordPiece, BPE, SentencePiece).
_TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


# ----------------------------------------------------------------------------------------------- resolution
def _offline() -> bool:
    from huggingface_hub import constants

    env = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return bool(constants.HF_HUB_OFFLINE) or any(v.strip().upper() in {"1", "ON", "YES", "TRUE"} for v in env)


def resolve_model(
    task: str, model: str | None, task_path: str | os.PathLike | None, default: str | None
) -> ModelSource:
    """Decide where the model of `task` comes from (see module docstring); raises `ModelNotFoundError`."""
    if task_path is not None:
        if model is not None:
            raise ValueError(
                f"pass either model= or task_path=, not both (got model={model!r}, task_path={task_path!r})"
            )
        path = Path(task_path).expanduser()
        if not path.is_dir():
            raise ModelNotFoundError(f"task_path={str(task_path)!r} is not a directory")
        return ModelSource("local", str(path.resolve()))
    name = model if model is not None else default
    if name is None:
        raise ValueError(f"task {task!r} has no default model: pass model= or task_path=")
    if not isinstance(name, str):
        raise TypeError(
            f"model must be a str (a shipped name, a directory or a hub id), got {type(name).__name__}"
        )
    # The name -> location rule is ernie_zoo.zoo's, shared with ernie-finetune's model.model_name_or_path.
    return resolve_model_source(
        name,
        zoo_dir=ZOO_DIR,
        hint=f" For task {task!r}, until it is installed, pass a local model directory written by "
        f"save_pretrained or ernie-finetune: Taskflow({task!r}, task_path='path/to/model_dir')",
    )


# ----------------------------------------------------------------------------------------------- devices
def check_precision(precision: str, device: torch.device) -> None:
    """fp16/bf16 are for GPUs (bf16 is allowed on CPU but slow there); int8 dynamic quantization is CPU only."""
    if precision not in INFERENCE_PRECISIONS:
        raise ValueError(f"precision must be one of {INFERENCE_PRECISIONS}, got {precision!r}")
    if precision == "fp16" and device.type == "cpu":
        raise ValueError(
            "precision='fp16' needs a GPU: CPU kernels for float16 are missing or very slow. "
            "On CPU use precision='fp32' or 'int8' (or 'bf16', which works but is slower than fp32 on most CPUs)"
        )
    if precision == "int8" and device.type != "cpu":
        raise ValueError(
            "precision='int8' (dynamic quantization) runs on CPU only; on a GPU use 'fp16' or 'bf16'"
        )
    if precision == "bf16" and device.type == "cpu":
        logger.info("precision='bf16' on CPU: supported but usually slower than fp32")


# ----------------------------------------------------------------------------------------------- loading
@dataclasses.dataclass
class LoadedModel:
    """A model ready for inference plus its tokenizer; `lock` serialises tokenizer calls (the Rust tokenizer's
    padding/truncation state is shared mutable state)."""

    model: Any
    tokenizer: Any
    source: ModelSource
    precision: str
    device: torch.device
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


_CACHE: dict[tuple, LoadedModel] = {}
_CACHE_LOCK = threading.Lock()
_QUIET = threading.local()


class _LoadReportFilter(logging.Filter):
    """Drop transformers' LOAD REPORT while Taskflow loads a model in this thread: Taskflow checks the missing
    keys itself (and raises), and unused head weights (an encoder taken from a masked-LM checkpoint) are expected."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(_QUIET, "on", False) and "LOAD REPORT" in str(record.msg))


logging.getLogger("transformers.modeling_utils").addFilter(_LoadReportFilter())


def clear_model_cache() -> None:
    """Forget every cached model and tokenizer (frees their memory once no Taskflow holds them)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _from_pretrained(cls: Any, source: ModelSource, **kwargs: Any) -> Any:
    """`cls.from_pretrained` with the cache policy of the module docstring."""
    if source.kind != "hub":
        return cls.from_pretrained(source.location, local_files_only=True, **kwargs)
    try:
        return cls.from_pretrained(source.location, local_files_only=True, **kwargs)
    except OSError as exc:
        if _offline():
            raise ModelNotFoundError(
                f"{source.location!r} is not a shipped model, not a local directory, and not in the local "
                "transformers cache, and HF_HUB_OFFLINE is set so it cannot be downloaded. Pass a local "
                "directory with task_path=, or download the model on a connected machine first"
            ) from exc
    _check_reachable(source.location)
    logger.warning("%s is not in the local cache: downloading it through transformers", source.location)
    try:
        return cls.from_pretrained(source.location, **kwargs)
    except OSError as exc:
        raise ModelNotFoundError(f"could not download {source.location!r}: {exc}") from exc


def _check_reachable(repo_id: str, timeout: float = 3.0) -> None:
    """One quick TCP connection to the hub endpoint before downloading: when the network is down, transformers'
    retries with back-off would take most of a minute. Skipped behind a proxy (a direct connection may fail)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if any(
        os.environ.get(v)
        for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
    ):
        return
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
    except OSError as exc:
        raise ModelNotFoundError(
            f"{repo_id!r} is not in the local transformers cache and the hub is unreachable ({exc}). Pass a local "
            "directory with task_path=, or download the model on a connected machine first"
        ) from exc


def default_precision(source: ModelSource, device: torch.device) -> str:
    """The precision of a Taskflow given none: on CPU, a local or shipped model directory's config.json
    `taskflow_cpu_precision` ("fp32" or "int8"); "fp32" otherwise (GPU, hub ids, no such key)."""
    if device.type != "cpu" or source.kind == "hub":
        return "fp32"
    path = Path(source.location) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return "fp32"  # load_model says what is wrong with the directory
    value = config.get(CPU_PRECISION_KEY, "fp32") if isinstance(config, dict) else "fp32"
    if value not in ("fp32", "int8"):
        raise ValueError(f"{path}: {CPU_PRECISION_KEY} must be 'fp32' or 'int8', got {value!r}")
    return value


#: peft types whose weights fold into the base (the merged model runs as fast as a plain one, and int8 applies).
_MERGEABLE_PEFT = {"LORA", "ADALORA", "IA3", "LOHA", "LOKR"}


def _is_adapter_dir(location: str) -> bool:
    from ernie_zoo.finetune.export import is_adapter_dir

    return is_adapter_dir(location)


def _load_adapter_model(location: str) -> Any:
    """The model of an adapter directory that `ernie-finetune` wrote (`finetune.export.load_adapter_dir`: the
    base named by its ernie_zoo_finetune.json with the task's head and the adapter on it), for LoRA-style adapters
    merged into its weights."""
    from ernie_zoo.finetune.export import CONFIG_NAME, load_adapter_dir

    model = load_adapter_dir(location)
    peft_type = json.loads((Path(location) / CONFIG_NAME).read_text(encoding="utf-8")).get("peft_type")
    if peft_type in _MERGEABLE_PEFT:
        model = model.merge_and_unload()
    return model


def load_model(
    source: ModelSource,
    auto_class: str | type,
    precision: str = "fp32",
    device: torch.device | None = None,
    ignore_missing: tuple[str, ...] = (),
) -> LoadedModel:
    """Load (or fetch from the per-process cache) `auto_class` (a transformers Auto class name such as
    "AutoModelForSequenceClassification") and the tokenizer from `source`, in eval mode at `precision` on `device`.

    Raises ValueError when the checkpoint lacks weights the task needs (they would be random), e.g. a masked-LM
    directory given to sentiment analysis; `ignore_missing` lists prefixes that may be missing (a pooler).
    """
    import transformers

    import ernie_zoo.auto  # noqa: F401  (registers ErnieZoo with the Auto classes)

    device = device or torch.device("cpu")
    check_precision(precision, device)
    # A transformers Auto class by name, or a model class itself (a head no Auto class maps, e.g. correction).
    cls = getattr(transformers, auto_class) if isinstance(auto_class, str) else auto_class
    auto_class = auto_class if isinstance(auto_class, str) else auto_class.__name__
    key = (source.kind, source.location, auto_class, precision, str(device))
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        if source.kind != "hub":  # links, config values, tokenizer.json, blank or corrupt weights
            check_model_dir(source.location)
        if source.kind == "shipped":
            try:
                verify_manifest(source.location, complete=True)
            except ManifestError as exc:
                raise ManifestError(source.location, f"{exc.problem}; reinstall ernie-zoo") from exc
        try:
            if source.kind != "hub" and not any(
                (Path(source.location) / f).is_file() for f in _TOKENIZER_FILES
            ):
                raise OSError(f"none of {', '.join(_TOKENIZER_FILES)} found")
            tokenizer = _from_pretrained(transformers.AutoTokenizer, source)
            if len(tokenizer) <= len(tokenizer.all_special_ids) + 1:  # transformers may build an empty one
                raise OSError(f"the tokenizer has only {len(tokenizer)} tokens")
        except (OSError, ValueError) as exc:
            if isinstance(exc, ModelNotFoundError):
                raise
            raise ModelNotFoundError(
                f"{source.location} has no loadable tokenizer ({exc}); save it next to the model with "
                "tokenizer.save_pretrained(directory)"
            ) from exc
        if auto_class == "AutoModelForTokenClassification":  # a CRF tagger, an ensemble: the registry's class
            config = _from_pretrained(transformers.AutoConfig, source)
            cls = model_class_for(config, pipeline_tag="token-classification", default=cls)
        _QUIET.on = True
        try:
            if source.kind != "hub" and _is_adapter_dir(source.location):
                model, info = _load_adapter_model(source.location), {}
            else:
                model, info = _from_pretrained(cls, source, output_loading_info=True, dtype=torch.float32)
        except (SafetensorError, pickle.UnpicklingError) as exc:
            raise unreadable_weights(source.location, exc) from exc
        finally:
            _QUIET.on = False
        check_finite_weights(model, source.location)
        unused = sorted(info.get("unexpected_keys", ()))
        if unused:
            logger.info("%s: weights not used by %s: %s", source.location, auto_class, unused[:8])
        missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(ignore_missing))
        if missing:
            arch = (getattr(model.config, "architectures", None) or ["?"])[0]
            raise ValueError(
                f"{source.location} holds a {arch} checkpoint without the weights {missing[:4]} that "
                f"{auto_class} needs (they would be random): is this the right model for the task?"
            )
        model.eval()
        if precision == "int8":
            # int8 compute for every Linear, inputs quantised per token so that a text's output does not depend
            # on the texts batched with it
            model = quantize_linear_int8(model)
        elif precision in ("fp16", "bf16"):
            model = model.to(torch.float16 if precision == "fp16" else torch.bfloat16)
        model = model.to(device)
        loaded = LoadedModel(
            model=model, tokenizer=tokenizer, source=source, precision=precision, device=device
        )
        _CACHE[key] = loaded
        logger.info("loaded %s from %s (%s, %s)", type(model).__name__, source.location, precision, device)
        return loaded


__all__ = [
    "CPU_PRECISION_KEY",
    "LoadedModel",
    "ManifestError",
    "ModelNotFoundError",
    "ModelSource",
    "INFERENCE_PRECISIONS",
    "SHIPPED_MODELS",
    "ZOO_DIR",
    "check_precision",
    "default_precision",
    "clear_model_cache",
    "load_model",
    "resolve_model",
    "verify_manifest",
    "write_manifest",
]
