"""Knowledge distillation (train.distill_from): the model also learns the output distribution of teachers.

    clean batch ─ teacher 1 … teacher k (eval mode, no grad) ─ mean logits ─ softmax(· / T) ─┐
    batch (after token dropout) ─ student ─ task loss, logits ─ log_softmax(· / T) ─────── KL ┴─ T² · KL
    loss = (1 - alpha) · task loss + alpha · T² · KL(teachers ‖ student)

The teachers are fine-tuned models of the same task: their mean logits (an ensemble) are usually better than
any one of them, and a student trained to match them keeps part of that gain in one model's size (Hinton et
al. 2015, "Distilling the Knowledge in a Neural Network"). The KL is taken where the task scores: every row
for sequence classification, every labelled token for token classification. A CRF tagger's logits are its
emissions, so a CRF student learns the teachers' per-token emission distribution; its transition scores learn
from the task loss alone.

The teachers read the clean batch, before train.token_dropout masks it: the student learns to predict from
masked input what the teachers see in the full text (as in "noisy student" training).

Teachers must share the student's vocabulary and labels (same ids in the same order), and taggers that read
an entity lexicon must hold the same lexicon as the student, since `lexicon_ids` are computed once, from the
student's lexicon.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ernie_zoo.models.crf_tagger import model_inputs

logger = logging.getLogger(__name__)

DISTILL_TASKS = ("sequence_classification", "token_classification")


def check_teacher(where, model: nn.Module, model_tokenizer, tokenizer, task, what: str) -> None:
    """Raise ValueError (starting with `what`) unless `model` reads `tokenizer`'s input ids, predicts `task.labels`
    in their order and, if it reads an entity lexicon, reads the lexicon `task` computes `lexicon_ids` with."""
    if model_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(
            f"{what}: {where} has another vocabulary than the student's tokenizer; a teacher must read the same "
            "input ids"
        )
    id2label = getattr(model.config, "id2label", None) or {}
    theirs, labels = [id2label[i] for i in sorted(id2label, key=int)], list(task.labels)
    if theirs != labels:
        raise ValueError(
            f"{what}: {where} predicts labels {theirs}, the student {labels}; they must be the same, in the same "
            "order"
        )
    lexicon = getattr(task, "lexicon", None)
    theirs = getattr(model, "entity_lexicon", None) or getattr(model, "sentiment_lexicon", None)
    if getattr(model, "reads_lexicon", False) and (lexicon is None or not lexicon.same_as(theirs)):
        raise ValueError(
            f"{what}: {where} reads a lexicon that is not the student's (data.lexicon, or the base model's); "
            "lexicon_ids are computed from the student's lexicon"
        )


class Teachers:
    """The teacher models of train.distill_from and the distillation loss against them."""

    def __init__(
        self,
        paths: Sequence[str],
        task,
        tokenizer,
        device: torch.device,
        alpha: float,
        temperature: float,
    ):
        from .export import load_finetuned

        multi_label = bool(getattr(task.data_args, "multi_label", False))
        if task.name not in DISTILL_TASKS or multi_label:
            raise ValueError(
                f"train.distill_from: distillation supports {', '.join(DISTILL_TASKS)} (single-label), not "
                f"{task.name}{' (multi-label)' if multi_label else ''}"
            )
        self.alpha, self.temperature = alpha, temperature
        self.models: list[nn.Module] = []
        for path in paths:
            where = Path(path).expanduser()
            if not where.exists():
                raise FileNotFoundError(f"train.distill_from: no such model directory: {where}")
            model, teacher_tok = load_finetuned(where, device=device)
            check_teacher(where, model, teacher_tok, tokenizer, task, "train.distill_from")
            for p in model.parameters():
                p.requires_grad_(False)
            self.models.append(model.eval())
        logger.info(
            "distilling from %d teacher(s) (alpha %.2f, temperature %.1f): %s",
            len(self.models),
            alpha,
            temperature,
            ", ".join(str(p) for p in paths),
        )

    @torch.no_grad()
    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The teachers' mean logits on `batch` (labels are not passed on)."""
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        return torch.stack(
            [model(**model_inputs(model, inputs)).logits.float() for model in self.models]
        ).mean(0)

    def kd_loss(
        self, student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor | None
    ):
        """T² · KL(softmax(teacher / T) ‖ softmax(student / T)), averaged over the scored rows / tokens."""
        if student_logits.shape != teacher_logits.shape:
            raise ValueError(
                f"teacher logits {tuple(teacher_logits.shape)} do not match the student's "
                f"{tuple(student_logits.shape)}"
            )
        s, t = student_logits.float(), teacher_logits
        if s.dim() == 3:  # token classification: the labelled tokens only
            keep = labels != -100 if labels is not None else torch.ones(s.shape[:2], dtype=torch.bool)
            s, t = s[keep], t[keep]
        if s.shape[0] == 0:
            return student_logits.sum() * 0.0
        T = self.temperature
        kl = F.kl_div(
            F.log_softmax(s / T, -1), F.log_softmax(t / T, -1), log_target=True, reduction="batchmean"
        )
        return kl * T * T

    def loss(self, task_loss: torch.Tensor, student_logits: torch.Tensor, clean_batch: dict[str, Any]):
        """(1 - alpha) · task loss + alpha · the distillation loss on `clean_batch`'s teacher logits."""
        teacher = self.logits(clean_batch)
        kd = self.kd_loss(student_logits, teacher, clean_batch.get("labels"))
        return (1 - self.alpha) * task_loss + self.alpha * kd


__all__ = ["DISTILL_TASKS", "Teachers", "check_teacher"]
