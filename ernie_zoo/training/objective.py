"""Pretraining's objective: the masked-LM loss of an encoder (`mlm.masked_lm_loss`, + SKEP's word-polarity loss)
or the next-token loss of an ERNIE 4.5 decoder (`causal_lm.causal_lm_loss`), as a module an engine runs in place
of the model's own forward (`engine.PlainEngine`, `deepspeed_engine.DeepSpeedEngine`):

    engine.forward(batch) ── PretrainObjective.forward(**batch) ── pretrain_loss(model, batch)
                                    └── .mlm = the model (under DeepSpeed: AutoTP-sharded, ZeRO-partitioned)

A module rather than a function because DeepSpeed's ZeRO-3 bookkeeping (parameter-prefetch trace, backward
prologue, accumulation boundary) hangs off the forward of the module it wraps: it wraps this one. The pipeline
backend computes the same loss on its last stage (`pipeline_engine`).
"""

from __future__ import annotations

import torch
from torch import nn

from ernie_zoo.models.decoder import is_decoder_config

from .causal_lm import causal_lm_loss
from .mlm import masked_lm_loss


def pretrain_loss(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    sparse_last_layer: bool = False,
    polarity_weight: float = 1.0,
    details: dict[str, float] | None = None,
) -> tuple[torch.Tensor, int, int]:
    """(mean loss, predicted tokens, correct predictions) of a collated batch: an ERNIE 4.5 decoder's next-token
    loss on packed rows (`causal_lm_loss`), else the masked-LM loss (`masked_lm_loss`; with a sentiment stage it
    adds `polarity_weight` x the word-polarity loss). `details`, if given, receives the loss's parts."""
    if is_decoder_config(model.config):
        return causal_lm_loss(model, batch, details)
    return masked_lm_loss(model, batch, sparse_last_layer, polarity_weight=polarity_weight, details=details)


class PretrainObjective(nn.Module):
    """forward(**batch) = `pretrain_loss` of the model held as `.mlm`.

    Args:
        mlm: the model (an `ErnieZooForMaskedLM` or an ERNIE 4.5 decoder).
        sparse_last_layer: the recipe's `sparse_last_layer` (`mlm.masked_lm_loss`).
        polarity_weight: the weight of the word-polarity loss of a sentiment stage (SKEP).
        keep_details: keep the loss's parts of the last forward in `last_details` (logged by pretraining).
    """

    def __init__(
        self,
        mlm: nn.Module,
        sparse_last_layer: bool = False,
        polarity_weight: float = 1.0,
        keep_details: bool = True,
    ):
        super().__init__()
        self.mlm = mlm
        self.sparse_last_layer = sparse_last_layer
        self.polarity_weight = polarity_weight
        self.keep_details = keep_details
        self.last_details: dict[str, float] | None = None

    def forward(self, **batch: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        # keyword tensors, not one dict argument: DeepSpeed's TP input-consistency check compares flat args
        details: dict[str, float] | None = {} if self.keep_details else None
        out = pretrain_loss(self.mlm, batch, self.sparse_last_layer, self.polarity_weight, details)
        self.last_details = details
        return out


__all__ = ["PretrainObjective", "pretrain_loss"]
