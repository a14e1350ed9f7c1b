"""bench/diag/group_smoothing.py's empirical-Bayes pseudo-count: the value its moments call for, and what it does to
a group table whose groups differ by noise alone."""

from __future__ import annotations

import numpy as np

from bench.diag.group_smoothing import group_smoothing
from locus_model.query_groups import SMOOTHING, group_rates


def answers(truth: np.ndarray, per_group: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores (M, G * per_group), one-hot membership) of models answering per_group questions of each group at the
    true rates ``truth`` (M, G)."""
    rng = np.random.default_rng(seed)
    rates = np.repeat(truth, per_group, axis=1)
    membership = np.repeat(np.eye(truth.shape[1], dtype=np.float32), per_group, axis=0)
    return (rng.uniform(size=rates.shape) < rates).astype(np.float32), membership


def test_the_pseudo_count_is_the_one_the_spread_of_true_group_accuracies_calls_for():
    rng = np.random.default_rng(0)
    level = rng.uniform(0.4, 0.6, (300, 1))
    real = np.clip(level + rng.normal(0, 0.15, (300, 4)), 0.05, 0.95)  # tau ~0.15: k = p (1 - p) / tau^2 ~ 11
    k_real = group_smoothing(*answers(real, 60, 1))
    assert 7 < k_real < 16
    k_noise = group_smoothing(*answers(np.repeat(level, 4, axis=1), 60, 2))  # no true gaps: only noise
    assert k_noise > 60
    assert group_smoothing(*answers(level, 60, 3)) == SMOOTHING  # one group: nothing to estimate
    assert SMOOTHING <= k_real <= 1e4


def test_with_the_estimated_pseudo_count_noise_in_the_groups_routes_to_the_best_model():
    truth = np.repeat([[0.70], [0.66], [0.62], [0.60], [0.58], [0.55]], 14, axis=1)  # 14 groups, no true gaps
    fixed, estimated = [], []
    for seed in range(10):  # ~18 answers a group, as 256 anchors over 14 categories
        scores, membership = answers(truth, 18, seed)
        best = scores.mean(1).argmax()  # the best single model on its own answers
        k = group_smoothing(scores, membership)
        fixed.append((group_rates(scores, membership, 1.0).argmax(0) == best).mean())
        estimated.append((group_rates(scores, membership, k).argmax(0) == best).mean())
    assert np.mean(estimated) > 0.75 and np.mean(fixed) < 0.5  # groups sent to the best model: 0.83 / 0.43
