"""`ErnieZooForTokenClassificationCRF`: the token classifier with a linear-chain CRF on its logits.

    tokens ─ ErnieZooModel ─ dropout ─ classifier ─ emissions (B, T, C) ─┬─ CRF NLL (training, labels given)
                                                                         └─ Viterbi → `predictions` (eval)

The CRF runs over the positions of `crf_mask`, by default every attended token except the first and the last
([CLS] and [SEP]): the same positions the data pipeline labels. In eval mode the output carries `predictions`
(B, T): the Viterbi tag ids, -100 outside the mask; `logits` are the emissions, so an argmax reader still
works (it just ignores the transition scores).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import TokenClassifierOutput

from ernie_zoo.models import ErnieZooConfig, ErnieZooModel
from ernie_zoo.models.modeling import ErnieZooPreTrainedModel

from .crf import LinearChainCRF, compact

IGNORE = -100


@dataclass
class CRFTokenClassifierOutput(TokenClassifierOutput):
    """`TokenClassifierOutput` plus `predictions`: Viterbi tag ids (B, T), -100 outside the CRF mask."""

    predictions: torch.LongTensor | None = None


def default_crf_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Attended positions minus the first and the last one of each row ([CLS] ... [SEP])."""
    mask = attention_mask.bool().clone()
    lengths = mask.sum(1)
    rows = torch.arange(mask.shape[0], device=mask.device)
    mask[:, 0] = False
    mask[rows, (lengths - 1).clamp(min=0)] = False
    return mask


class ErnieZooForTokenClassificationCRF(ErnieZooPreTrainedModel):
    """Token classification with CRF decoding. Saved and loaded like any model (`from_pretrained`); the CRF
    transition scores live in `crf.*` of model.safetensors and `config.use_crf` is True."""

    def __init__(self, config: ErnieZooConfig):
        super().__init__(config)
        config.use_crf = True
        self.num_labels = config.num_labels
        self.ernie = ErnieZooModel(config, add_pooling_layer=False)
        dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.crf = LinearChainCRF(config.num_labels)
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, LinearChainCRF):
            # Zero transitions: the CRF starts as the independent per-token classifier.
            for p in (module.start_transitions, module.end_transitions, module.transitions):
                init.zeros_(p)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        task_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        crf_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> CRFTokenClassifierOutput:
        r"""
        labels (`torch.LongTensor` (B, T), *optional*): tag ids; must be valid at every `crf_mask` position.
        crf_mask (`torch.BoolTensor` (B, T), *optional*): positions the CRF sees; default `default_crf_mask`.
        """
        kwargs.pop("return_dict", None)
        outputs = self.ernie(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            task_type_ids=task_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        emissions = self.classifier(self.dropout(outputs[0]))  # (B, T, C)
        if crf_mask is None:
            if attention_mask is None:
                attention_mask = torch.ones(emissions.shape[:2], dtype=torch.long, device=emissions.device)
            crf_mask = default_crf_mask(attention_mask)
        crf_mask = crf_mask.bool()
        loss = None
        if labels is not None:
            if bool((labels[crf_mask] == IGNORE).any()):
                raise ValueError(
                    "labels are -100 at a position the CRF decodes; label every token between [CLS] and [SEP] "
                    "or pass crf_mask"
                )
            mask_c, _, em_c, tags_c = compact(crf_mask, emissions, labels)
            loss = self.crf(em_c, mask_c, tags_c)
        predictions = None
        if not self.training:
            mask_c, order, em_c = compact(crf_mask, emissions)
            paths = self.crf(em_c, mask_c)  # (B, T), -1 outside
            predictions = torch.full_like(paths, IGNORE)
            predictions.scatter_(1, order, torch.where(paths >= 0, paths, torch.full_like(paths, IGNORE)))
        return CRFTokenClassifierOutput(
            loss=loss,
            logits=emissions,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            predictions=predictions,
        )


__all__ = ["CRFTokenClassifierOutput", "ErnieZooForTokenClassificationCRF", "default_crf_mask"]
