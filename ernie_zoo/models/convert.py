"""Load real ERNIE 3.0 / BERT-zh checkpoints into ErnieZoo classes (a state-dict adapter, torchtitan style).

Both formats are plain transformers directories: `config.json` (model_type "ernie" or "bert"), weights
(`model.safetensors`, or `pytorch_model.bin` read with `weights_only=True`), and `vocab.txt`. The ERNIE format
(nghuyong/ernie-3.0-*-zh) already uses our parameter names; BERT's `bert.` prefix is renamed to `ernie.`. The
character-feature embeddings are new: they are initialised so the converted model computes exactly what the
original did (see `ErnieZooPreTrainedModel._init_weights`), and their tables are filled from the vocabulary.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from .configuration import ErnieZooConfig
from .modeling import ErnieZooForMaskedLM, ErnieZooPreTrainedModel

logger = logging.getLogger(__name__)

# Keys of the source config that carry over to ErnieZooConfig.
_CARRIED_CONFIG_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "task_type_vocab_size",
    "use_task_id",
    "initializer_range",
    "layer_norm_eps",
    "pad_token_id",
    "classifier_dropout",
    "id2label",
    "label2id",
)
# Renames applied in order to every source key.
_KEY_RENAMES = (
    (re.compile(r"^bert\."), "ernie."),
    (re.compile(r"\.gamma$"), ".weight"),  # pre-2019 TF-converted checkpoints
    (re.compile(r"\.beta$"), ".bias"),
)
# `--head` names of `ernie-zoo convert` -> the ErnieZoo class each one builds.
HEADS = {
    "base": "ErnieZooModel",
    "mlm": "ErnieZooForMaskedLM",
    "seq-cls": "ErnieZooForSequenceClassification",
    "token-cls": "ErnieZooForTokenClassification",
}
# Source weights a given head has no use for (pretraining heads, pooler of a pooler-less head).
_IGNORABLE = re.compile(r"^(cls\.seq_relationship\.|ernie\.pooler\.|classifier\.|qa_outputs\.)")


def _load_state_dict(src: Path) -> dict[str, torch.Tensor]:
    if (src / "model.safetensors").exists():
        return load_file(src / "model.safetensors")
    if (src / "pytorch_model.bin").exists():
        # weights_only=True refuses arbitrary pickled objects: only tensors and containers are read.
        return torch.load(src / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{src}: no model.safetensors or pytorch_model.bin")


def convert_config(source: dict[str, Any], **overrides: Any) -> ErnieZooConfig:
    model_type = source.get("model_type")
    if model_type not in ("ernie", "bert", "ernie_zoo"):
        raise ValueError(f"expected an ERNIE or BERT config, got model_type={model_type!r}")
    fields = {k: source[k] for k in _CARRIED_CONFIG_KEYS if k in source}
    if model_type == "bert":
        fields["use_task_id"] = False
    fields.update(overrides)
    return ErnieZooConfig(**fields)


def load_pretrained_checkpoint(
    path: str | Path,
    model_class: type[ErnieZooPreTrainedModel] = ErnieZooForMaskedLM,
    tokenizer=None,
    **config_overrides: Any,
) -> tuple[ErnieZooPreTrainedModel, Any]:
    """Load an ERNIE/BERT(-zh) transformers directory into `model_class`, with character features added.

    Returns `(model, tokenizer)`. `config_overrides` set ErnieZooConfig fields, e.g. `feature_fusion="concat"`,
    `use_pinyin=False`, `num_labels=3`. Raises if any weight of the encoder is missing or left unused.
    """
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    src = Path(path)
    if not (src / "config.json").exists():
        raise FileNotFoundError(f"{src}: no config.json (expected a transformers ERNIE/BERT directory)")
    config = convert_config(json.loads((src / "config.json").read_text(encoding="utf-8")), **config_overrides)
    if tokenizer is None:
        if not (src / "vocab.txt").exists():
            raise FileNotFoundError(f"{src}: no vocab.txt; pass tokenizer=")
        tokenizer = ErnieZooTokenizerFast(vocab_file=str(src / "vocab.txt"))

    return load_converted_weights(config, _load_state_dict(src), model_class, tokenizer, source=str(src))


def load_converted_weights(
    config: ErnieZooConfig,
    weights: dict[str, torch.Tensor],
    model_class: type[ErnieZooPreTrainedModel],
    tokenizer,
    source: str,
) -> tuple[ErnieZooPreTrainedModel, Any]:
    """Build `model_class(config)` from an ERNIE/BERT state dict held in memory (`bert.` names renamed), with the
    character tables filled from `tokenizer`; `source` names the weights in errors. Raises if any weight of the
    encoder is missing or left unused."""
    state = {}
    for key, value in weights.items():
        for pattern, repl in _KEY_RENAMES:
            key = pattern.sub(repl, key)
        state[key] = value

    model = model_class(config)
    # Only keys of the source go through load_state_dict; everything else keeps the init from _init_weights
    # (char features: zero / identity; task heads: random, as with any from_pretrained of a base model).
    own = model.state_dict()
    usable = {k: v for k, v in state.items() if k in own}
    unused = sorted(k for k in state if k not in own and not _IGNORABLE.match(k))
    if unused:
        raise ValueError(f"{source}: weights that do not fit {model_class.__name__}: {unused[:8]}")
    result = model.load_state_dict(usable, strict=False)
    missing_encoder = [
        k for k in result.missing_keys if k.startswith("ernie.") and ".char_features." not in k
    ]
    missing_encoder = [k for k in missing_encoder if not k.startswith("ernie.pooler.")]
    if missing_encoder:
        raise ValueError(f"{source}: checkpoint lacks encoder weights {missing_encoder[:8]}")
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    model.load_char_tables(tokenizer)
    logger.info("loaded %s into %s (%d tensors)", source, model_class.__name__, len(usable))
    return model, tokenizer


__all__ = ["HEADS", "convert_config", "load_converted_weights", "load_pretrained_checkpoint"]
