"""The logistic pair, once: every place that moves between P(correct) and its log-odds calls these."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

PROBA_FLOOR = 1e-4  # probabilities are clipped to [floor, 1 - floor] before a logit (|logit| <= 9.2)


def logit(p: npt.ArrayLike) -> np.ndarray:
    """log(p / (1 - p)) in float64, p clipped to [PROBA_FLOOR, 1 - PROBA_FLOOR] (a P of 0 or 1 stays finite)."""
    p = np.clip(np.asarray(p, np.float64), PROBA_FLOOR, 1 - PROBA_FLOOR)
    return np.log(p) - np.log1p(-p)


def sigmoid(x: npt.ArrayLike) -> np.ndarray:
    """1 / (1 + exp(-x)) in float64."""
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


__all__ = ["PROBA_FLOOR", "logit", "sigmoid"]
