"""The calibration of the kept state's logits (TrainConfig.calibration), the last stage of LOCUS training: a
temperature (and bias: Platt scaling) fitted on the validation cells and stored in the model (calibrate,
fit_temperature). One increasing map for every model: routing is unchanged."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from locus_model.model import Locus
from locus_model.training.config import Stage, TrainConfig
from locus_model.training.inputs import Validation, val_logits

CALIBRATION = Stage("calibration", frozenset({"calibration"}), on=lambda cfg: cfg.calibration != "none")


def calibrate(model: Locus, enc: torch.Tensor, val: Validation, cfg: TrainConfig) -> dict:
    """Fit the temperature (and bias, "platt") on the validation cells and store them in the model."""
    with torch.no_grad():
        logits = val_logits(model, enc, val)  # (M, Qv), uncalibrated (temperature 1, bias 0)
    t, b = fit_temperature(logits[val.known], val.targets[val.known], bias=cfg.calibration == "platt")
    model.temperature.fill_(t)
    model.logit_bias.fill_(b)
    return {"temperature": t, "logit_bias": b}


def fit_temperature(
    logits: torch.Tensor,  # (n,) validation logits, uncalibrated
    targets: torch.Tensor,  # (n,) labels in [0, 1]
    *,
    bias: bool = False,
) -> tuple[float, float]:
    """(T, b) minimising BCE(logits / T + b, targets): temperature scaling (Guo et al. 2017), with bias=True
    Platt scaling; b = 0 when bias is False. T is clamped to [0.05, 20]."""
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=bias)
    x, y = logits.detach().double().cpu(), targets.detach().double().cpu()
    opt = torch.optim.LBFGS([log_t, b] if bias else [log_t], lr=0.5, max_iter=100, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(x / log_t.exp() + b, y)
        loss.backward()
        return loss

    opt.step(closure)
    return float(log_t.detach().exp().clamp(0.05, 20.0)), float(b.detach())
