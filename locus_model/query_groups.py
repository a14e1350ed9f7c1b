"""Query groups and group profiles: what a per-benchmark table knows, served from the query text alone.

The per-benchmark rule (each benchmark's best model on its anchors) routes better than every learned router on
the real pools measured here (bench/README.md), but it reads each query's benchmark label, which live traffic
does not have. This module makes the rule label-free at query time and lets the correctness predictor use it:

- :class:`QueryGroups` -- the groups a query can belong to and a classifier that gives each query's membership
  (Q, G) from its encoding alone: a multinomial logistic regression fitted on the evaluation data's queries with
  their benchmark labels (when the data has at least two benchmarks), else on k-means clusters of the encodings
  (no labels read at all). Its weights are plain arrays, stored in the checkpoint.
- :func:`group_profiles` -- each model's accuracy per group from its own evaluations in closed form, shrunk
  toward its overall accuracy by ``smoothing`` pseudo-counts (the per-benchmark baseline's estimate): onboarding a
  model stays one forward pass plus one matrix product, no training.
- :func:`group_proba` -- P(correct | m, q) of the group table: membership-weighted profile.
- :class:`Blend` -- the router's P(correct): ``sigmoid(a * predictor_logit + b * logit(group_proba) + c)``, its
  three numbers fitted by logistic regression on the validation cells (the same cells that select LOCUS's
  epoch). On a large pool the predictor carries weight; on a pool of a few models the group table does; the fit,
  not a rule of thumb, decides, and its weights say which (``Blend.describe``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression

from locus_model.stats.logistic import PROBA_FLOOR, logit

SMOOTHING = 1.0  # pseudo-count pulling a model's group accuracy toward its overall accuracy (the per-benchmark
#   baseline's, evaluation.baselines.PerBenchmarkConfig, reads it from here); fixed: a pseudo-count estimated per pool
#   routed no better on small pools (bench/diag/README.md, group_smoothing)
CLUSTERS = 8  # k-means groups of the query encodings when the data has fewer than two benchmarks
INVERSE_REGULARIZATION = 10.0  # C of the membership classifier (L2)


@dataclass(frozen=True)
class QueryGroups:
    """The groups and the classifier that gives a query's membership from its encoding."""

    names: tuple[str, ...]  # (G,) benchmark names, or "cluster 0".. when found by k-means
    weight: np.ndarray  # (G, D) float32
    bias: np.ndarray  # (G,) float32
    labelled: bool  # True: groups are the data's benchmarks; False: k-means clusters (no labels read)
    smoothing: float
    share: np.ndarray | None = None  # (G,) each group's share of the queries the groups were fitted on (None: equal)

    def shares(self) -> np.ndarray:
        """(G,) the groups' shares of the fitted queries, summing to 1 (equal shares for a checkpoint without them)."""
        g = len(self.names)
        return np.full(g, 1.0 / g) if self.share is None else np.asarray(self.share, np.float64)

    def membership(self, encodings: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
        """(Q, G) P(group | query) from the query encodings (Q, D); a single group gives ones. ``labels`` (Q,), when
        given: a query whose label is one of the groups' names belongs to that group alone (its label is known;
        the classifier stands in for it only where it is not: "", None, or a benchmark the groups do not have)."""
        x = np.asarray(encodings, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.weight.shape[1]:
            raise ValueError(
                f"QueryGroups.membership: encodings of shape {x.shape}, expected (Q, "
                f"{self.weight.shape[1]}): encode the queries with the checkpoint's encoder"
            )
        logits = x @ self.weight.T + self.bias  # (Q, G)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
        if labels is not None and self.labelled:
            index = {name: g for g, name in enumerate(self.names)}
            rows = [(q, index[str(lab)]) for q, lab in enumerate(labels) if lab is not None and str(lab) in index]
            if rows:
                q, g = np.asarray(rows).T
                p[q] = 0.0
                p[q, g] = 1.0
        return p

    def to_dict(self) -> dict:
        """Plain data for a checkpoint (torch.save with weights_only=True reads it back)."""
        return {
            "names": list(self.names),
            "weight": self.weight.tolist(),
            "bias": self.bias.tolist(),
            "labelled": self.labelled,
            "smoothing": self.smoothing,
            "share": None if self.share is None else [float(x) for x in self.share],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "QueryGroups":
        return cls(
            names=tuple(d["names"]),
            weight=np.asarray(d["weight"], np.float32),
            bias=np.asarray(d["bias"], np.float32),
            labelled=bool(d["labelled"]),
            smoothing=float(d["smoothing"]),
            share=None if d.get("share") is None else np.asarray(d["share"], np.float64),
        )


def fit_query_groups(encodings: np.ndarray, benchmarks: np.ndarray | None = None) -> QueryGroups:
    """The query groups of these queries (encodings (Q, D); ``benchmarks`` (Q,) their labels or None): the
    benchmarks when there are at least two, else CLUSTERS k-means clusters; and the classifier from encoding to
    group, fitted on these queries."""
    x = np.asarray(encodings, dtype=np.float32)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError(f"fit_query_groups: encodings of shape {x.shape}; give one row per query")
    labels = None if benchmarks is None else np.asarray(benchmarks).astype(str)
    if labels is not None and len(labels) != len(x):
        raise ValueError(f"fit_query_groups: {len(labels)} benchmark labels for {len(x)} queries")
    labelled = False
    if labels is not None and len(np.unique(labels)) >= 2:
        labelled = True
        uniques, y = np.unique(labels, return_inverse=True)
        names = tuple(str(n) for n in uniques)
    else:
        k = max(1, min(CLUSTERS, len(x) // 8))
        y = KMeans(k, n_init=4, random_state=0).fit_predict(x) if k > 1 else np.zeros(len(x), int)
        names = tuple(f"cluster {i}" for i in range(int(y.max()) + 1))
    share = np.bincount(y, minlength=len(names)) / len(y)
    if len(names) == 1:  # nothing to tell apart: one group, membership 1
        return QueryGroups(
            names=names,
            weight=np.zeros((1, x.shape[1]), np.float32),
            bias=np.zeros(1, np.float32),
            labelled=labelled,
            smoothing=SMOOTHING,
            share=share,
        )
    clf = LogisticRegression(C=INVERSE_REGULARIZATION, max_iter=2000).fit(x, y)
    weight, bias = clf.coef_.astype(np.float32), clf.intercept_.astype(np.float32)
    if len(names) == 2:  # sklearn's binary form: one row for class 1; as a softmax, class 0 gets the zero row
        weight = np.concatenate([np.zeros_like(weight), weight])
        bias = np.concatenate([np.zeros_like(bias), bias])
    return QueryGroups(names=names, weight=weight, bias=bias, labelled=labelled, smoothing=SMOOTHING, share=share)


def group_rates(scores: np.ndarray, membership: np.ndarray, smoothing: float) -> np.ndarray:
    """(M, G) each model's accuracy per group, shrunk toward its overall accuracy:
    ``(sum_q w_qg y_mq + smoothing * overall_m) / (sum_q w_qg + smoothing)`` over the model's scored queries
    (``scores`` (M, Q), NaN = not evaluated; ``membership`` (Q, G), one-hot or soft)."""
    scores = np.asarray(scores, dtype=np.float64)
    known = ~np.isnan(scores)
    y = np.where(known, scores, 0.0)
    w = np.asarray(membership, dtype=np.float64)
    overall = y.sum(1) / np.maximum(known.sum(1), 1)  # (M,)
    hits, counts = y @ w, known.astype(np.float64) @ w  # (M, G)
    return ((hits + smoothing * overall[:, None]) / (counts + smoothing)).astype(np.float32)


def group_profiles(
    groups: QueryGroups, encodings: np.ndarray, scores: np.ndarray, labels: np.ndarray | None = None
) -> np.ndarray:
    """(M, G) the group profile of each model: its smoothed accuracy per group from its scores (M, Q) on the
    queries whose encodings (Q, D) and, where known, benchmark labels (Q,) are given (QueryGroups.membership)."""
    return group_rates(scores, groups.membership(encodings, labels), groups.smoothing)


def group_proba(profiles: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """(M, Q) P(correct) of the group table: each model's profile (M, G) weighted by the queries' membership (Q, G)."""
    return (np.asarray(profiles, np.float32) @ np.asarray(membership, np.float32).T).astype(np.float32)


@dataclass(frozen=True)
class Blend:
    """The router's P(correct) = sigmoid(predictor * logit_predictor + groups * logit(group table) + bias)."""

    predictor: float = 1.0
    groups: float = 0.0
    bias: float = 0.0

    def logits(self, predictor_logits: np.ndarray, group_p: np.ndarray) -> np.ndarray:
        return self.predictor * np.asarray(predictor_logits, np.float64) + self.groups * logit(group_p) + self.bias

    def proba(self, predictor_logits: np.ndarray, group_p: np.ndarray) -> np.ndarray:
        """(M, Q) P(correct) from the predictor's logits and the group table's P(correct), both (M, Q)."""
        return (1.0 / (1.0 + np.exp(-self.logits(predictor_logits, group_p)))).astype(np.float32)

    def describe(self) -> str:
        """Which source the router leans on, in words (for the run's metadata and `locus evaluate`)."""
        return (
            f"P(correct) = sigmoid({self.predictor:.2f} x predictor logit + {self.groups:.2f} x group-table logit "
            f"{self.bias:+.2f}), fitted on validation cells"
        )

    def to_dict(self) -> dict:
        return asdict(self)


def fit_blend(predictor_logits: np.ndarray, group_p: np.ndarray, labels: np.ndarray) -> Blend:
    """The Blend that best predicts the labelled cells (labels (M, Q), NaN = no cell; >= 0.5 = correct) from the
    predictor's logits and the group table's P(correct) on them: an unregularised 2-feature logistic regression,
    which is also the predictor's calibration (its weight and bias are a Platt scaling of the predictor's logit).
    Fewer than 20 labelled cells or one class only: the predictor alone (Blend())."""
    labels = np.asarray(labels, np.float64)
    known = ~np.isnan(labels)
    y = labels[known] >= 0.5
    if known.sum() < 20 or y.all() or not y.any():
        return Blend()
    x = np.stack([np.asarray(predictor_logits, np.float64)[known], logit(np.asarray(group_p)[known])], axis=1)
    clf = LogisticRegression(C=1e4, max_iter=1000).fit(x, y)
    return Blend(predictor=float(clf.coef_[0, 0]), groups=float(clf.coef_[0, 1]), bias=float(clf.intercept_[0]))


def fit_groups(
    encodings: np.ndarray,
    train_scores: np.ndarray,
    val_scores: np.ndarray,
    benchmarks: np.ndarray | None = None,
    *,
    smoothing: float = SMOOTHING,
) -> QueryGroups:
    """The query groups of a training: ``encodings`` (Q, D) every query the data holds; ``benchmarks`` (Q,) their
    labels, "" (or None) where a label must not be read (the test queries), or None. The classifier is fitted on
    the labelled queries; with fewer than two benchmarks, k-means on the queries with a train or validation cell
    (``train_scores`` / ``val_scores`` (M, Q), NaN outside those cells); the profiles' pseudo-count is
    ``smoothing``."""
    encodings = np.asarray(encodings, np.float32)
    labels = None if benchmarks is None else np.asarray(["" if b is None else str(b) for b in benchmarks])
    if labels is not None and len(np.unique(labels[labels != ""])) >= 2:
        known = np.flatnonzero(labels != "")
        groups = fit_query_groups(encodings[known], labels[known])
    else:
        seen = np.flatnonzero(
            ~np.isnan(np.asarray(train_scores, np.float32)).all(0)
            | ~np.isnan(np.asarray(val_scores, np.float32)).all(0)
        )
        groups = fit_query_groups(encodings[seen], None)
    return replace(groups, smoothing=float(smoothing))


__all__ = [
    "Blend",
    "CLUSTERS",
    "INVERSE_REGULARIZATION",
    "PROBA_FLOOR",
    "QueryGroups",
    "SMOOTHING",
    "fit_blend",
    "fit_groups",
    "fit_query_groups",
    "group_proba",
    "group_profiles",
    "group_rates",
    "logit",
]
