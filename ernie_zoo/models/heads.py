"""The inputs every ErnieZoo head takes, written once: `HeadInputs`, `@head_forward` and `HeadInputsMixin`.

Every head's `forward` names the same inputs: the encoder's six, `labels`, and the two the zoo adds, `pinyin_ids`
and `lexicon_ids`. `@head_forward` gives a head's own code that signature and hands it the inputs as one
`HeadInputs`; the head's code names only what it adds (the CRF tagger's `crf_mask`, the spelling corrector's
`logits_mask`) and what it returns. `HeadInputsMixin.encoder_inputs` is the one hand-over to the encoder:

    forward(self, input_ids, attention_mask, token_type_ids, task_type_ids, position_ids, inputs_embeds, labels,
            *, pinyin_ids, lexicon_ids, <the head's own>, **kwargs)      <- inspect.signature(model.forward)
        │  @head_forward
        ▼
    body(self, inputs: HeadInputs, <the head's own>, **kwargs)
        │  self.encoder_inputs(inputs, kwargs): lexicon bits added to the embeddings, pinyin_ids handed on by name
        ▼
    ErnieZooModel.forward (or transformers' ERNIE head, which hands them to it)

The parameters are named in the signature that `inspect.signature(model.forward)` reads, not hidden in `**kwargs`:
transformers' Trainer keeps only the dataset columns that `forward` names (`remove_unused_columns=True`), so an
unnamed `pinyin_ids`, `lexicon_ids` or `crf_mask` would be dropped silently; peft and transformers' generation read
the signature too. The signature is that of `HeadInputs` (a dataclass), then the head's own parameters.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

import torch
from torch import nn

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeadInputs:
    """
    input_ids, attention_mask, token_type_ids, task_type_ids, position_ids, inputs_embeds:
        the encoder's inputs, as transformers' ERNIE takes them.
    labels (*optional*): the head's targets (class ids, tag ids, the right tokens); a loss is computed when given.
    pinyin_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
        Context-aware pinyin of each token, `syllable_id * 6 + tone` (0 for non-Han tokens), as produced by
        `ErnieZooTokenizerFast`. Without them each token's most common reading is used. Ignored when
        `inputs_embeds` is given (the character features need token ids).
    lexicon_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
        Lexicon input bits of each token, read by a head with `lexicon_proj` (the NER tagger's entity lexicon, the
        sentiment classifier's sentiment lexicon) and ignored by the others.
    """

    input_ids: torch.Tensor | None = None
    attention_mask: torch.Tensor | None = None
    token_type_ids: torch.Tensor | None = None
    task_type_ids: torch.Tensor | None = None
    position_ids: torch.Tensor | None = None
    inputs_embeds: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    _: KW_ONLY
    pinyin_ids: torch.Tensor | None = None
    lexicon_ids: torch.Tensor | None = None


_SHARED = tuple(inspect.signature(HeadInputs).parameters.values())
#: the parameter names every head's `forward` has, in order
SHARED_PARAMETERS = tuple(p.name for p in _SHARED)
_POSITIONAL = tuple(p.name for p in _SHARED if p.kind is p.POSITIONAL_OR_KEYWORD)


def head_forward(body: Callable[..., Any]) -> Callable[..., Any]:
    """`body(self, inputs: HeadInputs, <own keyword parameters>, **kwargs)` as a method whose signature names the
    shared inputs: `(self, <HeadInputs' fields>, *, <body's own parameters>, **kwargs)`. Calls bind as that
    signature says (the first seven inputs by position or keyword, the rest by keyword only); what no parameter
    names goes on in `**kwargs` (`return_dict`, `output_hidden_states`, ...)."""
    params = list(inspect.signature(body).parameters.values())[2:]  # after self and inputs
    own = [p.replace(kind=p.KEYWORD_ONLY) for p in params if p.kind is not p.VAR_KEYWORD]
    clash = sorted({p.name for p in own} & set(SHARED_PARAMETERS))
    if clash or any(p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) for p in params):
        raise TypeError(
            f"{body.__qualname__}: a head's own parameters come after `inputs`, by keyword, and are not "
            f"HeadInputs' fields (clash: {clash})"
        )
    var_keyword = [p for p in params if p.kind is p.VAR_KEYWORD]
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    signature = inspect.Signature(
        [self_param, *_SHARED, *own, *var_keyword],
        return_annotation=inspect.signature(body).return_annotation,
    )

    def forward(self, *args, **kwargs):
        if len(args) > len(_POSITIONAL):
            raise TypeError(
                f"{body.__qualname__}() takes {len(_POSITIONAL)} positional inputs ({', '.join(_POSITIONAL)}); "
                f"{len(args)} were given"
            )
        for name, value in zip(_POSITIONAL, args):
            if name in kwargs:
                raise TypeError(f"{body.__qualname__}() got multiple values for argument {name!r}")
            kwargs[name] = value
        inputs = HeadInputs(**{name: kwargs.pop(name, None) for name in SHARED_PARAMETERS})
        return body(self, inputs, **kwargs)

    # not functools.wraps: its `__wrapped__` would lead tools that unwrap to `body` and its other signature
    for attribute in ("__module__", "__name__", "__qualname__"):
        setattr(forward, attribute, getattr(body, attribute))
    own_doc = inspect.cleandoc(body.__doc__) + "\n\n" if body.__doc__ else ""
    forward.__doc__ = own_doc + inspect.cleandoc(HeadInputs.__doc__)
    forward.__signature__ = signature
    return forward


class HeadInputsMixin:
    """What a head with an ERNIE encoder (`self.ernie`) does with `HeadInputs` before the encoder: the lexicon input
    bits (`lexicon_proj`, added to the embeddings) of a head that reads them, and `pinyin_ids` handed on by name."""

    def _add_lexicon_input(self, bits: int) -> None:
        """`lexicon_proj` (bits -> hidden size, no bias, zero at init) when the model reads `bits` lexicon input bits
        per token (`lexicon_ids`), else None."""
        self.lexicon_proj = nn.Linear(bits, self.config.hidden_size, bias=False) if bits else None
        self._warned_no_lexicon = False

    def _lexicon_ids_for(self, input_ids: torch.Tensor) -> torch.Tensor | None:
        """The lexicon bits a head computes from its input ids itself when a caller gives none (None: it cannot)."""
        return None

    def _embed_with_lexicon(
        self, input_ids: torch.Tensor, lexicon_ids: torch.Tensor | None, pinyin_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """Word + char-feature embeddings plus `lexicon_proj` of each token's lexicon bits:

            lexicon_ids (B, T) ─ bits (B, T, n) ─ lexicon_proj (no bias, starts at zero) ─┐
            input_ids ─ word + char-feature embeddings ────────────────────────────── add ┴─ ERNIE ─ ...

        `lexicon_proj` starts at zero, so a model given a lexicon starts out computing exactly what it did without
        one. Without `lexicon_ids` (a plain transformers pipeline) the model runs without lexicon bits, warned once."""
        if lexicon_ids is None:
            lexicon_ids = self._lexicon_ids_for(input_ids)
        if lexicon_ids is None:
            if not self._warned_no_lexicon:
                self._warned_no_lexicon = True
                logger.warning(
                    "this model was trained with lexicon input bits but got no lexicon_ids and has no lexicon "
                    "to compute them from; it runs without them (Taskflow computes them from the lexicon saved "
                    "with the model)"
                )
            lexicon_ids = torch.zeros_like(input_ids)
        elif lexicon_ids.shape != input_ids.shape:
            raise ValueError(
                f"lexicon_ids shape {tuple(lexicon_ids.shape)} != input_ids shape {tuple(input_ids.shape)}"
            )
        n = self.lexicon_proj.in_features
        # bit k of each id, (B, T, n); division and modulo rather than >> and & so that the graph exports to ONNX
        # (ids are never negative)
        powers = 2 ** torch.arange(n, device=lexicon_ids.device)
        bits = torch.div(lexicon_ids[..., None], powers, rounding_mode="floor") % 2
        embeds = self.ernie.embeddings.embed_tokens(input_ids, pinyin_ids)  # (B, T, H)
        return embeds + self.lexicon_proj(bits.to(embeds.dtype))

    def encoder_inputs(self, inputs: HeadInputs, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the encoder (`ErnieZooModel.forward`, or a transformers ERNIE head's forward,
        which hands them to it) for `inputs` and the other keyword arguments `kwargs`: not `labels`; with
        `lexicon_proj`, the token ids become `inputs_embeds` with the lexicon bits added; `pinyin_ids` by name
        where given (transformers' heads hand it on in their `**kwargs`)."""
        input_ids, inputs_embeds, pinyin_ids = inputs.input_ids, inputs.inputs_embeds, inputs.pinyin_ids
        if (
            getattr(self, "lexicon_proj", None) is not None
            and input_ids is not None
            and inputs_embeds is None
        ):
            inputs_embeds = self._embed_with_lexicon(input_ids, inputs.lexicon_ids, pinyin_ids)
            input_ids = pinyin_ids = None
        return dict(
            input_ids=input_ids,
            attention_mask=inputs.attention_mask,
            token_type_ids=inputs.token_type_ids,
            task_type_ids=inputs.task_type_ids,
            position_ids=inputs.position_ids,
            inputs_embeds=inputs_embeds,
            **({"pinyin_ids": pinyin_ids} if pinyin_ids is not None else {}),
            **kwargs,
        )


__all__ = ["SHARED_PARAMETERS", "HeadInputs", "HeadInputsMixin", "head_forward"]
