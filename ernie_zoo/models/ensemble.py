"""`ErnieZooEnsembleForTokenClassificationCRF`: CRF taggers of one architecture, saved and loaded as one model.

    tokens ─┬─ member 0: encoder ─ classifier ─ emissions ─┐
            ├─ member 1: ... ──────────────────────────────┤ mean ─ emissions (B, T, C) ─ CRF (mean transitions)
            └─ ...                                         ┘            ├─ NLL (labels given)
                                                                        └─ Viterbi → `predictions` (eval)

Each member is an `ErnieZooForTokenClassificationCRF` with its own weights (and its own `lexicon_proj` when the
taggers read an entity lexicon); they share the configuration (`config.ensemble_size` members), the labels, the
tokenizer and the lexicon. The ensemble decodes the members' mean emissions with the mean of their transition
scores, the "mean-emission ensemble" that `train.distill_from` teaches a student to imitate. Its output looks like
one tagger's (`logits` = mean emissions, `predictions`, `loss`), so Taskflow, `ernie-finetune`'s evaluation and
distillation use it unchanged.

    ensemble = ErnieZooEnsembleForTokenClassificationCRF.from_members([tagger_a, tagger_b])
    ensemble.save_pretrained(directory)            # one config.json, one model.safetensors (members.0.*, ...)
    ErnieZooEnsembleForTokenClassificationCRF.from_pretrained(directory)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from .configuration import ErnieZooConfig
from .crf import LinearChainCRF
from .crf_tagger import (
    CRFTokenClassifierOutput,
    EntityLexiconMixin,
    ErnieZooForTokenClassificationCRF,
    crf_outputs,
)
from .heads import HeadInputs, head_forward
from .modeling import ErnieZooPreTrainedModel
from .registry import register

# Config fields that only describe how a member was trained; members may differ in them.
_TRAINING_ONLY = {
    "architectures",
    "attention_probs_dropout_prob",
    "classifier_dropout",
    "dtype",
    "finetuning_task",
    "hidden_dropout_prob",
    "_name_or_path",
    "transformers_version",
    "ensemble_size",
}


def mean_crf(crfs: Sequence[LinearChainCRF]) -> LinearChainCRF:
    """A CRF whose start, end and transition scores are the means of those of `crfs` (the ensemble's CRF)."""
    mean = LinearChainCRF(crfs[0].num_tags)
    with torch.no_grad():
        for name, p in mean.named_parameters():
            p.copy_(torch.stack([crf.get_parameter(name) for crf in crfs]).mean(0))
    return mean


@register("token-classification", exclusive=True, what="an ensemble of taggers")
class ErnieZooEnsembleForTokenClassificationCRF(EntityLexiconMixin, ErnieZooPreTrainedModel):
    """Mean-emission ensemble of `config.ensemble_size` CRF taggers (see the module docstring)."""

    def __init__(self, config: ErnieZooConfig):
        super().__init__(config)
        size = getattr(config, "ensemble_size", None)
        if not isinstance(size, int) or isinstance(size, bool) or size < 2:
            raise ValueError(f"config.ensemble_size must be an integer >= 2, got {size!r}")
        config.use_crf = True
        self.num_labels = config.num_labels
        self.members = nn.ModuleList(ErnieZooForTokenClassificationCRF(config) for _ in range(size))
        self.crf = LinearChainCRF(config.num_labels)
        self.post_init()

    def set_entity_lexicon(self, lexicon) -> None:
        super().set_entity_lexicon(lexicon)
        for member in self.members:
            member.set_entity_lexicon(lexicon)

    @classmethod
    def from_members(cls, members: Sequence[ErnieZooForTokenClassificationCRF]):
        """An ensemble holding copies of `members` (two or more CRF taggers with the same architecture, labels and
        entity lexicon), its CRF the mean of theirs."""
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least two taggers, got {len(members)}")
        first = members[0]
        reference = {k: v for k, v in first.config.to_dict().items() if k not in _TRAINING_ONLY}
        shapes = {k: tuple(v.shape) for k, v in first.state_dict().items()}
        for n, member in enumerate(members):
            if not isinstance(member, ErnieZooForTokenClassificationCRF):
                raise TypeError(
                    f"member {n} is a {type(member).__name__}, not an ErnieZooForTokenClassificationCRF"
                )
            config = {k: v for k, v in member.config.to_dict().items() if k not in _TRAINING_ONLY}
            differ = sorted(k for k in reference.keys() | config.keys() if reference.get(k) != config.get(k))
            if differ:
                raise ValueError(f"member {n}'s config differs from member 0's in {differ}")
            if {k: tuple(v.shape) for k, v in member.state_dict().items()} != shapes:
                raise ValueError(f"member {n}'s weights differ in names or shapes from member 0's")
            lexicon = member.entity_lexicon
            if (lexicon is None) != (first.entity_lexicon is None) or (
                lexicon is not None and not lexicon.same_as(first.entity_lexicon)
            ):
                raise ValueError(f"member {n}'s entity lexicon is not member 0's")
        config = copy.deepcopy(first.config)
        config.ensemble_size = len(members)
        config.architectures = [cls.__name__]
        model = cls(config)
        for target, member in zip(model.members, members):
            target.load_state_dict(member.state_dict())
        model.crf.load_state_dict(mean_crf([m.crf for m in members]).state_dict())
        model.set_entity_lexicon(first.entity_lexicon)
        return model.to(first.dtype)

    def member(self, index: int) -> ErnieZooForTokenClassificationCRF:
        """A standalone copy of tagger `index` (its own config, without `ensemble_size`), lexicon attached."""
        config = copy.deepcopy(self.config)
        del config.ensemble_size
        config.architectures = [ErnieZooForTokenClassificationCRF.__name__]
        tagger = ErnieZooForTokenClassificationCRF(config)
        tagger.load_state_dict(self.members[index].state_dict())
        tagger.set_entity_lexicon(self.entity_lexicon)
        return tagger.to(self.dtype).train(self.training)

    @head_forward
    def forward(
        self, inputs: HeadInputs, crf_mask: torch.Tensor | None = None, **kwargs
    ) -> CRFTokenClassifierOutput:
        """Like `ErnieZooForTokenClassificationCRF.forward` (same inputs); `logits` are the members' mean emissions
        and `loss` their CRF negative log-likelihood under the mean transitions."""
        emissions = torch.stack([m.emissions(inputs, **kwargs)[0] for m in self.members]).mean(0)
        loss, predictions = crf_outputs(
            self.crf, emissions, inputs.attention_mask, crf_mask, inputs.labels, self.training
        )
        return CRFTokenClassifierOutput(loss=loss, logits=emissions, predictions=predictions)


__all__ = ["ErnieZooEnsembleForTokenClassificationCRF", "mean_crf"]
