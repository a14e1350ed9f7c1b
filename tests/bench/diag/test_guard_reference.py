"""bench/diag/guard_reference.py: the router's reference (standing over the groups' shares) against the anchors' most
accurate model, on one fold."""

from __future__ import annotations

import numpy as np

from bench.diag.guard_reference import references
from locus_model.evaluation.splits import kfold_splits


def test_a_model_better_on_the_larger_group_stands_first_whatever_the_anchor_mix():
    rng = np.random.default_rng(0)
    n = 400
    bench = np.array(["big"] * 300 + ["small"] * 100)
    enc = rng.normal(size=(n, 8)).astype(np.float32) + np.where(bench == "big", 2.0, -2.0)[:, None]
    truth = np.array([[0.80, 0.30], [0.55, 0.95], [0.50, 0.50]])  # (big, small): model 0 leads on the big group
    rates = np.where(bench == "big", truth[:, :1], truth[:, 1:])
    scores = (rng.uniform(size=rates.shape) < rates).astype(np.float32)
    fold = kfold_splits(n, folds=5, budget=200, seed=0)[0]
    router, anchors = references(scores, enc, bench, fold, trained=np.array([0, 2]))
    assert router == anchors == 0  # 0.75 x 0.80 + 0.25 x 0.30 = 0.675 against 0.65 for model 1
