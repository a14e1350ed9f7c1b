"""Reference scores (a leaderboard's columns) from per-benchmark accuracy: a ridge map fitted on the pool's models,
its interval from the map of every accuracy draw plus the map's leave-one-out residual spread. A score of a benchmark
never asked (HellaSwag on metabench) comes out of the same map."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from locus_model.estimates.capability import Capability
from locus_model.estimates.coding import LEVEL


@dataclass(frozen=True)
class ReferenceMap:
    """Ridge maps from per-benchmark accuracy (K) to each reference score, fitted on the training models."""

    scores: tuple[str, ...]
    coef: np.ndarray  # (K, R)
    intercept: np.ndarray  # (R,)
    residual_std: np.ndarray  # (R,) leave-one-out residual spread on the training models

    def predict(self, accuracy: np.ndarray) -> np.ndarray:  # (..., K) -> (..., R)
        return accuracy @ self.coef + self.intercept


def fit_reference_map(accuracy: np.ndarray, reference: pd.DataFrame, *, alpha: float = 1e-3) -> ReferenceMap:
    """accuracy (N, K): the training models' per-benchmark accuracy; reference (N rows, one numeric column per score,
    aligned). Ridge with its closed-form leave-one-out residuals for the interval."""
    x = np.asarray(accuracy, dtype=np.float64)
    t = reference.to_numpy(dtype=np.float64)
    if len(x) != len(t) or np.isnan(t).any() or np.isnan(x).any():
        raise ValueError(
            "fit_reference_map: accuracy and reference must be aligned rows without NaN. How to fix: keep "
            "only the training models that have every reference score."
        )
    xm, tm = x.mean(axis=0), t.mean(axis=0)
    xc = x - xm
    gram = xc.T @ xc + alpha * len(x) * np.eye(x.shape[1])
    coef = np.linalg.solve(gram, xc.T @ (t - tm))
    hat = np.einsum("ij,jk,ik->i", xc, np.linalg.inv(gram), xc) + 1.0 / len(x)
    loo = (t - tm - xc @ coef) / (1 - hat)[:, None]
    return ReferenceMap(
        scores=tuple(reference.columns),
        coef=coef,
        intercept=tm - xm @ coef,
        residual_std=np.sqrt((loo**2).mean(axis=0)),
    )


def reference_estimates(
    capability: Capability, ref: ReferenceMap, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, lo, hi), each (M, R): the map of the accuracy estimates, its interval from the map of every
    accuracy draw plus the map's residual spread."""
    draws = ref.predict(capability.draws)  # (M, S, R)
    draws = draws + ref.residual_std * np.random.default_rng(seed).standard_normal(draws.shape)
    tail = (1 - LEVEL) / 2
    return ref.predict(capability.estimate), np.quantile(draws, tail, axis=1), np.quantile(draws, 1 - tail, axis=1)


__all__ = ["ReferenceMap", "fit_reference_map", "reference_estimates"]
