"""`ErnieZooForSpanExtraction`: a prompt-conditioned span extractor (UIE, Lu et al. 2022, "Unified Structure
Generation for Universal Information Extraction"; PaddleNLP's UIE pointer form) on the zoo's encoder.

    [CLS] prompt [SEP] text [SEP] ─ ErnieZooModel ─ dropout ─ classifier (H -> 2) ─┬─ start_logits (B, T)
                                                                                   └─ end_logits   (B, T)

Each token gets two independent sigmoids: "a span of what the prompt asks for starts here" and "... ends here";
Taskflow (`taskflow/information_extraction.py`) pairs them into spans. The prompt is a type name ("人物") or a found
subject's relation ("李明的毕业院校"), so one head extracts any schema.

`labels` (B, T) are per-token bits: 1 = a span starts at this token, 2 = one ends here (3 = both), 0 = neither, -100
= not trained (the prompt, [CLS]/[SEP], padding). The loss is the binary cross-entropy of both pointers, averaged
over the trained positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.utils import ModelOutput

from .configuration import ErnieZooConfig
from .heads import HeadInputs, HeadInputsMixin, head_forward
from .modeling import ErnieZooModel, ErnieZooPreTrainedModel
from .registry import register

IGNORE = -100
START, END = 1, 2  # label bits


@dataclass
class SpanExtractionOutput(ModelOutput):
    loss: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None  # (B, T)
    end_logits: torch.Tensor | None = None  # (B, T)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def span_labels_loss(
    start_logits: torch.Tensor, end_logits: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Mean binary cross-entropy of the start and end pointers over the positions whose label is not -100."""
    trained = labels != IGNORE
    bits = labels.clamp(min=0)
    logits = torch.stack([start_logits[trained], end_logits[trained]])  # (2, N)
    target = torch.stack([(bits[trained] & START) > 0, (bits[trained] & END) > 0]).to(logits.dtype)
    if logits.numel() == 0:
        return logits.sum()  # nothing to train in this batch: a zero that keeps the graph
    return nn.functional.binary_cross_entropy_with_logits(logits.float(), target.float())


@register("information-extraction", default=True, what="a prompt-conditioned span extractor")
class ErnieZooForSpanExtraction(HeadInputsMixin, ErnieZooPreTrainedModel):
    """Start/end pointers over `[CLS] prompt [SEP] text [SEP]` (see the module docstring)."""

    def __init__(self, config: ErnieZooConfig):
        super().__init__(config)
        self.ernie = ErnieZooModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout
        self.dropout = nn.Dropout(dropout if dropout is not None else config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 2)  # (start, end) logits per token
        self.post_init()

    @head_forward
    def forward(self, inputs: HeadInputs, **kwargs) -> SpanExtractionOutput:
        r"""
        labels (`torch.LongTensor` (B, T), *optional*): per-token bits, 1 start, 2 end, -100 not trained.
        """
        kwargs.pop("return_dict", None)
        outputs = self.ernie(**self.encoder_inputs(inputs, kwargs), return_dict=True)
        logits = self.classifier(self.dropout(outputs[0]))  # (B, T, 2)
        start_logits, end_logits = logits[..., 0], logits[..., 1]
        loss = None
        if inputs.labels is not None:
            loss = span_labels_loss(start_logits, end_logits, inputs.labels)
        return SpanExtractionOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


def pair_pointers(
    start_probs: list[float], end_probs: list[float], threshold: float, positions: list[int]
) -> list[tuple[int, int, float]]:
    """UIE's decoding (`get_span`) of one row: tokens in `positions` (the text's, in order) whose start (end)
    probability is above `threshold` are starts (ends); each start pairs with the first end at or after it, and
    where several starts reach the same end the latest one keeps it. Returns (start token, end token,
    start prob * end prob), by start token."""
    starts = [t for t in positions if start_probs[t] > threshold]
    ends = [t for t in positions if end_probs[t] > threshold]
    pairs: dict[int, int] = {}  # end token -> its start token
    e = 0
    for s in starts:
        while e < len(ends) and ends[e] < s:
            e += 1
        if e < len(ends):
            pairs[ends[e]] = s  # a later start before the same end replaces an earlier one
    return sorted((s, end, start_probs[s] * end_probs[end]) for end, s in pairs.items())


__all__ = [
    "ErnieZooForSpanExtraction",
    "IGNORE",
    "SpanExtractionOutput",
    "pair_pointers",
    "span_labels_loss",
]
