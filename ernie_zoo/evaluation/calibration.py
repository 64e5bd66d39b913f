"""Scores a user can threshold: temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks")
and the expected calibration error it is judged by.

    ece = sum_b |B_b| / N * |acc(B_b) - conf(B_b)|        (15 equal-width confidence bins, the paper's choice)
    T*  = argmin_T  NLL(softmax(logits / T), labels)      (fitted on dev; T > 1 softens an overconfident model)

`fold_temperature` divides a classifier's final Linear by T, so the calibrated model *is* the saved model: its
probabilities are the same in Taskflow, in transformers' pipeline and after ONNX export, and nothing at inference
time has to know a temperature exists. Argmax predictions never change (a positive scale keeps the order).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

ECE_BINS = 15


def expected_calibration_error(
    confidences: Sequence[float] | torch.Tensor, correct: Sequence[bool] | torch.Tensor, bins: int = ECE_BINS
) -> float:
    """ECE of predictions whose top probability is `confidences[i]` and whose correctness is `correct[i]`: the
    sample-weighted mean |accuracy - mean confidence| over `bins` equal-width bins of (0, 1] (a confidence of
    exactly 0 falls in the first bin)."""
    conf = torch.as_tensor(confidences, dtype=torch.float64).flatten()
    ok = torch.as_tensor(correct, dtype=torch.float64).flatten()
    if conf.numel() != ok.numel():
        raise ValueError(f"{conf.numel()} confidences but {ok.numel()} correctness flags")
    if conf.numel() == 0:
        raise ValueError("expected_calibration_error needs at least one prediction")
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    if not torch.isfinite(conf).all() or (conf < 0).any() or (conf > 1).any():
        raise ValueError("confidences must be probabilities in [0, 1] (no NaN)")
    index = torch.clamp(torch.ceil(conf * bins).long() - 1, 0, bins - 1)  # (N,) bin of each prediction
    ece = 0.0
    for b in range(bins):
        mask = index == b
        n = int(mask.sum())
        if n:
            ece += n / conf.numel() * abs(float(ok[mask].mean()) - float(conf[mask].mean()))
    return ece


def classification_ece(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> float:
    """ECE of the arg-max predictions of `logits` (N, C) against integer `labels` (N,), at `temperature`."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    conf, pred = probs.max(dim=-1)
    return expected_calibration_error(conf, pred == labels.to(pred.device))


def nll(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    """Mean negative log-likelihood of `labels` under softmax(logits / temperature)."""
    return float(nn.functional.cross_entropy(logits.double() / temperature, labels.long()))


def fit_temperature(
    logits: torch.Tensor, labels: torch.Tensor, *, low: float = 0.05, high: float = 20.0, iters: int = 100
) -> float:
    """The temperature in [low, high] that minimises the NLL of `labels` under softmax(logits / T). The NLL is
    unimodal in log T for a fixed set of logits, so a golden-section search on log T finds it to ~1e-6 relative
    (no learning rate, no iterations to tune). Raises on empty or non-finite input."""
    logits = torch.as_tensor(logits).double()
    labels = torch.as_tensor(labels).long()
    if logits.dim() != 2 or logits.shape[0] != labels.numel() or logits.shape[0] == 0:
        raise ValueError(f"need logits (N, C) and N labels, got {tuple(logits.shape)} and {labels.numel()}")
    if not torch.isfinite(logits).all():
        raise ValueError("logits hold NaN or inf: fix the model before calibrating it")
    if labels.min() < 0 or labels.max() >= logits.shape[1]:
        raise ValueError(
            f"labels must be in [0, {logits.shape[1]}), got {int(labels.min())}..{int(labels.max())}"
        )
    a, b = math.log(low), math.log(high)
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = nll(logits, labels, math.exp(c)), nll(logits, labels, math.exp(d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = nll(logits, labels, math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = nll(logits, labels, math.exp(d))
    return math.exp((a + b) / 2)


@torch.no_grad()
def fold_temperature(linear: nn.Linear, temperature: float) -> None:
    """Divide the final classifier layer's weight and bias by `temperature` in place: logits / T from then on."""
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"fold_temperature needs the classifier's nn.Linear, got {type(linear).__name__}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")
    linear.weight.div_(temperature)
    if linear.bias is not None:
        linear.bias.div_(temperature)


__all__ = [
    "ECE_BINS",
    "classification_ece",
    "expected_calibration_error",
    "fit_temperature",
    "fold_temperature",
    "nll",
]
