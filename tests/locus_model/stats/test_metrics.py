"""Metrics on tiny hand-checked cases."""

import math

import numpy as np
import pytest

from locus_model.stats.metrics import bce, brier, correctness_accuracy, hit_at_k, roc_auc, routing_accuracy

nan = np.nan
# 3 models x 4 queries
PROBS = np.array(
    [
        [0.9, 0.2, 0.6, 0.5],
        [0.1, 0.8, 0.7, 0.4],
        [0.5, 0.3, 0.9, 0.3],
    ]
)
LABELS = np.array(
    [
        [1.0, 0.0, 1.0, nan],
        [0.0, 1.0, 0.0, nan],
        [1.0, nan, 0.0, nan],
    ]
)


def test_routing_accuracy_hand_checked():
    # q0 -> model 0 (1), q1 -> model 1 (1), q2 -> model 2 (0); q3 has no labels: skipped
    assert routing_accuracy(PROBS, LABELS) == pytest.approx(2 / 3)


def test_routing_ignores_unlabelled_models_and_keeps_unanswerable_queries():
    probs = np.array([[0.9, 0.9], [0.1, 0.2]])
    labels = np.array([[nan, 0.0], [1.0, 0.0]])  # q0: best labelled is model 1; q1: nobody is right
    assert routing_accuracy(probs, labels) == pytest.approx(0.5)


def test_hit_at_k():
    # top-2: q0 {0, 2} -> 1; q1 {1, 0} -> 1 (model 2 unlabelled); q2 {2, 1} -> 0
    assert hit_at_k(PROBS, LABELS, 2) == pytest.approx(2 / 3)
    assert hit_at_k(PROBS, LABELS, 1) == routing_accuracy(PROBS, LABELS)
    assert hit_at_k(PROBS, LABELS, 10) == pytest.approx(1.0)  # k beyond M: best over all labelled (q2: model 0)


def test_correctness_accuracy():
    # labelled cells: (0.9,1) ok, (0.2,0) ok, (0.6,1) ok, (0.1,0) ok, (0.8,1) ok, (0.7,0) no, (0.5,1) no, (0.9,0) no
    assert correctness_accuracy(PROBS, LABELS) == pytest.approx(5 / 8)


def test_brier_and_bce():
    p, y = np.array([[0.8, 0.4]]), np.array([[1.0, 0.0]])
    assert brier(p, y) == pytest.approx((0.2**2 + 0.4**2) / 2)
    assert bce(p, y) == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2)
    assert math.isfinite(bce(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]])))  # clipped


def test_roc_auc():
    p = np.array([[0.1, 0.4, 0.35, 0.8]])
    y = np.array([[0.0, 0.0, 1.0, 1.0]])
    assert roc_auc(p, y) == pytest.approx(0.75)
    assert roc_auc(np.array([[0.5, 0.5]]), np.array([[0.0, 1.0]])) == pytest.approx(0.5)  # ties = 1/2
    assert math.isnan(roc_auc(p, np.ones_like(p)))  # one class: undefined


def test_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="must both be"):
        routing_accuracy(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="every label is NaN"):
        brier(np.zeros((1, 2)), np.full((1, 2), nan))
