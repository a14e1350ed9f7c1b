"""The calibration: a temperature (and bias) fitted on the validation cells and stored in the model."""

import pytest
import torch

from locus_model.training.calibration import fit_temperature


def test_fit_temperature_recovers_the_scale_of_overconfident_logits():
    g = torch.Generator().manual_seed(0)
    true_logits = 2 * torch.randn(20000, generator=g)
    labels = (torch.rand(20000, generator=g) < torch.sigmoid(true_logits)).float()
    t, b = fit_temperature(3 * true_logits, labels)
    assert t == pytest.approx(3.0, rel=0.1) and b == 0
    t, b = fit_temperature(3 * true_logits - 1.5, labels, bias=True)  # logits shifted by -1.5 = -0.5 * T
    assert t == pytest.approx(3.0, rel=0.1) and b == pytest.approx(0.5, abs=0.1)
