"""Paired bootstrap statistics: is one method's routing (or correctness, AUC, Brier) better than another's
on the same test queries, or are they tied at this level."""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

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
        raise ValueError(
            f"paired_bootstrap: a {a.shape} and b {b.shape} must be 1-D of equal length (one entry per query)"
        )
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
    return {
        "diff": float(d.mean()),
        "ci_low": float(np.quantile(means, tail)),
        "ci_high": float(np.quantile(means, 1 - tail)),
    }


class QueryStats(NamedTuple):
    """Per-query sufficient statistics of (M, Q) probs against labels: every metric of a query-resampled copy
    of the data is a (bi)linear function of the query multiplicities, so B resamples cost O(B Q^2), not O(B M Q)."""

    routed: np.ndarray  # (Q,) label of the routed model, NaN where no model is labelled
    n_known: np.ndarray  # (Q,) labelled cells
    agree: np.ndarray  # (Q,) labelled cells with (prob > 0.5) == label
    sq_err: np.ndarray  # (Q,) summed squared error over labelled cells
    n_pos: np.ndarray  # (Q,) positive labelled cells
    n_neg: np.ndarray  # (Q,) negative labelled cells
    pairs: np.ndarray  # (Q, Q) [q, q']: positive cells of q scored above negative cells of q' (ties count 1/2)


def query_stats(probs: np.ndarray, labels: np.ndarray, route: np.ndarray | None = None) -> QueryStats:
    """The QueryStats of (M, Q) probs and labels (NaN = not labelled); the routed model is the highest of ``route``
    (M, Q) when given (routing scores), else of probs."""
    probs, labels = np.asarray(probs, np.float64), np.asarray(labels, np.float64)
    n_q = labels.shape[1]
    known = ~np.isnan(labels)
    rows, cols = np.nonzero(known)
    score, pos = probs[rows, cols], labels[rows, cols] >= 0.5
    _, rank = np.unique(score, return_inverse=True)  # equal scores share one rank
    rank = rank.reshape(-1)
    by_rank = np.argsort(rank[pos], kind="stable")  # sorted needles: searchsorted walks the arrays in order
    pos_rank, pos_col = rank[pos][by_rank], cols[pos][by_rank]
    order = np.lexsort((rank[~pos], cols[~pos]))  # negatives by query, then by score
    neg_rank, neg_col = rank[~pos][order], cols[~pos][order]
    bounds = np.searchsorted(neg_col, np.arange(n_q + 1))
    pairs = np.zeros((n_q, n_q))
    for q in range(n_q):  # Mann-Whitney counts against query q's negatives, summed by the positive's query
        neg = neg_rank[bounds[q] : bounds[q + 1]]
        if len(neg) and len(pos_rank):
            below = np.searchsorted(neg, pos_rank, "left") + np.searchsorted(neg, pos_rank, "right")
            pairs[:, q] = np.bincount(pos_col, weights=0.5 * below, minlength=n_q)
    return QueryStats(
        routed=routing_outcomes(probs if route is None else np.asarray(route, np.float64), labels),
        n_known=known.sum(axis=0).astype(np.float64),
        agree=np.where(known, (probs > 0.5) == (labels >= 0.5), False).sum(axis=0).astype(np.float64),
        sq_err=np.where(known, (probs - np.nan_to_num(labels)) ** 2, 0.0).sum(axis=0),
        n_pos=np.bincount(pos_col, minlength=n_q).astype(np.float64),
        n_neg=np.bincount(cols[~pos], minlength=n_q).astype(np.float64),
        pairs=pairs,
    )


def stats_draws(stats: QueryStats, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Routing, correctness accuracy, Brier and AUC on B query-resampled copies: weights (B, Q) multiplicities of
    the queries (a row of ones is the data as it is). Returns {metric: (B,)}; each value equals the metric of
    score_predictions on the data with every query column repeated weights[b, q] times (AUC: Mann-Whitney, ties
    counting one half)."""
    weights = np.asarray(weights, np.float64)
    has = ~np.isnan(stats.routed)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = (weights @ stats.n_pos) * (weights @ stats.n_neg)
        auc = np.where(total > 0, ((weights @ stats.pairs) * weights).sum(axis=1) / total, np.nan)
        return {
            "routing_acc": weights[:, has] @ stats.routed[has] / weights[:, has].sum(axis=1),
            "correctness_acc": weights @ stats.agree / (weights @ stats.n_known),
            "brier": weights @ stats.sq_err / (weights @ stats.n_known),
            "auc": auc,
        }


def resample_weights(rng: np.random.Generator, n_q: int, size: int) -> np.ndarray:  # (size, n_q)
    """Multiplicities of ``n_q`` queries in ``size`` resamples drawn with replacement: the one way every paired
    interval here (bootstrap_comparisons, locus_model.routing.frontier) draws its resamples, so that the same
    seed gives the same resamples."""
    return np.stack([np.bincount(row, minlength=n_q) for row in rng.integers(0, n_q, size=(size, n_q))])


class Resampled(NamedTuple):
    """Every method's metrics on the data as it is and on the same query resamples (bootstrap_draws)."""

    point: dict[str, dict[str, float]]  # {method: {metric: the mean over strata of the metric}}
    draws: dict[str, dict[str, np.ndarray]]  # {method: {metric: (n_boot,) the mean over strata on each resample}}
    level: float

    def compare(self, a: str, b: str) -> dict[str, dict]:
        """Method ``a``'s metric minus method ``b``'s, {metric: {"diff", "ci_low", "ci_high"}} (percentile interval
        of the paired differences over the shared resamples; None where undefined)."""
        tail, out = (1 - self.level) / 2, {}
        for metric in self.draws[a]:
            diff = self.point[a][metric] - self.point[b][metric]
            d = self.draws[a][metric] - self.draws[b][metric]
            d = d[~np.isnan(d)]
            out[metric] = (
                {"diff": None, "ci_low": None, "ci_high": None}
                if len(d) == 0 or np.isnan(diff)
                else {
                    "diff": float(diff),
                    "ci_low": float(np.quantile(d, tail)),
                    "ci_high": float(np.quantile(d, 1 - tail)),
                }
            )
        return out


def bootstrap_draws(
    probs: Mapping[str, Sequence[np.ndarray]],
    labels: Sequence[np.ndarray],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    route: Mapping[str, Sequence[np.ndarray]] | None = None,
) -> Resampled:
    """Every method's routing_acc, correctness_acc, auc and brier on the data and on ``n_boot`` resamples of it.

    probs: {method: one (M, Q_k) array per stratum (fold)}; labels: the (M, Q_k) labels of each stratum. A
    method's metric is the mean over strata of its metric in each stratum (the protocol's mean over folds); a
    resample draws each stratum's queries (columns) with replacement, and every method is scored on the same
    resamples, so that any two methods compare pairwise (Resampled.compare) from one set of draws. ``route``:
    {method: per stratum (M, Q_k) routing scores} for the methods that route by something else than P(correct)."""
    labels = [np.asarray(y) for y in labels]
    bad = {
        name: [np.shape(p) for p in ps]
        for name, ps in probs.items()
        if len(ps) != len(labels) or any(np.shape(p) != y.shape for p, y in zip(ps, labels))
    }
    if bad or not labels or any(y.ndim != 2 for y in labels):
        raise ValueError(
            f"bootstrap_draws: probs must give one array per stratum of the same (M, Q) shape as its "
            f"labels {[y.shape for y in labels]}; mismatched: {bad}"
        )
    rng = np.random.default_rng(seed)
    route = route or {}
    stats = {
        name: [query_stats(p, y, r) for p, y, r in zip(ps, labels, route.get(name, [None] * len(labels)))]
        for name, ps in probs.items()
    }
    point = {
        name: {
            k: float(np.mean([stats_draws(s, np.ones((1, len(s.routed))))[k][0] for s in ss]))
            for k in ("routing_acc", "correctness_acc", "brier", "auc")
        }
        for name, ss in stats.items()
    }
    draws: dict[str, dict[str, list[np.ndarray]]] = {name: {k: [] for k in point[name]} for name in probs}
    for start in range(0, n_boot, 256):  # chunks bound memory at (256, Q_k)
        size = min(n_boot, start + 256) - start
        per_stratum: dict[str, list[dict[str, np.ndarray]]] = {name: [] for name in probs}
        for k, y in enumerate(labels):
            weights = resample_weights(rng, y.shape[1], size)
            for name, ss in stats.items():
                per_stratum[name].append(stats_draws(ss[k], weights))
        for name, strata in per_stratum.items():
            for metric in draws[name]:
                draws[name][metric].append(np.mean([d[metric] for d in strata], axis=0))
    return Resampled(point, {name: {k: np.concatenate(v) for k, v in ms.items()} for name, ms in draws.items()}, level)


def bootstrap_comparisons(
    probs: Mapping[str, Sequence[np.ndarray]],
    labels: Sequence[np.ndarray],
    *,
    against: str,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, dict[str, dict]]:
    """Metric of method ``against`` minus metric of each other method, with percentile bootstrap intervals
    (bootstrap_draws, then Resampled.compare): {other: {metric: {"diff", "ci_low", "ci_high"}}} for routing_acc,
    correctness_acc, auc and brier (lower is better: a negative diff favours ``against``); "diff" is the difference
    of the means over strata. An interval that covers 0 is a tie at this level."""
    if against not in probs:
        raise ValueError(f"bootstrap_comparisons: probs must include {against!r}; it has {sorted(probs)}")
    resampled = bootstrap_draws(probs, labels, n_boot=n_boot, seed=seed, level=level)
    return {other: resampled.compare(against, other) for other in probs if other != against}
