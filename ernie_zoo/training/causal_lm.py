"""Causal-LM pretraining of the ERNIE 4.5 decoders (transformers' `Ernie4_5ForCausalLM` / `Ernie4_5_MoeForCausalLM`)
on the one training loop: what `ernie-pretrain` runs when `model.preset` names a decoder preset.

Data: sequence packing with per-document attention. Every document becomes `[BOS] tokens [EOS]` (the tokenizer's
[CLS] and [SEP] for the zoo's character tokenizer); the documents are concatenated in a seeded order and cut into
rows of exactly `data.max_seq_len` tokens, so no position is padding. Position ids restart at 0 at each document
start *and* at each row start (a document cut by a row boundary continues as a new piece). transformers reads
packed rows from the position ids when the attention mask is None (`masking_utils.find_packed_sequence_indices`):
each token attends causally within its own piece only, never across documents. The first token of each piece has
no target (label -100), so no loss is taken across a document boundary either. A held-out seeded fraction of the
*documents* (`data.eval_fraction`) is packed the same way for evaluation.

Loss: next-token cross-entropy over the predicted positions (the model's own shift), plus, for MoE models in
training, the router's load-balancing loss times `config.router_aux_loss_coef` (transformers' `aux_loss`;
evaluation reports the LM loss alone). FLOPs for MFU: 6 x (the matmul weights a token passes through: attention
projections, the dense or the top-k + shared expert MLPs, the router, the LM head) + 12 x layers x (heads x
head_dim) x seq_len for attention (PaLM's count, as for the encoder; packing's shorter attention spans are not
discounted).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ernie_zoo.models.decoder import build_decoder, decoder_config, is_moe
from ernie_zoo.models.presets import DECODER_PRESETS
from ernie_zoo.models.seeded_init import materialize

logger = logging.getLogger(__name__)

__all__ = [
    "CausalCollator",
    "PackedRows",
    "build_decoder_model",
    "causal_lm_loss",
    "decoder_config_for",
    "decoder_training_flops",
    "is_decoder_preset",
    "load_packed_dataset",
    "pack_documents",
]

IGNORE = -100
#: PretrainModelArgs fields a decoder recipe may override over its preset
_OVERRIDES = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
)


def is_decoder_preset(name: str | None) -> bool:
    return name is not None and name in DECODER_PRESETS


def decoder_config_for(args, tokenizer, max_seq_len: int | None = None):
    """The decoder config of a recipe's `model` section (a decoder preset plus overrides) for `tokenizer`: its
    vocabulary size (or `model.vocab_size`, never smaller), BOS = [CLS] (or bos), EOS = [SEP] (or eos), PAD.
    `tokenizer` None (the planner, which has none): `model.vocab_size`, else the preset's, and its special ids."""
    fields: dict[str, Any] = dict(DECODER_PRESETS[args.preset])
    fields.update({k: getattr(args, k) for k in _OVERRIDES if getattr(args, k, None) is not None})
    if tokenizer is None:
        if args.vocab_size is not None:
            fields["vocab_size"] = args.vocab_size
        return _checked(decoder_config("moe_num_experts" in fields, **fields), max_seq_len)
    n = len(tokenizer)
    if args.vocab_size is not None and args.vocab_size < n:
        raise ValueError(
            f"recipe key 'model.vocab_size' = {args.vocab_size} is smaller than the tokenizer's vocabulary ({n}); "
            f"use null or a value >= {n}"
        )
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if bos is None or eos is None:
        raise ValueError("a decoder needs a tokenizer with bos/eos tokens (or [CLS]/[SEP], used as such)")
    fields.update(
        vocab_size=args.vocab_size or n,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    return _checked(decoder_config("moe_num_experts" in fields, **fields), max_seq_len)


def _checked(config, max_seq_len: int | None):
    if max_seq_len is not None and config.max_position_embeddings < max_seq_len:
        raise ValueError(
            f"data.max_seq_len ({max_seq_len}) exceeds the decoder's max_position_embeddings "
            f"({config.max_position_embeddings}); raise model.max_position_embeddings"
        )
    return config


def build_decoder_model(config, seed: int, meta: bool = False) -> torch.nn.Module:
    """A freshly initialised decoder, every weight a function of `seed` and its name (`models.seeded_init`);
    `meta`: on the meta device, for `seeded_init.materialize` after keeping a part (as `build.build_model`)."""
    model = build_decoder(config, device="meta")
    if not meta:
        materialize(model, seed)
    return model


# ----------------------------------------------------------------------------------------------------- data
def pack_documents(
    docs: Iterable[list[int]], seq_len: int, bos: int, eos: int
) -> tuple[np.ndarray, np.ndarray]:
    """(input ids, position ids), each (rows, seq_len) int32: `[bos] doc [eos]` for every document, concatenated
    and cut into full rows (the incomplete last row is dropped); positions restart at 0 at every document start
    and every row start."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    pieces, starts = [], []
    for doc in docs:
        ids = np.asarray([bos, *doc, eos], dtype=np.int32)
        pieces.append(ids)
        start = np.zeros(len(ids), dtype=bool)
        start[0] = True
        starts.append(start)
    if not pieces:
        return np.zeros((0, seq_len), np.int32), np.zeros((0, seq_len), np.int32)
    stream, start = np.concatenate(pieces), np.concatenate(starts)
    n_rows = len(stream) // seq_len
    stream, start = stream[: n_rows * seq_len], start[: n_rows * seq_len]
    start[::seq_len] = True  # a row starts a new piece
    index = np.arange(len(stream))
    piece_start = np.maximum.accumulate(np.where(start, index, 0))
    positions = (index - piece_start).astype(np.int32)
    return stream.reshape(n_rows, seq_len), positions.reshape(n_rows, seq_len)


class PackedRows:
    """Packed rows as the training loop's sampler reads them (`data.rows`): `len`, and `rows[indices]` -> columns."""

    column_names = ("input_ids", "position_ids")

    def __init__(self, input_ids: np.ndarray, position_ids: np.ndarray):
        self.input_ids, self.position_ids = input_ids, position_ids

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, indices) -> dict[str, np.ndarray]:
        return {"input_ids": self.input_ids[indices], "position_ids": self.position_ids[indices]}


def load_packed_dataset(recipe, tokenizer) -> tuple[PackedRows, PackedRows | None, dict[str, Any]]:
    """(train rows, eval rows or None, statistics) from `data.files` (one document per line, or jsonl with a
    "text" field): a seeded `data.eval_fraction` of the documents held out, both sides tokenized and packed."""
    import os

    from ernie_zoo.masking import read_documents

    from .data import check_not_reserved

    d = recipe.data
    if d.dataset_dir is not None:
        raise ValueError(
            "a decoder recipe reads data.files (documents), not data.dataset_dir (masked-LM examples)"
        )
    missing = [f for f in d.files if not os.path.isfile(f)]
    if missing:
        raise ValueError(f"recipe key 'data.files': no such file(s) {missing}")
    check_not_reserved(d.files)
    docs = [
        doc for doc in read_documents(list(d.files), input_type="file", show_progress=False) if doc.strip()
    ]
    if not docs:
        raise ValueError(f"no text in data.files {d.files}: every line was empty or unreadable")
    seed = recipe.seed if d.split_seed is None else d.split_seed
    order = np.random.default_rng(seed).permutation(len(docs))
    n_eval = int(round(d.eval_fraction * len(docs))) if d.eval_fraction > 0 else 0
    if d.eval_fraction > 0:
        n_eval = max(1, n_eval)
        if n_eval >= len(docs):
            raise ValueError(
                f"data.eval_fraction {d.eval_fraction} leaves no training document of {len(docs)}"
            )
    eval_idx, train_idx = order[:n_eval], order[n_eval:]
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id

    def encode(indices: np.ndarray) -> list[list[int]]:
        texts = [docs[i] for i in indices]
        out: list[list[int]] = []
        for start in range(0, len(texts), 4096):
            out.extend(tokenizer(texts[start : start + 4096], add_special_tokens=False)["input_ids"])
        return out

    train_ids, train_pos = pack_documents(encode(train_idx), d.max_seq_len, bos, eos)
    if len(train_ids) == 0:
        raise ValueError(
            f"data.files {d.files} hold fewer tokens than one row of data.max_seq_len {d.max_seq_len}"
        )
    eval_rows = None
    if n_eval:
        eval_ids, eval_pos = pack_documents(encode(eval_idx), d.max_seq_len, bos, eos)
        eval_rows = PackedRows(eval_ids, eval_pos) if len(eval_ids) else None
    stats = {
        "documents": len(docs),
        "eval_documents": int(n_eval),
        "train_examples": len(train_ids),
        "eval_examples": len(eval_rows) if eval_rows is not None else 0,
        "tokens": int(train_ids.size),
        "packing": "documents as [BOS] text [EOS], rows of max_seq_len, per-document attention",
    }
    return PackedRows(train_ids, train_pos), eval_rows, stats


class CausalCollator:
    """Packed rows -> a batch: input_ids, position_ids (packing), labels (-100 at each piece's first token) and an
    all-ones attention_mask for token counting (not given to the model: packing needs the mask to be None)."""

    def set_step(self, step: int) -> None:  # the loop's collator interface; nothing here depends on the step
        pass

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        ids = torch.as_tensor(np.stack([np.asarray(r["input_ids"]) for r in rows]), dtype=torch.long)
        pos = torch.as_tensor(np.stack([np.asarray(r["position_ids"]) for r in rows]), dtype=torch.long)
        return {
            "input_ids": ids,
            "position_ids": pos,
            "labels": ids.masked_fill(pos == 0, IGNORE),
            "attention_mask": torch.ones_like(ids),
        }


# ----------------------------------------------------------------------------------------------------- loss
def causal_lm_loss(
    model, batch: dict[str, torch.Tensor], details: dict | None = None
) -> tuple[torch.Tensor, int, int]:
    """(mean next-token loss [+ router aux loss in training, MoE], predicted tokens, correct predictions)."""
    moe = is_moe(model.config)
    out = model(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        use_cache=False,
        **({"output_router_logits": True} if moe else {}),
    )
    logits = out.logits[:, :-1].float()
    target = batch["labels"][:, 1:]
    valid = target != IGNORE
    # over the flat rows with ignore_index: no copy of the (tokens, vocabulary) logits for the selection
    lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE)
    loss = lm
    if details is not None:
        details["lm_loss"] = float(lm.detach())
    if moe and model.training and getattr(out, "aux_loss", None) is not None:
        loss = lm + model.config.router_aux_loss_coef * out.aux_loss
        if details is not None:
            details["aux_loss"] = float(out.aux_loss.detach())
    with torch.no_grad():
        correct = int(((logits.argmax(-1) == target) & valid).sum())
    return loss, int(valid.sum()), correct


def decoder_training_flops(config, tokens: int, seq_len: int) -> float:
    """Forward + backward FLOPs over `tokens` tokens in rows of `seq_len` (module docstring)."""
    h, n_layers = config.hidden_size, config.num_hidden_layers
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    attn = h * heads * head_dim * 2 + h * kv * head_dim * 2  # q, o and k, v projections
    dense_mlp = 3 * h * config.intermediate_size
    if is_moe(config):
        moe_layers = [  # transformers' Ernie4_5_MoeDecoderLayer's rule
            i
            for i in range(n_layers)
            if (i + 1) % config.moe_layer_interval == 0
            and config.moe_layer_start_index <= i <= config.moe_layer_end_index
        ]
        expert = 3 * h * config.moe_intermediate_size
        moe_mlp = expert * (config.moe_k + config.moe_num_shared_experts) + h * config.moe_num_experts
        mlp = len(moe_layers) * moe_mlp + (n_layers - len(moe_layers)) * dense_mlp
    else:
        mlp = n_layers * dense_mlp
    matmul = n_layers * attn + mlp + h * config.vocab_size
    return tokens * (6 * matmul + 12 * n_layers * heads * head_dim * seq_len)
