"""Routing and correctness-prediction metrics of LOCUS (arXiv 2601.21082).

Every function takes probs (M, Q) = predicted P(correct) for M models x Q queries and labels (M, Q) =
observed scores in [0, 1], NaN where unknown; NaN cells are excluded. A score counts as correct when
it is >= 0.5 (binary 0/1 labels are the usual case).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def _check(probs: np.ndarray, labels: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if probs.shape != labels.shape or probs.ndim != 2:
        raise ValueError(f"{where}: probs {probs.shape} and labels {labels.shape} must both be (M, Q).")
    known = ~np.isnan(labels)  # (M, Q)
    if not known.any():
        raise ValueError(f"{where}: every label is NaN, nothing to score. How to fix: pass the cells you observed.")
    if np.isnan(probs[known]).any():
        raise ValueError(f"{where}: probs are NaN on labelled cells; predict every labelled (model, query).")
    return probs, labels, known


def hit_at_k(probs: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Mean over queries of the best label among the k models with the highest probs (labelled models only).

    Queries with no labelled model are skipped; queries that no model answers count as 0 (stay in the
    denominator); with fewer than k labelled models all of them count.
    """
    probs, labels, known = _check(probs, labels, "hit_at_k")
    if k < 1:
        raise ValueError(f"hit_at_k: k={k} must be >= 1.")
    cols = known.any(axis=0)  # (Q,) queries with a labelled model
    p = np.where(known, probs, -np.inf)[:, cols]  # (M, Q')
    y = np.where(known, labels, -np.inf)[:, cols]  # (M, Q')
    k = min(k, p.shape[0])
    # stable sort of -p: ties go to the lower model index, deterministically
    top = np.argsort(-p, axis=0, kind="stable")[:k]  # (k, Q')
    best = np.take_along_axis(y, top, axis=0).max(axis=0)  # (Q',); -inf only where all top-k unlabelled
    return float(np.mean(best))


def routing_accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    """Hit@1: per query, the label of the labelled model with the highest prob; mean over queries."""
    return hit_at_k(probs, labels, 1)


def correctness_accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of labelled cells where (prob > 0.5) agrees with (label >= 0.5)."""
    probs, labels, known = _check(probs, labels, "correctness_accuracy")
    return float(np.mean((probs[known] > 0.5) == (labels[known] >= 0.5)))


def roc_auc(probs: np.ndarray, labels: np.ndarray) -> float:
    """ROC-AUC of probs against (label >= 0.5) over labelled cells (ties count one half).

    Returns NaN when the labelled cells hold only one class, where AUC is undefined.
    """
    probs, labels, known = _check(probs, labels, "roc_auc")
    p, pos = probs[known], labels[known] >= 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(p)  # average ranks handle ties (Mann-Whitney U)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def brier(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean squared error between probs and labels over labelled cells."""
    probs, labels, known = _check(probs, labels, "brier")
    return float(np.mean((probs[known] - labels[known]) ** 2))


def bce(probs: np.ndarray, labels: np.ndarray, *, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy (nats) over labelled cells, probs clipped to [eps, 1 - eps]."""
    probs, labels, known = _check(probs, labels, "bce")
    p, y = np.clip(probs[known], eps, 1 - eps), labels[known]
    return float(np.mean(-(y * np.log(p) + (1 - y) * np.log1p(-p))))


METRICS = ("routing_acc", "hit@3", "correctness_acc", "auc", "brier")  # what the protocol reports


def score_predictions(probs: np.ndarray, labels: np.ndarray, route: np.ndarray | None = None) -> dict[str, float]:
    """All METRICS on (M, Q) probs against labels (NaN = unknown); routing and hit@3 rank by ``route`` (M, Q) when
    given (a guarded router's routing scores: locus_model.routing.policy), else by probs."""
    route = probs if route is None else route
    return {
        "routing_acc": routing_accuracy(route, labels),
        "hit@3": hit_at_k(route, labels, 3),
        "correctness_acc": correctness_accuracy(probs, labels),
        "auc": roc_auc(probs, labels),
        "brier": brier(probs, labels),
    }


__all__ = [
    "routing_accuracy",
    "hit_at_k",
    "correctness_accuracy",
    "roc_auc",
    "brier",
    "bce",
    "METRICS",
    "score_predictions",
]
