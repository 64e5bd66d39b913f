"""The masked-LM loss of the pretraining loop, computing vocabulary logits only where they are needed.

    model.ernie(...) ────────────> hidden (B, T, H)
    hidden[labels != -100] ─────> (M, H), M ≈ 15% of the tokens
    model.cls(...) ─────────────> logits (M, V) ──> cross-entropy

A full-vocabulary head over every position costs B·T·H·V multiply-adds and a (B·T, V) logits tensor, 85% of
which the loss never reads; on CPU that head dominates a small model's step. With `sparse_last_layer` the
last encoder layer also runs its queries, attention output and feed-forward at the masked positions only
(its keys and values still cover every token): the loss is the same function of the weights, for less work.

SKEP's sentiment-word polarity objective rides on the same rows: with a sentiment masking stage the batch carries
`polarity_labels` (1 positive, 0 negative at the masked tokens of sentiment words, -100 elsewhere), and when the
model has the polarity head (`model.word_polarity`, `config.num_word_polarities`)::

    hidden (M, H) ──> rows whose polarity label is set (P, H) ──> model.word_polarity ──> logits (P, 2)
    loss = CE_mlm + polarity_weight * CE(logits, polarity labels)

Polarity labels are a subset of the masked positions, so the sparse last layer serves both heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_lm_loss(
    model,
    batch: dict[str, torch.Tensor],
    sparse_last_layer: bool = False,
    polarity_weight: float = 1.0,
    details: dict[str, float] | None = None,
) -> tuple[torch.Tensor, int, int]:
    """Cross-entropy over the masked positions, computing vocabulary logits for those rows only.

    Returns (mean loss, number of masked tokens, number predicted correctly). The loss is the one of
    `model(**batch).loss` (the full head's mean over the positions whose label is not -100), plus, when the batch
    has `polarity_labels` and the model a polarity head (`model.word_polarity`), `polarity_weight` times the mean
    polarity cross-entropy over the labelled positions (a batch without any adds 0, still through the head).

    sparse_last_layer: also run the last encoder layer's queries, attention output and feed-forward only at
    the masked positions (its keys and values still see every token). The loss reads nothing else, so the
    value is the same; it saves ~2/3 of one layer's work.
    details: if a dict, filled with `mlm_loss` and, with the polarity objective, `polarity_loss` (mean),
    `polarity_n` (labelled positions) and `polarity_correct` (for logging; costs a device sync).
    """
    labels = batch["labels"]
    polarity_labels = batch.get("polarity_labels")
    polarity_head = getattr(model, "word_polarity", None)
    polarity = polarity_labels is not None and polarity_head is not None and polarity_weight != 0
    selected = labels != -100  # (B, T)
    targets = labels[selected]  # (M,)
    n = int(targets.numel())
    if sparse_last_layer and n > 0:
        hidden = _encode_sparse_last_layer(model.ernie, batch, selected)  # (M, H)
    else:
        out = model.ernie(
            input_ids=batch["input_ids"],
            attention_mask=batch.get("attention_mask"),
            token_type_ids=batch.get("token_type_ids"),
            pinyin_ids=batch.get("pinyin_ids"),
            return_dict=True,
        )
        if n == 0:  # nothing masked: a zero loss that still touches the graph (keeps backward well defined)
            if details is not None:
                details["mlm_loss"] = 0.0
                if polarity:
                    details.update(polarity_loss=0.0, polarity_n=0, polarity_correct=0)
            return out.last_hidden_state.sum() * 0.0, 0, 0
        hidden = out.last_hidden_state[selected]  # (B, T, H) -> (M, H)
    logits = model.cls(hidden)  # (M, V)
    loss = F.cross_entropy(logits.float(), targets)
    correct = int((logits.argmax(-1) == targets).sum())
    if details is not None:
        details["mlm_loss"] = float(loss.detach())
    if polarity:
        loss = loss + polarity_weight * _polarity_loss(
            polarity_head, hidden, polarity_labels[selected], details
        )
    return loss, n, correct


def _polarity_loss(
    head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, details: dict[str, float] | None
) -> torch.Tensor:
    """Mean cross-entropy of `head` on the rows of `hidden` (M, H) whose `targets` (M,) are not -100; with no
    such row, a zero that still runs the head (so every step uses the same parameters)."""
    rows = targets != -100
    logits = head(hidden[rows])  # (P, n_polarities)
    m = int(rows.sum())
    if m == 0:
        loss = logits.sum() * 0.0
        correct = 0
    else:
        labelled = targets[rows]
        loss = F.cross_entropy(logits.float(), labelled)
        correct = int((logits.argmax(-1) == labelled).sum())
    if details is not None:
        details.update(polarity_loss=float(loss.detach()), polarity_n=m, polarity_correct=correct)
    return loss


def _encode_sparse_last_layer(ernie, batch: dict[str, torch.Tensor], selected: torch.Tensor) -> torch.Tensor:
    """ErnieZooModel's forward with the last layer evaluated at the selected positions only.

        embeddings -> layers[:-1] (every position) -> h (B, T, H)
        queries: h at the selected positions, gathered per row and padded to k = max per row -> (B, k, H)
        keys/values: h at every position -> attention (B, k, H) -> attention output + FFN -> (M, H)

    Tensor-parallel safe: heads are reshaped as -1, so a rank holding nh/tp heads (column-sharded q/k/v, as
    DeepSpeed AutoTP or DTensor TP leave them) runs its share and the row-parallel output projection reduces.
    """
    from transformers.masking_utils import create_bidirectional_mask

    input_ids = batch["input_ids"]
    attention_mask = batch.get("attention_mask")
    emb = ernie.embeddings
    if emb.char_features is not None:
        h = emb(
            inputs_embeds=emb.embed_tokens(input_ids, batch.get("pinyin_ids")),
            token_type_ids=batch.get("token_type_ids"),
        )
    else:
        h = emb(input_ids=input_ids, token_type_ids=batch.get("token_type_ids"))
    *layers, last = ernie.encoder.layer
    mask = create_bidirectional_mask(config=ernie.config, inputs_embeds=h, attention_mask=attention_mask)
    for layer in layers:
        h = layer(h, mask)

    B, T, H = h.shape
    counts = selected.sum(1)  # (B,)
    k = int(counts.max())
    # Selected positions first, in order (stable sort of "not selected"), then cut to k columns.
    index = torch.sort((~selected).to(torch.int8), dim=1, stable=True).indices[:, :k]  # (B, k)
    valid = torch.arange(k, device=h.device)[None, :] < counts[:, None]  # (B, k)
    hq = h.gather(1, index[..., None].expand(B, k, H))  # (B, k, H)

    sa = last.attention.self
    # Heads as -1: under tensor parallelism q/k/v are column-sharded and this rank holds nh/tp of them; the
    # row-parallel attention.output.dense below sums the partial outputs back to H.
    size = sa.attention_head_size
    q = sa.query(hq).view(B, k, -1, size).transpose(1, 2)  # (B, nh, k, hs)
    key = sa.key(h).view(B, T, -1, size).transpose(1, 2)  # (B, nh, T, hs)
    value = sa.value(h).view(B, T, -1, size).transpose(1, 2)
    key_mask = attention_mask[:, None, None, :].bool() if attention_mask is not None else None  # (B, 1, 1, T)
    attn = F.scaled_dot_product_attention(
        q, key, value, attn_mask=key_mask, dropout_p=sa.dropout.p if ernie.training else 0.0, scale=sa.scaling
    )  # (B, nh, k, hs)
    attn = attn.transpose(1, 2).reshape(B, k, -1)  # (B, k, nh*hs): H, or H/tp on a TP rank
    attn = last.attention.output(attn, hq)  # dense, dropout, LayerNorm(. + hq)
    out = last.output(last.intermediate(attn), attn)  # FFN, dropout, LayerNorm(. + attn)
    return out[valid]  # (M, H), row-major like labels[selected]


__all__ = ["masked_lm_loss"]
