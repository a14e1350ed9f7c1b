"""Paired bootstrap statistics: is one method's routing (or correctness, AUC, Brier) better than another's
on the same test queries, or are they tied at this level."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def routing_outcomes(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per query (Q,): the label of the highest-prob labelled model (first on ties), NaN if none is labelled.

    Its nanmean equals metrics.routing_accuracy(probs, labels)."""
    known = ~np.isnan(labels)
    pick = np.argmax(np.where(known, probs, -np.inf), axis=0)  # (Q,)
    out = labels[pick, np.arange(labels.shape[1])].astype(np.float64)
    out[~known.any(axis=0)] = np.nan
    return out


def paired_bootstrap(a: np.ndarray, b: np.ndarray, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """Mean of a - b over paired items and a percentile bootstrap interval (items resampled with replacement).

    a, b: (n,) per-query outcomes of two methods on the same queries; pairs with a NaN are dropped.
    An interval that covers 0 means the two are tied at this level."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired_bootstrap: a {a.shape} and b {b.shape} must be 1-D of equal length (one entry per query)")
    keep = ~(np.isnan(a) | np.isnan(b))
    d = a[keep] - b[keep]
    if len(d) == 0:
        return {"diff": None, "ci_low": None, "ci_high": None}
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, 256):  # chunks bound memory at (256, n)
        stop = min(n_boot, start + 256)
        means[start:stop] = d[rng.integers(0, len(d), size=(stop - start, len(d)))].mean(axis=1)
    tail = (1 - level) / 2
    return {"diff": float(d.mean()), "ci_low": float(np.quantile(means, tail)), "ci_high": float(np.quantile(means, 1 - tail))}


def bootstrap_draws(probs: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Routing, correctness accuracy, Brier and AUC of (M, Q) probs on query-resampled copies of the data.

    weights: (B, Q) multiplicities of the queries in B bootstrap resamples (a row of ones is the data as
    it is). Returns {metric: (B,)}; each value equals the metric of score_predictions on the data with every
    query column repeated weights[b, q] times (AUC: Mann-Whitney with ties counting one half)."""
    probs, labels = np.asarray(probs, np.float64), np.asarray(labels, np.float64)
    weights = np.asarray(weights, np.float64)
    known = ~np.isnan(labels)
    routed = routing_outcomes(probs, labels)  # (Q,), NaN where no model is labelled
    has = ~np.isnan(routed)
    n_known = known.sum(axis=0)  # (Q,)
    agree = np.where(known, (probs > 0.5) == (labels >= 0.5), False).sum(axis=0)
    sq_err = np.where(known, (probs - np.nan_to_num(labels)) ** 2, 0.0).sum(axis=0)
    out = {
        "routing_acc": weights[:, has] @ routed[has] / weights[:, has].sum(axis=1),
        "correctness_acc": weights @ agree / (weights @ n_known),
        "brier": weights @ sq_err / (weights @ n_known),
    }
    # AUC: sort the labelled cells once; a resample only reweights them (cell weight = its query's multiplicity)
    rows, cols = np.nonzero(known)
    p, pos = probs[rows, cols], labels[rows, cols] >= 0.5
    _, tie_group = np.unique(p, return_inverse=True)  # ascending score groups; equal scores share one
    n_groups = int(tie_group.max()) + 1 if len(p) else 0
    auc = np.full(len(weights), np.nan)
    for b, w_query in enumerate(weights):
        w = w_query[cols]
        w_pos = np.bincount(tie_group, weights=w * pos, minlength=n_groups)
        w_neg = np.bincount(tie_group, weights=w * ~pos, minlength=n_groups)
        total = w_pos.sum() * w_neg.sum()
        if total > 0:
            below = np.cumsum(w_neg) - w_neg  # negative weight strictly below each score group
            auc[b] = float((w_pos * (below + 0.5 * w_neg)).sum() / total)
    out["auc"] = auc
    return out


def bootstrap_comparisons(
    probs: Mapping[str, Sequence[np.ndarray]], labels: Sequence[np.ndarray], *, against: str, n_boot: int = 2000,
    seed: int = 0, level: float = 0.95,
) -> dict[str, dict[str, dict]]:
    """Metric of method ``against`` minus metric of each other method, with percentile bootstrap intervals.

    probs: {method: one (M, Q_k) array per stratum (fold)}; labels: the (M, Q_k) labels of each stratum. A
    method's metric is the mean over strata of its metric in each stratum (the harness's mean over folds), so
    "diff" is the difference of the reported means; a resample draws each stratum's queries (columns) with
    replacement, and every method is scored on the same resamples. Returns {other: {metric: {"diff",
    "ci_low", "ci_high"}}} for routing_acc, correctness_acc, auc and brier (lower is better: a negative diff
    favours ``against``). An interval that covers 0 is a tie at this level."""
    labels = [np.asarray(y) for y in labels]
    bad = {name: [np.shape(p) for p in ps] for name, ps in probs.items()
           if len(ps) != len(labels) or any(np.shape(p) != y.shape for p, y in zip(ps, labels))}
    if against not in probs or bad or not labels or any(y.ndim != 2 for y in labels):
        raise ValueError(f"bootstrap_comparisons: probs must include {against!r} and give one array per stratum of the "
                         f"same (M, Q) shape as its labels {[y.shape for y in labels]}; mismatched: {bad}")
    rng = np.random.default_rng(seed)
    point = {name: [bootstrap_draws(p, y, np.ones((1, y.shape[1]))) for p, y in zip(ps, labels)]
             for name, ps in probs.items()}
    draws: dict[str, dict[str, list[np.ndarray]]] = {name: {k: [] for k in point[name][0]} for name in probs}
    for start in range(0, n_boot, 256):  # chunks bound memory at (256, Q_k)
        size = min(n_boot, start + 256) - start
        per_stratum = {name: [] for name in probs}
        for k, y in enumerate(labels):
            n_q = y.shape[1]
            weights = np.stack([np.bincount(row, minlength=n_q) for row in rng.integers(0, n_q, size=(size, n_q))])
            for name, ps in probs.items():
                per_stratum[name].append(bootstrap_draws(ps[k], y, weights))
        for name, strata in per_stratum.items():
            for metric in draws[name]:
                draws[name][metric].append(np.mean([d[metric] for d in strata], axis=0))
    tail = (1 - level) / 2
    result: dict[str, dict[str, dict]] = {}
    for other in probs:
        if other == against:
            continue
        result[other] = {}
        for metric in draws[against]:
            diff = np.mean([d[metric][0] for d in point[against]]) - np.mean([d[metric][0] for d in point[other]])
            d = np.concatenate(draws[against][metric]) - np.concatenate(draws[other][metric])
            d = d[~np.isnan(d)]
            result[other][metric] = (
                {"diff": None, "ci_low": None, "ci_high": None} if len(d) == 0 or np.isnan(diff)
                else {"diff": float(diff), "ci_low": float(np.quantile(d, tail)), "ci_high": float(np.quantile(d, 1 - tail))}
            )
    return result


def paired_bootstrap_metrics(
    probs_a: np.ndarray, probs_b: np.ndarray, labels: np.ndarray, *, n_boot: int = 2000, seed: int = 0,
    level: float = 0.95,
) -> dict[str, dict]:
    """Metric of a minus metric of b on the same (M, Q) labels: bootstrap_comparisons for one pair."""
    return bootstrap_comparisons({"a": [probs_a], "b": [probs_b]}, [labels], against="a", n_boot=n_boot, seed=seed,
                                 level=level)["b"]
