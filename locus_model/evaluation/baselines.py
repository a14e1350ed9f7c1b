"""The methods' common interface, and the two baselines without training: per-query kNN and the best single model.

- :class:`KNNRouter` -- per-query kNN: the k training anchor queries nearest to the test query (cosine on the
  encodings) and each model's smoothed mean score there.
- :class:`BestSingle` -- the model with the best mean score on its budget evaluations; every model predicts
  its own mean rate for every query, so routing always picks the best single model.

The latent-factor baselines (EmbedLLM's matrix factorisation, IRT) are in evaluation.latent; the oracle (any
model correct) needs the test labels and lives in the protocol (evaluation.protocol).

Interface (:class:`Baseline`): ``fit(encodings, train_scores, val_scores)`` on the in-training models
(rows of the (M, Q) score matrices, NaN = not a training cell), ``onboard(scores)`` appends held-out models
fitted from their own budget evaluations only and returns their rows, ``predict_proba(model_rows, query_idx)``
gives P(correct) (len(rows), len(query_idx)). ``n_fitted_models`` is the number of models seen by ``fit``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from locus_model.query_groups import SMOOTHING, QueryGroups, fit_groups, group_proba, group_profiles, group_rates
from locus_model.stats.metrics import brier, routing_accuracy


def check_scores(scores: np.ndarray, n_queries: int, what: str) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 2 or scores.shape[1] != n_queries:
        raise ValueError(
            f"{what} has shape {scores.shape}, expected (models, {n_queries}) with one column per query encoding; "
            "pass the score matrix aligned with the encodings (NaN where a cell is not used)"
        )
    return scores


class Baseline(ABC):
    """A correctness predictor with per-model parameters fitted from evaluations."""

    name: str = "baseline"

    def __init__(self) -> None:
        self.encodings: np.ndarray | None = None  # (Q, D) unit-norm query encodings
        self.n_fitted_models = 0  # models seen by fit(); rows >= this were onboarded

    def _require_fit(self) -> np.ndarray:
        if self.encodings is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(encodings, train_scores) first")
        return self.encodings

    @abstractmethod
    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        """Fit on the in-training models: train_scores (M, Q) NaN = not a training cell; val_scores likewise."""

    @abstractmethod
    def onboard(self, scores: np.ndarray) -> np.ndarray:
        """Add held-out models from their evaluations only (H, Q); returns their rows (H,)."""

    @abstractmethod
    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        """P(correct) for every (model row, query): (len(model_rows), len(query_idx)) float32."""


# ---------------------------------------------------------------------------------------------- non-parametric


def append_anchor_scores(method: KNNRouter | PerBenchmark | QueryGroupTable, scores: np.ndarray) -> np.ndarray:
    """Onboarding of a method that keeps every model's own anchor scores (``method.scores``): append the held-out
    models' rows; returns their row indices."""
    encodings = method._require_fit()
    scores = check_scores(scores, len(encodings), "scores")
    rows = np.arange(len(method.scores), len(method.scores) + len(scores))
    method.scores = np.concatenate([method.scores, scores])
    return rows


@dataclass(frozen=True)
class KNNConfig:
    """Per-query kNN router settings."""

    ks: tuple[int, ...] = (5, 10, 20, 50)  # candidate k; the one with the best validation routing accuracy is used
    smoothing: float = 1.0  # pseudo-count pulling a model's local mean toward its overall anchor mean


class KNNRouter(Baseline):
    """P(correct | m, q) = smoothed mean of m's scores on the k anchor queries nearest to q (cosine)."""

    name = "knn"

    def __init__(self, config: KNNConfig | None = None) -> None:
        super().__init__()
        self.config = config or KNNConfig()
        self.scores = np.zeros((0, 0), np.float32)  # (M_fitted + H, Q) each model's own anchor evaluations
        self.k = self.config.ks[0]

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        self.encodings = np.asarray(encodings, dtype=np.float32)
        self.scores = check_scores(train_scores, len(self.encodings), "train_scores").copy()
        self.n_fitted_models = len(self.scores)
        self.k = self.config.ks[0]
        if val_scores is None:
            return
        val_scores = check_scores(val_scores, len(self.encodings), "val_scores")
        val_q = np.flatnonzero(~np.isnan(val_scores).all(axis=0))
        if len(val_q) == 0:
            return

        rows = np.arange(self.n_fitted_models)
        best: tuple[tuple[float, float], int] | None = None
        for k in self.config.ks:
            self.k = k
            probs = self.predict_proba(rows, val_q)
            key = (routing_accuracy(probs, val_scores[:, val_q]), -brier(probs, val_scores[:, val_q]))
            if best is None or key > best[0]:
                best = (key, k)
        assert best is not None  # ks is not empty: the constructor read ks[0]
        self.k = best[1]

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        return append_anchor_scores(self, scores)

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        encodings = self._require_fit()
        anchors = np.flatnonzero(~np.isnan(self.scores[: self.n_fitted_models]).all(axis=0))  # (A,) training anchors
        scores = self.scores[np.asarray(model_rows, dtype=np.int64)][:, anchors]  # (M, A)
        known = ~np.isnan(scores)
        y = np.nan_to_num(scores)
        overall = y.sum(1) / np.maximum(known.sum(1), 1)  # (M,) each model's anchor mean rate
        sim = encodings[np.asarray(query_idx, dtype=np.int64)] @ encodings[anchors].T  # (Qt, A) cosine
        k = min(self.k, len(anchors))
        nearest = np.argpartition(-sim, k - 1, axis=1)[:, :k]  # (Qt, k)
        hits = y[:, nearest].sum(-1)  # (M, Qt)
        counts = known[:, nearest].sum(-1)  # (M, Qt)
        alpha = self.config.smoothing
        return ((hits + alpha * overall[:, None]) / (counts + alpha)).astype(np.float32)


class BestSingle(Baseline):
    """Every model predicts its mean rate on its budget evaluations; routing picks the best single model."""

    name = "best_single"

    def __init__(self) -> None:
        super().__init__()
        self.rates = np.zeros(0, np.float32)  # (M_fitted + H,)

    @staticmethod
    def _rates(scores: np.ndarray) -> np.ndarray:
        known = ~np.isnan(scores)
        if (known.sum(1) == 0).any():
            raise ValueError(
                f"{int((known.sum(1) == 0).sum())} model(s) have no evaluations to compute a mean rate from; "
                "give every model at least one budget evaluation (raise the budget or drop those models)"
            )
        return (np.nan_to_num(scores).sum(1) / known.sum(1)).astype(np.float32)

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        self.encodings = np.asarray(encodings, dtype=np.float32)
        self.rates = self._rates(check_scores(train_scores, len(self.encodings), "train_scores"))
        self.n_fitted_models = len(self.rates)

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        encodings = self._require_fit()
        rows = np.arange(len(self.rates), len(self.rates) + len(scores))
        self.rates = np.concatenate([self.rates, self._rates(check_scores(scores, len(encodings), "scores"))])
        return rows

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        self._require_fit()
        rates = self.rates[np.asarray(model_rows, dtype=np.int64)]
        return np.repeat(rates[:, None], len(query_idx), axis=1).astype(np.float32)

    def best_row(self, model_rows: np.ndarray) -> int:
        """The row among ``model_rows`` with the highest mean rate (the first on ties)."""
        model_rows = np.asarray(model_rows, dtype=np.int64)
        return int(model_rows[np.argmax(self.rates[model_rows])])


@dataclass(frozen=True)
class PerBenchmarkConfig:
    """The per-benchmark rule: it reads each query's benchmark label (which LOCUS never does)."""

    benchmarks: tuple[str, ...] = ()  # (Q,) each query's benchmark, aligned with the encodings
    smoothing: float = SMOOTHING  # pseudo-count pulling a model's benchmark mean toward its overall anchor mean


class PerBenchmark(Baseline):
    """P(correct | m, q) = m's smoothed mean score on its anchors of q's benchmark: routing picks, for each
    benchmark, the model best on that benchmark's anchors (the simple rule a user tries first)."""

    name = "per_benchmark"

    def __init__(self, config: PerBenchmarkConfig | None = None) -> None:
        super().__init__()
        self.config = config or PerBenchmarkConfig()
        self.scores = np.zeros((0, 0), np.float32)  # (M_fitted + H, Q) each model's own anchor evaluations
        self.labels = np.zeros(0, np.int64)  # (Q,) benchmark index per query

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        self.encodings = np.asarray(encodings, dtype=np.float32)
        if len(self.config.benchmarks) != len(self.encodings):
            raise ValueError(
                f"PerBenchmark: {len(self.config.benchmarks)} benchmark labels for {len(self.encodings)} queries; "
                "give PerBenchmarkConfig(benchmarks=...) one label per query, in the encodings' order"
            )
        self.labels = np.unique(np.asarray(self.config.benchmarks).astype(str), return_inverse=True)[1].ravel()
        self.scores = check_scores(train_scores, len(self.encodings), "train_scores").copy()
        self.n_fitted_models = len(self.scores)

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        return append_anchor_scores(self, scores)

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        self._require_fit()
        onehot = np.eye(self.labels.max() + 1, dtype=np.float32)[self.labels]  # (Q, B)
        rate = group_rates(self.scores[np.asarray(model_rows, dtype=np.int64)], onehot, self.config.smoothing)  # (M, B)
        return rate[:, self.labels[np.asarray(query_idx, dtype=np.int64)]].astype(np.float32)


class QueryGroupTable(Baseline):
    """The per-benchmark rule without reading a query's label: each query's group membership is predicted from its
    encoding (locus_model.query_groups: a classifier of the training queries' benchmarks, or k-means
    clusters when the data has none), P(correct | m, q) = m's group profile weighted by q's membership. The same
    groups and profiles are the group half of LOCUS's router (LocusMethod)."""

    name = "query_groups"

    def __init__(self, benchmarks: np.ndarray | None = None) -> None:
        super().__init__()
        self.benchmarks = benchmarks  # (Q,) labels, "" where one must not be read (test queries), or None
        self.scores = np.zeros((0, 0), np.float32)
        self.groups: QueryGroups | None = None  # set by fit, with the encodings

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        self.encodings = np.asarray(encodings, dtype=np.float32)
        self.scores = check_scores(train_scores, len(self.encodings), "train_scores").copy()
        self.n_fitted_models = len(self.scores)
        self.groups = fit_groups(self.encodings, self.scores, np.full_like(self.scores, np.nan), self.benchmarks)

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        return append_anchor_scores(self, scores)

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        encodings = self._require_fit()
        assert self.groups is not None  # fit sets the groups with the encodings
        profiles = group_profiles(
            self.groups, encodings, self.scores[np.asarray(model_rows, dtype=np.int64)], self.benchmarks
        )
        return group_proba(profiles, self.groups.membership(encodings[np.asarray(query_idx, dtype=np.int64)]))
