"""Temperature scaling and ECE (ernie_zoo.evaluation.calibration)."""

import math

import pytest
import torch
from torch import nn

from ernie_zoo.evaluation.calibration import (
    classification_ece,
    expected_calibration_error,
    fit_temperature,
    fold_temperature,
)


def test_ece_by_hand():
    # bins of width 1/15: 0.95 and 0.97 share the last bin (acc 1/2, conf 0.96); 0.55 alone (acc 1, conf 0.55)
    ece = expected_calibration_error([0.95, 0.97, 0.55], [True, False, True])
    assert ece == pytest.approx(2 / 3 * abs(0.5 - 0.96) + 1 / 3 * abs(1 - 0.55))
    assert expected_calibration_error([1.0, 1.0], [True, True]) == 0.0
    assert expected_calibration_error([0.0], [False]) == 0.0  # a confidence of 0 falls in the first bin


def test_ece_refuses_bad_input():
    with pytest.raises(ValueError, match="probabilities"):
        expected_calibration_error([float("nan")], [True])
    with pytest.raises(ValueError, match="2 confidences but 1"):
        expected_calibration_error([0.5, 0.6], [True])
    with pytest.raises(ValueError, match="at least one"):
        expected_calibration_error([], [])


def test_fit_temperature_recovers_the_generating_temperature():
    # labels drawn from softmax(z / 3): the fitted temperature of the logits z is ~3, and calibrating lowers ECE
    g = torch.Generator().manual_seed(0)
    z = torch.randn(20000, 3, generator=g) * 6
    labels = torch.multinomial(torch.softmax(z / 3, dim=-1), 1, generator=g).squeeze(1)
    t = fit_temperature(z, labels)
    assert t == pytest.approx(3.0, rel=0.05)
    assert classification_ece(z, labels, t) < classification_ece(z, labels) / 3


def test_fit_temperature_refuses_nan_and_bad_labels():
    with pytest.raises(ValueError, match="NaN"):
        fit_temperature(torch.tensor([[0.0, float("nan")]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="labels must be in"):
        fit_temperature(torch.zeros(2, 2), torch.tensor([0, 2]))


def test_fold_temperature_equals_dividing_the_logits():
    torch.manual_seed(0)
    layer = nn.Linear(8, 3)
    x = torch.randn(5, 8)
    before = layer(x)
    fold_temperature(layer, 2.5)
    assert torch.allclose(layer(x), before / 2.5, atol=1e-6)
    assert torch.equal(layer(x).argmax(-1), before.argmax(-1))
    with pytest.raises(ValueError, match="finite number > 0"):
        fold_temperature(layer, -1.0)
    with pytest.raises(ValueError, match="finite number > 0"):
        fold_temperature(layer, math.inf)
