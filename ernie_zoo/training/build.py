"""Building what pretraining trains: the model config a recipe describes, a seeded model (or one initialised from a
saved directory), the recipe's AdamW and schedule, regional compilation, and the save_pretrained-layout weight files
of a checkpoint. No engine and no backend here (`backends.py` chooses those); every engine builds on these.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ernie_zoo.models import ErnieZooConfig, ErnieZooForMaskedLM
from ernie_zoo.models.decoder import is_decoder_config
from ernie_zoo.models.presets import preset_config
from ernie_zoo.models.seeded_init import materialize
from ernie_zoo.utils import tied_names

from .causal_lm import build_decoder_model
from .core import adamw, warmup_decay
from .recipe import ARCH_FIELDS, PretrainModelArgs, PretrainRecipe

logger = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
#: State-dict prefix of the sentiment-word polarity head (`ErnieZooForMaskedLM.word_polarity`).
POLARITY_HEAD = "word_polarity."


def build_model_config(
    args: PretrainModelArgs, vocab_size: int, max_seq_len: int | None = None
) -> ErnieZooConfig:
    """The `ErnieZooConfig` a recipe's model section describes, for a tokenizer of `vocab_size` tokens."""
    if args.vocab_size is not None and args.vocab_size < vocab_size:
        raise ValueError(
            f"recipe key 'model.vocab_size' = {args.vocab_size} is smaller than the tokenizer's vocabulary "
            f"({vocab_size}); use null or a value >= {vocab_size}"
        )
    fields: dict[str, Any] = {
        k: getattr(args, k) for k in (*ARCH_FIELDS, "max_position_embeddings") if getattr(args, k) is not None
    }
    fields.update(
        vocab_size=args.vocab_size if args.vocab_size is not None else vocab_size,
        hidden_dropout_prob=args.hidden_dropout_prob,
        attention_probs_dropout_prob=args.attention_probs_dropout_prob,
        use_pinyin=args.use_pinyin,
        use_radical=args.use_radical,
        use_strokes=args.use_strokes,
        use_stroke_sequence=args.use_stroke_sequence,
        feature_fusion=args.feature_fusion,
    )
    config = preset_config(args.preset, **fields) if args.preset is not None else ErnieZooConfig(**fields)
    if max_seq_len is not None and config.max_position_embeddings < max_seq_len:
        raise ValueError(
            f"data.max_seq_len ({max_seq_len}) exceeds the model's max_position_embeddings "
            f"({config.max_position_embeddings}); raise model.max_position_embeddings"
        )
    return config


def build_model(config: ErnieZooConfig, tokenizer, seed: int, meta: bool = False) -> ErnieZooForMaskedLM:
    """A freshly initialised MLM model with the tokenizer's character tables (`tokenizer`: a tokenizer or the dict
    of its tables). Every weight is a function of `seed` and its name (`models.seeded_init`), so a part of the
    model built alone has the whole model's values there. `meta`: leave the weights on the meta device (no memory)
    for `seeded_init.materialize(model, seed, device)` after keeping a part (a pipeline stage); the character
    tables, data rather than initialised weights, are real either way."""
    with torch.device("meta"):
        model = ErnieZooForMaskedLM(config)
    features = model.base_model.embeddings.char_features
    if features is not None:
        for name, table in list(features.named_buffers(recurse=False)):
            features._buffers[name] = torch.zeros(table.shape, dtype=table.dtype)
    model.load_char_tables(tokenizer)
    if not meta:
        materialize(model, seed)
    return model


def build_pretraining_model(config: Any, tokenizer, seed: int, meta: bool = False) -> torch.nn.Module:
    """A freshly initialised model to pretrain: an ERNIE 4.5 decoder for a decoder `config`
    (`causal_lm.build_decoder_model`), else the masked-LM encoder with the tokenizer's character tables
    (`build_model`). `meta`: left on the meta device for `seeded_init.materialize` (a pipeline stage)."""
    if is_decoder_config(config):
        return build_decoder_model(config, seed, meta=meta)
    return build_model(config, tokenizer, seed, meta=meta)


def init_weights_from(model: torch.nn.Module, path: str, part: bool = False) -> None:
    """Copy the weights of the from_pretrained directory `path` into `model` (same architecture and
    vocabulary, checked field by field; every tensor must match by name and shape). Safetensors only, read
    tensor by tensor. `part`: `model` holds a part of the architecture (a pipeline stage): the file's tensors of
    the other parts are not read."""
    import json

    from safetensors import safe_open

    src = Path(path).expanduser()
    cfg_file, weights = src / "config.json", src / MODEL_FILE
    if not cfg_file.is_file() or not weights.is_file():
        raise ValueError(
            f"recipe key 'model.init_from' = {path!r}: needs config.json and {MODEL_FILE} (a from_pretrained "
            "directory or a checkpoint of ernie-pretrain)"
        )
    saved = json.loads(cfg_file.read_text(encoding="utf-8"))
    fields = (
        *ARCH_FIELDS,
        "vocab_size",
        "use_pinyin",
        "use_radical",
        "use_strokes",
        "use_stroke_sequence",
        "feature_fusion",
    )
    diff = {
        k: (saved.get(k), getattr(model.config, k, None))
        for k in fields
        if saved.get(k) != getattr(model.config, k, None)
    }
    if diff:
        detail = ", ".join(f"{k}: saved {a!r} vs recipe {b!r}" for k, (a, b) in diff.items())
        raise ValueError(f"recipe key 'model.init_from' = {path!r}: architecture differs ({detail})")
    own = model.state_dict()
    with safe_open(str(weights), framework="pt") as f:
        names = set(f.keys())
        # The polarity head (a sentiment masking stage) is optional on both sides: a run that adds it starts it
        # fresh, a run without it drops the saved one.
        dropped = sorted(k for k in names if k.startswith(POLARITY_HEAD) and k not in own)
        # The MLM decoder is tied to the word embeddings: a saved file may hold either name.
        tied = tied_names(model)
        missing = [
            k
            for k in own
            if k not in names
            and not k.endswith(("decoder.weight", "decoder.bias"))
            and k not in tied
            and not k.startswith(POLARITY_HEAD)
        ]
        unexpected = [] if part else [k for k in names if k not in own and k not in dropped]
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names if k in own}
        bad = [k for k, shape in shapes.items() if shape != tuple(own[k].shape)]
        if missing or unexpected or bad:
            raise ValueError(
                f"recipe key 'model.init_from' = {path!r}: weights do not fit (missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}, wrong shape {bad[:5]})"
            )
        with torch.no_grad():
            for k in shapes:
                own[k].copy_(f.get_tensor(k))
    logger.info("initialised %d tensors from %s", len(shapes), src)
    fresh = [k for k in own if k.startswith(POLARITY_HEAD) and k not in names]
    if fresh or dropped:
        logger.info(
            "word-polarity head: %s",
            "initialised fresh" if fresh else f"not used by this run, dropped {dropped}",
        )


def optimizer_and_schedule(
    recipe: PretrainRecipe, model: torch.nn.Module, fused: bool = False, cpu_adam: bool = False
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """The recipe's AdamW (parameter groups by `core.decays`) and its warm-up + decay schedule over max_steps;
    `cpu_adam`: DeepSpeed's CPU AdamW (ZeRO-Offload, `core.adamw`)."""
    o = recipe.optim
    optimizer = adamw(
        model, o.lr, o.weight_decay, betas=tuple(o.betas), eps=o.eps, fused=fused, cpu_adam=cpu_adam
    )
    scheduler = warmup_decay(
        optimizer,
        warmup_steps=o.warmup_steps,
        total_steps=recipe.max_steps,
        decay=o.decay,
        min_lr_ratio=o.min_lr_ratio,
    )
    return optimizer, scheduler


def compile_layers(model: torch.nn.Module) -> int:
    """`torch.compile` every transformer layer in place (`nn.Module.compile`, dynamic shapes), the regional
    compilation PyTorch recommends for stacks of identical blocks: the layers share one compiled graph (no
    recompile per layer or per new sequence length), the masked-LM loss's data-dependent gathers stay eager, and
    backward is compiled with the forward (AOTAutograd). The layers are the encoder's (`ernie.encoder.layer`) or
    a decoder's (`model.layers`, ERNIE 4.5 dense and MoE). Returns how many layers were compiled."""
    base = getattr(model, "base_model", model)  # transformers: the body under the head (`ernie`, `model`)
    encoder = getattr(base, "encoder", None)
    layers = getattr(encoder, "layer", None) if encoder is not None else getattr(base, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(
            f"torch_compile: {type(model).__name__} has no layer stack to compile (looked for "
            "encoder.layer and layers under its base model)"
        )
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)


def save_model_weights(model: torch.nn.Module, directory: str | Path) -> None:
    """`config.json` + `model.safetensors` in the layout of `save_pretrained` (tied copies stored once, under
    their first name), so `ErnieZooForMaskedLM.from_pretrained(checkpoint_dir)` loads a checkpoint."""
    directory = Path(directory)
    model.config.save_pretrained(directory)
    tied = tied_names(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in tied}
    save_file(state, str(directory / MODEL_FILE), metadata={"format": "pt"})


def load_model_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load a save_pretrained safetensors file into `model`; only tied weights may be absent from the file."""
    state = load_file(str(path))
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if k not in tied_names(model)]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{path} does not match the model: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}"
        )


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The batch's tensors on `device` (a no-op on CPU)."""
    if device.type == "cpu":
        return batch
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
    }


__all__ = [
    "MODEL_FILE",
    "POLARITY_HEAD",
    "build_model",
    "build_model_config",
    "build_pretraining_model",
    "compile_layers",
    "init_weights_from",
    "load_model_weights",
    "optimizer_and_schedule",
    "save_model_weights",
    "to_device",
]
