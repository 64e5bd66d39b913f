"""Preference losses (DPO and kin) on a causal LM, as a module an engine runs in place of the model's own forward
(as `objective.PretrainObjective` is for pretraining: DeepSpeed's ZeRO-3 hooks hang off the module it wraps, so
the policy and its reference are both reached through this one).

    batch: chosen_{input_ids, attention_mask, labels}, rejected_{...}   (labels -100 on the prompt and padding)
      └── one forward of [chosen; rejected] through the policy ── per-row log p(response | prompt): sum, tokens
      └── dpo / ipo: the same through the reference, no gradient: a frozen copy of the base (full fine-tuning), or
          the policy with its adapter disabled (LoRA: no second copy of the weights)
      └── the loss, and sums for the logs (rewards/chosen, rewards/rejected, margins, accuracy)

The losses, as TRL 1.16 computes them (tests/test_finetune_preference.py compares them on a batch):

    dpo    -log σ(β Δ),  Δ = (log π(c) - log π_ref(c)) - (log π(r) - log π_ref(r)), sums over response tokens
           (Rafailov et al. 2023, "Direct Preference Optimization"; TRL's DPOTrainer loss_type "sigmoid")
    ipo    (Δ̄ - 1 / (2β))²,  Δ̄: Δ with each log-ratio divided by its response's token count
           (Azar et al. 2023, "A General Theoretical Paradigm to Understand Learning from Human Preferences")
    orpo   NLL(chosen) - β log σ(log odds(c̄) - log odds(r̄)),  c̄, r̄: mean response-token log-probs; the NLL over
           the whole chosen sequence, prompt included, as TRL's ORPOTrainer takes it (Hong et al. 2024, "ORPO")
    simpo  -(1-ε) log σ(β (c̄ - r̄) - γ) - ε log σ(-β (c̄ - r̄) + γ) + sft_weight · NLL(chosen response)
           (Meng et al. 2024, "SimPO"; TRL's CPOTrainer loss_type "simpo", cpo_alpha = sft_weight)

Rewards logged: β x the log-ratio (dpo, ipo) or β x the mean log-prob (orpo, simpo), TRL's definitions.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

IGNORE = -100
PREFERENCE_LOSSES = ("dpo", "ipo", "orpo", "simpo")
#: the losses that compare with a reference model (the others are reference-free)
REFERENCE_LOSSES = ("dpo", "ipo")
SIDES = ("chosen", "rejected")


@dataclass
class PreferenceOutput:
    """`loss`: the batch's mean loss; `metrics`: sums over its rows ("rows": how many) for the logs."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, without cancellation (branch at -ln 2)."""
    return torch.where(x < -math.log(2), torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def token_logps(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, T-1) log p(token t+1 | tokens ≤ t), in fp32."""
    logp = logits[:, :-1].float().log_softmax(-1)  # (B, T-1, V)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def pair_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """[chosen; rejected] as one right-padded batch: input_ids (padded with the first row's last id: never
    attended to, never scored), attention_mask, labels."""
    width = max(batch[f"{s}_input_ids"].shape[1] for s in SIDES)
    out = {}
    for key, pad in (("input_ids", 0), ("attention_mask", 0), ("labels", IGNORE)):
        parts = [
            F.pad(batch[f"{s}_{key}"], (0, width - batch[f"{s}_{key}"].shape[1]), value=pad) for s in SIDES
        ]
        out[key] = torch.cat(parts)
    return out


class PreferenceLoss(nn.Module):
    """forward(**batch) -> `PreferenceOutput` of `policy` on a batch of preference pairs (module docstring).

    Args:
        policy: the causal LM being trained (a peft model under LoRA).
        loss: one of PREFERENCE_LOSSES.
        beta: β of every loss (DPO's KL weight, IPO's τ, ORPO's λ, SimPO's reward scale).
        reference: dpo / ipo under full fine-tuning: the frozen base (no gradients); None under an adapter method,
            whose reference is the policy with the adapter disabled.
        simpo_gamma: SimPO's target reward margin γ.
        label_smoothing: SimPO's ε (the preference labels' assumed noise).
        sft_weight: SimPO's weight of the NLL of the chosen response.
    """

    def __init__(
        self,
        policy: nn.Module,
        loss: str = "dpo",
        beta: float = 0.1,
        reference: nn.Module | None = None,
        simpo_gamma: float = 0.5,
        label_smoothing: float = 0.0,
        sft_weight: float = 0.0,
    ):
        super().__init__()
        if loss not in PREFERENCE_LOSSES:
            raise ValueError(f"unknown preference loss {loss!r}; use one of {PREFERENCE_LOSSES}")
        if loss in REFERENCE_LOSSES and reference is None and not hasattr(policy, "disable_adapter"):
            raise ValueError(f"the {loss} loss needs a reference model: a frozen base, or a peft policy")
        self.policy = policy
        self.reference = reference if loss in REFERENCE_LOSSES else None
        if self.reference is not None:
            self.reference.requires_grad_(False)
            self.reference.eval()
        self.kind, self.beta = loss, beta
        self.simpo_gamma, self.label_smoothing, self.sft_weight = simpo_gamma, label_smoothing, sft_weight

    @property
    def config(self):
        """The policy's config (what engines read of a model: TP divisibility, the decoder family)."""
        return self.policy.config

    def train(self, mode: bool = True) -> PreferenceLoss:
        super().train(mode)
        if self.reference is not None:
            self.reference.eval()  # the reference never drops out
        return self

    def _reference_logps(self, pair: dict[str, torch.Tensor]) -> torch.Tensor:
        context = self.policy.disable_adapter() if self.reference is None else contextlib.nullcontext()
        model = self.policy if self.reference is None else self.reference
        with torch.no_grad(), context:
            logits = model(
                input_ids=pair["input_ids"], attention_mask=pair["attention_mask"], use_cache=False
            ).logits
        return token_logps(logits, pair["input_ids"])

    def forward(self, **batch: torch.Tensor) -> PreferenceOutput:
        pair = pair_batch(batch)
        ids, mask = pair["input_ids"], pair["attention_mask"]
        n = batch["chosen_input_ids"].shape[0]
        logits = self.policy(input_ids=ids, attention_mask=mask, use_cache=False).logits
        logps = token_logps(logits, ids)  # (2n, T-1)
        response = (pair["labels"][:, 1:] != IGNORE).float()
        tokens = response.sum(1).clamp(min=1.0)
        sums = (logps * response).sum(1)
        chosen, rejected = sums[:n], sums[n:]
        b = self.beta
        if self.kind in REFERENCE_LOSSES:
            ref = (self._reference_logps(pair) * response).sum(1)
            chosen_ratio, rejected_ratio = chosen - ref[:n], rejected - ref[n:]
            if self.kind == "dpo":
                losses = -F.logsigmoid(b * (chosen_ratio - rejected_ratio))
            else:  # ipo: the log-ratios per response token
                delta = chosen_ratio / tokens[:n] - rejected_ratio / tokens[n:]
                losses = (delta - 1 / (2 * b)) ** 2
            loss = losses.mean()
            chosen_reward, rejected_reward = b * chosen_ratio.detach(), b * rejected_ratio.detach()
        else:
            mean_logps = sums / tokens
            c, r = mean_logps[:n], mean_logps[n:]
            if self.kind == "orpo":
                log_odds = (c - r) - (log1mexp(c) - log1mexp(r))
                # the NLL of the whole chosen sequence (prompt included), a mean over its tokens
                whole = mask[:n, 1:].float()
                nll = -(logps[:n] * whole).sum() / whole.sum().clamp(min=1.0)
                loss = nll - b * F.logsigmoid(log_odds).mean()
            else:  # simpo
                z = b * (c - r) - self.simpo_gamma
                eps = self.label_smoothing
                loss = (-F.logsigmoid(z) * (1 - eps) - F.logsigmoid(-z) * eps).mean()
                if self.sft_weight:
                    nll = -(logps[:n] * response[:n]).sum() / response[:n].sum().clamp(min=1.0)
                    loss = loss + self.sft_weight * nll
            chosen_reward, rejected_reward = b * c.detach(), b * r.detach()
        metrics = {
            "rows": float(n),
            "rewards/chosen": float(chosen_reward.sum()),
            "rewards/rejected": float(rejected_reward.sum()),
            "rewards/margins": float((chosen_reward - rejected_reward).sum()),
            "rewards/accuracy": float((chosen_reward > rejected_reward).float().sum()),
            "logps/chosen": float(chosen.detach().sum()),
            "logps/rejected": float(rejected.detach().sum()),
        }
        return PreferenceOutput(loss, metrics)


def metric_means(sums: dict[str, float]) -> dict[str, float]:
    """The per-row means of `PreferenceOutput.metrics` sums (without "rows")."""
    rows = max(sums.get("rows", 0.0), 1.0)
    return {k: v / rows for k, v in sums.items() if k != "rows"}


def unwrap_policy(model: Any) -> Any:
    """The policy a `PreferenceLoss` trains (any other model as it is)."""
    return model.policy if isinstance(model, PreferenceLoss) else model


__all__ = [
    "PREFERENCE_LOSSES",
    "REFERENCE_LOSSES",
    "PreferenceLoss",
    "PreferenceOutput",
    "log1mexp",
    "metric_means",
    "pair_batch",
    "token_logps",
    "unwrap_policy",
]
