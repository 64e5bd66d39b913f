"""Saving what fine-tuning produced, merging LoRA-style adapters, and loading any of it back by path.

Output layout of a run (`output_dir`):

    config.json, model.safetensors, tokenizer files   full fine-tuning, or LoRA/IA3/LoHa/LoKr/AdaLoRA merged
    adapter/                                          the unmerged adapter (when the top level is merged)
    -- or, for adapters that cannot be merged (bottleneck, prompt methods) or with merge: false --
    adapter_config.json, adapter_model.safetensors,   the adapter, its tokenizer, and `ernie_zoo_finetune.json`
    ernie_zoo_finetune.json, tokenizer files          (task, head class, label names, base model path)

A merged or full directory is a plain `from_pretrained` directory with `id2label`/`label2id` in its config, which
is what Taskflow's `task_path=` takes. `load_finetuned(path)` loads either layout.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig

from ernie_zoo.models import (
    ErnieZooConfig,
    ErnieZooEnsembleForTokenClassificationCRF,
    ErnieZooForTokenClassificationCRF,
)
from ernie_zoo.models.decoder import DECODER_MODEL_TYPES, is_decoder_config
from ernie_zoo.models.directory import check_model_dir
from ernie_zoo.models.int8 import save_int8_weights
from ernie_zoo.models.registry import model_class_for
from ernie_zoo.tokenization import ErnieZooTokenizerFast, load_tokenizer
from ernie_zoo.utils import atomic_directory, atomic_write_text, check_finite_weights, verify_manifest
from ernie_zoo.zoo import resolve_model_source

from .bottleneck import CONFIG_NAME, BottleneckModel
from .bottleneck.config import PEFT_TYPE as BOTTLENECK_TYPE

logger = logging.getLogger(__name__)

META_NAME = "ernie_zoo_finetune.json"


def _publish(src: Path, dst: Path) -> None:
    """Move every entry of the finished directory `src` into `dst`, each by one rename; remove `src`."""
    for entry in src.iterdir():
        target = dst / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)
    src.rmdir()


def unwrap(model: nn.Module) -> nn.Module:
    """The underlying transformers model of a peft / bottleneck wrapper (the model itself otherwise)."""
    if isinstance(model, BottleneckModel):
        return model.base_model
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / CONFIG_NAME).is_file()


def load_adapter(base_model: nn.Module, path: str | Path, is_trainable: bool = False) -> nn.Module:
    """Put the adapter saved at `path` (peft or bottleneck) onto `base_model`."""
    path = Path(path)
    if not is_adapter_dir(path):
        raise ValueError(f"{path} is not an adapter directory (no {CONFIG_NAME})")
    peft_type = json.loads((path / CONFIG_NAME).read_text(encoding="utf-8")).get("peft_type")
    if peft_type == BOTTLENECK_TYPE:
        return BottleneckModel.from_pretrained(base_model, path, is_trainable=is_trainable)
    import peft

    return peft.PeftModel.from_pretrained(base_model, str(path), is_trainable=is_trainable)


def load_base_model(base: str | Path, architecture: str, config_updates: dict[str, Any]) -> nn.Module:
    """The head class `architecture` loaded from the base directory, with the task's config fields applied."""
    config = load_config(base)
    for key, value in config_updates.items():
        setattr(config, key, value)
    if "id2label" in config_updates:  # JSON keys are strings
        config.id2label = {int(k): v for k, v in config_updates["id2label"].items()}
    cls = model_class_for({"architectures": [architecture]})
    return cls.from_pretrained(str(base), config=config, dtype=torch.float32)


def load_adapter_dir(path: str | Path) -> nn.Module:
    """The model of an adapter directory `ernie-finetune` wrote (adapter_config.json + its ernie_zoo_finetune.json
    naming the base): the base -- a shipped name (a shipped adapter names its base so: ernie-zoo-e5-small-zh), a
    directory or a hub id, resolved like Taskflow's model=; a shipped base's files checked against its manifest --
    with the task's head and the directory's lexicon, and the adapter put on it (not merged). The one adapter
    loader of `load_finetuned` and Taskflow."""
    path = Path(path)
    meta_path = path / META_NAME
    if not meta_path.is_file():
        raise ValueError(
            f"{path} holds an adapter ({CONFIG_NAME}) but no {META_NAME} naming its base model and head; load the "
            "base yourself and put the adapter on it (load_adapter(base_model, path), or peft), or merge it: "
            "ernie-finetune merge"
        )
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    for key in ("base_model", "architecture"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise ValueError(f"{meta_path}: {key!r} must be a non-empty string, got {meta.get(key)!r}")
    base_source = resolve_model_source(meta["base_model"], hint=f" (the base model {meta_path} names)")
    if base_source.kind == "shipped":
        verify_manifest(base_source.location, complete=True)
    base = load_base_model(base_source.location, meta["architecture"], meta.get("config_updates") or {})
    if hasattr(base, "load_saved_files"):  # ErnieZoo models (not the ERNIE 4.5 decoders)
        base.load_saved_files(path)  # the adapter directory's lexicon, if it carries one
    return load_adapter(base, path)


def load_finetuned(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[nn.Module, ErnieZooTokenizerFast]:
    """(model in eval mode, tokenizer) from a run's output directory, a merged/full model or an adapter dir."""
    path = Path(path)
    if path.is_dir():  # links, config values, tokenizer.json, blank or corrupt weights
        check_model_dir(path)
    if is_adapter_dir(path):
        model = load_adapter_dir(path)
    elif (path / "config.json").is_file():
        config = load_config(path)
        model = model_class_for(config).from_pretrained(str(path), dtype=torch.float32)
    else:
        raise ValueError(f"{path} is neither a model directory (config.json) nor an adapter ({CONFIG_NAME})")
    check_finite_weights(model, str(path))
    # a decoder's tokenizer is whatever its directory holds (the zoo's, or ERNIE 4.5's own)
    load = AutoTokenizer.from_pretrained if is_decoder_config(model.config) else load_tokenizer
    tokenizer = load(str(path))
    return model.to(device).eval(), tokenizer


def load_config(path: str | Path):
    """The config of a model directory: transformers' ERNIE 4.5 config for a decoder, an `ErnieZooConfig`
    otherwise."""
    model_type = PretrainedConfig.get_config_dict(str(path))[0].get("model_type")
    if model_type in DECODER_MODEL_TYPES:
        return AutoConfig.from_pretrained(str(path))
    return ErnieZooConfig.from_pretrained(str(path))


def _set_labels(config, config_updates: dict[str, Any], task: str) -> None:
    for key, value in config_updates.items():
        setattr(config, key, value)
    config.finetuning_task = task


def _save_adapter(model: nn.Module, tokenizer, directory: Path, meta: dict[str, Any]) -> None:
    if isinstance(model, BottleneckModel):
        model.peft_config.base_model_name_or_path = meta["base_model"]
        model.save_pretrained(directory)
    else:
        for cfg in model.peft_config.values():
            cfg.base_model_name_or_path = meta["base_model"]
        model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    # what a full save keeps next to the weights (a lexicon, confusion sets, an n-gram LM): the base directory
    # holds none of it when it came with this fine-tuning; load_finetuned reads it back (load_saved_files)
    base = unwrap(model)
    if hasattr(base, "save_saved_files"):  # ErnieZoo models (not the ERNIE 4.5 decoders)
        base.save_saved_files(directory)
    atomic_write_text(directory / META_NAME, json.dumps(meta, indent=2, ensure_ascii=False))


def export(
    model: nn.Module,
    tokenizer,
    output_dir: str | Path,
    *,
    task: str,
    method: str,
    mergeable: bool,
    merge: bool,
    base_model: str | None,
    config_updates: dict[str, Any],
) -> dict[str, Any]:
    """Write the final model to `output_dir` (layout in the module docstring). Returns what was written.

    LoRA-style adapters are merged in place (`model` is changed); the merged model is returned as "model".
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    base = unwrap(model)
    _set_labels(base.config, config_updates, task)
    result: dict[str, Any] = {"output_dir": str(output_dir), "method": method}
    if method == "full":
        with atomic_directory(output_dir / ".export") as tmp:
            base.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
        _publish(output_dir / ".export", output_dir)
        result.update(kind="model", model=base)
        return result
    meta = {
        "task": task,
        "method": method,
        "architecture": type(base).__name__,
        "base_model": str(Path(base_model).resolve()) if base_model else None,
        "config_updates": config_updates,
    }
    if meta["base_model"] is None:
        raise ValueError("an adapter needs the path of its base model")
    if is_quantized(base):
        meta["quantized_base"] = quantization_name(
            base
        )  # trained on it: `merge_adapter` says so when it merges
    if mergeable and merge:
        with atomic_directory(output_dir / "adapter") as tmp:
            _save_adapter(model, tokenizer, tmp, meta)
        if is_quantized(base):
            # Merging into the quantized weights would round the update into 8 / 4 bits and save a model that
            # matches neither: the adapter goes onto the full-precision base the quantized one was loaded from.
            logger.warning(
                "the base was quantized (%s) for training: the adapter is merged into the full-precision base %s, "
                "the weights the quantized base was made from; the merged model's outputs differ from the "
                "quantized model's by the quantization error (the adapter alone is in %s)",
                quantization_name(base),
                meta["base_model"],
                output_dir / "adapter",
            )
            model, _ = load_finetuned(output_dir / "adapter")
            result["merged_onto"] = "full-precision base"
        merged = model.merge_and_unload()
        _set_labels(merged.config, config_updates, task)
        with atomic_directory(output_dir / ".export") as tmp:
            merged.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
        _publish(output_dir / ".export", output_dir)
        result.update(kind="merged", model=merged, adapter_dir=str(output_dir / "adapter"))
        return result
    with atomic_directory(output_dir / ".export") as tmp:
        _save_adapter(model, tokenizer, tmp, meta)
    _publish(output_dir / ".export", output_dir)
    result.update(kind="adapter", model=model, adapter_dir=str(output_dir))
    return result


def is_quantized(model: nn.Module) -> bool:
    """Whether `model` holds quantized weights (bitsandbytes / torchao through transformers)."""
    return getattr(model.config, "quantization_config", None) is not None or bool(
        getattr(model, "is_quantized", False)
    )


def quantization_name(model: nn.Module) -> str:
    q = getattr(model.config, "quantization_config", None)
    q = q.to_dict() if hasattr(q, "to_dict") else (q or {})
    bits = "8-bit" if q.get("load_in_8bit") else "4-bit" if q.get("load_in_4bit") else "quantized"
    method = q.get("quant_method", "unknown method")
    return f"{getattr(method, 'value', method)} {bits}"


def merge_adapter(adapter_dir: str | Path, output_dir: str | Path) -> Path:
    """Load an adapter onto its base, merge it into the base weights and save a plain from_pretrained dir. A base
    directory that itself holds quantized weights is refused: merging would round the update into them."""
    meta_path = Path(adapter_dir) / META_NAME
    saved_meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    base_dir = saved_meta.get("base_model")
    config_path = Path(base_dir or "") / "config.json"
    if base_dir and config_path.is_file():
        saved = json.loads(config_path.read_text(encoding="utf-8")).get("quantization_config")
        if saved:
            raise ValueError(
                f"the base {base_dir} of {adapter_dir} holds quantized weights "
                f"({saved.get('quant_method', 'unknown method')}): merging would round the adapter's update "
                "into them and save a model that matches neither; merge onto the full-precision checkpoint it "
                "was quantized from (set base_model in ernie_zoo_finetune.json), or load the adapter unmerged"
            )
    if saved_meta.get("quantized_base"):
        logger.warning(
            "%s was trained on a %s base: it is merged into the full-precision base %s (dequantized: the weights "
            "the quantized base was made from); the merged model's outputs differ from the quantized model's by "
            "the quantization error",
            adapter_dir,
            saved_meta["quantized_base"],
            base_dir,
        )
    model, tokenizer = load_finetuned(adapter_dir)
    if isinstance(model, BottleneckModel) or not hasattr(model, "merge_and_unload"):
        raise ValueError(
            f"the adapter in {adapter_dir} cannot be merged (bottleneck adapters and prompt methods "
            "add computation; only LoRA, AdaLoRA, IA3, LoHa and LoKr fold into the weights)"
        )
    peft_type = str(next(iter(model.peft_config.values())).peft_type)
    if "PROMPT" in peft_type or "PREFIX" in peft_type or "P_TUNING" in peft_type:
        raise ValueError(f"{peft_type} adapters cannot be merged into the base weights")
    meta = json.loads((Path(adapter_dir) / META_NAME).read_text(encoding="utf-8"))
    merged = model.merge_and_unload()
    _set_labels(merged.config, meta["config_updates"], meta["task"])
    output_dir = Path(output_dir)
    with atomic_directory(output_dir) as tmp:
        merged.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    return output_dir


def merged_for_finetuning(adapter_dir: str | Path, cache: str | Path | None = None) -> Path:
    """The plain directory to fine-tune from when a recipe's base is an adapter directory (a shipped adapter model
    such as ernie-zoo-e5-ie, or an earlier run's adapter): the adapter merged into its base (`merge_adapter`),
    written once under `cache` (default ~/.cache/ernie_zoo/merged) in a directory named by the adapter's content
    hash, so an edited adapter never reuses a stale merge. Adapters that cannot merge are refused by
    `merge_adapter`, naming why."""
    import hashlib

    from ernie_zoo.data.sources import DEFAULT_CACHE

    adapter_dir = Path(adapter_dir)
    digest = hashlib.sha256()
    for path in sorted(p for p in adapter_dir.iterdir() if p.is_file() and p.name != "manifest.json"):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    target = (
        Path(cache or DEFAULT_CACHE / "merged").expanduser() / f"{adapter_dir.name}-{digest.hexdigest()[:16]}"
    )
    if not (target / "config.json").is_file():
        logger.info("merging the adapter %s into its base for fine-tuning -> %s", adapter_dir, target)
        target.parent.mkdir(parents=True, exist_ok=True)
        merge_adapter(adapter_dir, target)
    return target


def ensemble_of(
    tagger_dirs: list[str | Path],
) -> tuple[ErnieZooEnsembleForTokenClassificationCRF, ErnieZooTokenizerFast]:
    """(the mean-emission ensemble of the fine-tuned CRF taggers in `tagger_dirs`, their shared tokenizer); a
    ValueError names the directory that cannot join (an adapter, another model class, another vocabulary, or a
    config, label set or lexicon that differs)."""
    if len(tagger_dirs) < 2:
        raise ValueError(f"an ensemble needs at least two tagger directories, got {len(tagger_dirs)}")
    taggers, tokenizer = [], None
    for path in tagger_dirs:
        if is_adapter_dir(path):
            raise ValueError(
                f"{path} holds an adapter: merge it first (ernie-finetune merge {path} MERGED_DIR)"
            )
        model, tok = load_finetuned(path)
        if not isinstance(model, ErnieZooForTokenClassificationCRF):
            raise ValueError(f"{path} holds a {type(model).__name__}; an ensemble takes CRF taggers only")
        if tokenizer is None:
            tokenizer = tok
        elif tok.get_vocab() != tokenizer.get_vocab():
            raise ValueError(
                f"{path} has another vocabulary than {tagger_dirs[0]}; the taggers must share one"
            )
        taggers.append(model)
    try:
        return ErnieZooEnsembleForTokenClassificationCRF.from_members(taggers), tokenizer
    except (TypeError, ValueError) as exc:
        members = ", ".join(f"member {i} = {p}" for i, p in enumerate(tagger_dirs))
        raise ValueError(f"{exc} ({members})") from exc


def build_ensemble(tagger_dirs: list[str | Path], output_dir: str | Path, int8: bool = False) -> Path:
    """Save the mean-emission ensemble (`ErnieZooEnsembleForTokenClassificationCRF`) of fine-tuned CRF taggers as
    one model directory with their shared tokenizer and lexicon; `int8` stores its weights as int8 rows with
    per-row scales (`ernie_zoo.models.int8`, about half of fp16). Written atomically."""
    ensemble, tokenizer = ensemble_of(tagger_dirs)
    output_dir = Path(output_dir)
    with atomic_directory(output_dir) as tmp:
        ensemble.save_pretrained(str(tmp))
        if int8:
            save_int8_weights(ensemble, tmp)
        tokenizer.save_pretrained(str(tmp))
    return output_dir


__all__ = [
    "META_NAME",
    "merged_for_finetuning",
    "build_ensemble",
    "ensemble_of",
    "export",
    "is_adapter_dir",
    "load_adapter",
    "load_base_model",
    "load_finetuned",
    "merge_adapter",
    "unwrap",
]
