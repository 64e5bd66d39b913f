"""`ErnieZooForTokenClassificationCRF`: the token classifier with a linear-chain CRF on its logits.

    tokens ─ ErnieZooModel ─ dropout ─ classifier ─ emissions (B, T, C) ─┬─ CRF NLL (training, labels given)
                                                                         └─ Viterbi → `predictions` (eval)

With an entity lexicon (`config.lexicon_types`, e.g. ["PER", "LOC", "ORG"]) each token also carries
`lexicon_ids` (B, T): 3 bits per type saying whether it begins, continues or ends a lexicon match
(`ernie_zoo.text.lexicon`). The bits enter before the encoder, so attention can weigh a match
against its context:

    lexicon_ids (B, T) ─ bits (B, T, 3·types) ─ lexicon_proj (no bias, starts at zero) ─┐
    input_ids ─ word + char-feature embeddings ──────────────────────────────────── add ┴─ ERNIE ─ ...

`lexicon_proj` starts at zero, so a tagger given a lexicon starts out computing exactly what it did without
one. The lexicon itself is saved next to the weights (`entity_lexicon.txt`) by `save_pretrained` and read back
by `from_pretrained` into `model.entity_lexicon`, which Taskflow uses to compute `lexicon_ids` from text.

The CRF runs over the positions of `crf_mask`, by default every attended token except the first and the last
([CLS] and [SEP]): the same positions the data pipeline labels. In eval mode the output carries `predictions`
(B, T): the Viterbi tag ids, -100 outside the mask; `logits` are the emissions (an argmax of them ignores the
transition scores: transformers' token-classification pipeline, which decodes so, is refused).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput, TokenClassifierOutput

from ernie_zoo.text.lexicon import EntityLexicon

from .configuration import ErnieZooConfig
from .crf import LinearChainCRF, compact
from .heads import HeadInputs, HeadInputsMixin, head_forward
from .modeling import ErnieZooPreTrainedModel, saved_file
from .registry import register

logger = logging.getLogger(__name__)

IGNORE = -100
LEXICON_FILE = "entity_lexicon.txt"


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


def model_inputs(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`batch` for `model`: without `lexicon_ids` unless the model reads an entity lexicon (`reads_lexicon`), so
    taggers with and without one can share the batches of a lexicon pipeline."""
    if getattr(model, "reads_lexicon", False) or "lexicon_ids" not in batch:
        return batch
    return {k: v for k, v in batch.items() if k != "lexicon_ids"}


def viterbi_predictions(crf: LinearChainCRF, emissions: torch.Tensor, crf_mask: torch.Tensor) -> torch.Tensor:
    """The best tag path of each row under `crf`, as tag ids (B, T) at the `crf_mask` positions, -100 elsewhere."""
    mask_c, order, em_c = compact(crf_mask, emissions)
    paths = crf(em_c, mask_c)  # (B, T), -1 outside
    predictions = torch.full_like(paths, IGNORE)
    return predictions.scatter_(1, order, torch.where(paths >= 0, paths, torch.full_like(paths, IGNORE)))


def refuse_per_token_pipeline() -> None:
    """Raise inside transformers' token-classification pipeline (given a model object; a directory is refused at
    load): its per-token argmax of `logits` ignores the CRF and silently gives other entities."""
    module = sys.modules.get("transformers.pipelines.token_classification")
    code = module and module.TokenClassificationPipeline._forward.__code__
    frame = sys._getframe(1) if code else None
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    if frame is not None:
        raise ValueError(
            "transformers' token-classification pipeline decodes each token on its own (argmax of the logits), "
            "which ignores this model's CRF and gives other entities. Use Taskflow('ner', task_path=...) or the "
            "model's own Viterbi decoding, model(**inputs).predictions"
        )


def crf_outputs(
    crf: LinearChainCRF,
    emissions: torch.Tensor,
    attention_mask: torch.Tensor | None,
    crf_mask: torch.Tensor | None,
    labels: torch.Tensor | None,
    training: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(CRF negative log-likelihood if `labels` are given, Viterbi predictions unless `training`) of `emissions`
    over `crf_mask` (default: `default_crf_mask` of `attention_mask`)."""
    if not training:
        refuse_per_token_pipeline()
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
        loss = crf(em_c, mask_c, tags_c)
    predictions = None if training else viterbi_predictions(crf, emissions, crf_mask)
    return loss, predictions


class EntityLexiconMixin:
    """The entity lexicon of a tagger that reads one (`config.lexicon_types`): attached as `entity_lexicon`,
    saved next to the weights by `save_pretrained` and read back by `from_pretrained` (`save_saved_files` /
    `load_saved_files`)."""

    entity_lexicon: EntityLexicon | None = None  # set by from_pretrained or the fine-tuning loop

    @property
    def reads_lexicon(self) -> bool:
        return bool(getattr(self.config, "lexicon_types", None))

    def set_entity_lexicon(self, lexicon: EntityLexicon | None) -> None:
        """Attach the lexicon whose matches `lexicon_ids` encode; its types must be `config.lexicon_types`."""
        types = list(getattr(self.config, "lexicon_types", None) or [])
        if lexicon is not None and list(lexicon.types) != types:
            raise ValueError(
                f"the lexicon's types {list(lexicon.types)} are not config.lexicon_types {types}"
            )
        self.entity_lexicon = lexicon

    def load_entity_lexicon(self, model_name_or_path: str | os.PathLike, **hub_kwargs) -> None:
        """Attach the lexicon saved with a model (a local directory or a hub repo, then from the hub cache), if it
        has one and this tagger reads a lexicon."""
        if not self.reads_lexicon:
            return
        path = saved_file(model_name_or_path, LEXICON_FILE, **hub_kwargs)
        if path is not None:
            self.set_entity_lexicon(EntityLexicon.load(path))

    def save_saved_files(self, directory: Path) -> None:
        if self.entity_lexicon is not None:
            self.entity_lexicon.save(directory / LEXICON_FILE)

    load_saved_files = load_entity_lexicon


@register("token-classification", flag="use_crf", what="a CRF tagger")
class ErnieZooForTokenClassificationCRF(EntityLexiconMixin, HeadInputsMixin, ErnieZooPreTrainedModel):
    """Token classification with CRF decoding. Saved and loaded like any model (`from_pretrained`); the CRF
    transition scores live in `crf.*` of model.safetensors and `config.use_crf` is True."""

    def __init__(self, config: ErnieZooConfig):
        super().__init__(config)
        config.use_crf = True
        self._add_classifier(config, add_pooling_layer=False)
        self.crf = LinearChainCRF(config.num_labels)
        self._add_lexicon_input(3 * len(getattr(config, "lexicon_types", None) or []))
        self.post_init()

    def emissions(self, inputs: HeadInputs, **kwargs) -> tuple[torch.Tensor, BaseModelOutput]:
        """(emissions (B, T, C), the encoder's output) of `inputs`: everything of `forward` but the CRF."""
        kwargs.pop("return_dict", None)
        outputs = self.ernie(**self.encoder_inputs(inputs, kwargs), return_dict=True)
        return self.classifier(self.dropout(outputs[0])), outputs

    # `emissions` taking `forward`'s inputs by name (`labels` unused), as the ONNX export traces it
    encode = head_forward(emissions)

    @head_forward
    def forward(
        self, inputs: HeadInputs, crf_mask: torch.Tensor | None = None, **kwargs
    ) -> CRFTokenClassifierOutput:
        r"""
        labels (`torch.LongTensor` (B, T), *optional*): tag ids; must be valid at every `crf_mask` position.
        crf_mask (`torch.BoolTensor` (B, T), *optional*): positions the CRF sees; default `default_crf_mask`.
        """
        emissions, outputs = self.emissions(inputs, **kwargs)
        loss, predictions = crf_outputs(
            self.crf, emissions, inputs.attention_mask, crf_mask, inputs.labels, self.training
        )
        return CRFTokenClassifierOutput(
            loss=loss,
            logits=emissions,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            predictions=predictions,
        )


__all__ = [
    "CRFTokenClassifierOutput",
    "EntityLexiconMixin",
    "ErnieZooForTokenClassificationCRF",
    "LEXICON_FILE",
    "crf_outputs",
    "default_crf_mask",
    "model_inputs",
    "viterbi_predictions",
]
