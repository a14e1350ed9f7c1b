"""The methods the protocol compares, behind one interface (evaluation.baselines.Baseline): LOCUS's router (the
adapter below) and the baselines (EmbedLLM's matrix factorization, IRT, kNN, the per-benchmark rule, its label-free
form over query groups, best single model)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, NamedTuple

import numpy as np

from locus_model.evaluation.baselines import Baseline, BestSingle, KNNRouter, PerBenchmark, QueryGroupTable
from locus_model.evaluation.latent import IRT, MatrixFactorization
from locus_model.evaluation.splits import Fold
from locus_model.model_config import LocusConfig
from locus_model.router import PoolScorer, Router
from locus_model.routing.policy import DEFAULT_GUARD, guard_margins, routing_scores
from locus_model.training import TrainConfig, TrainResult, train_locus

METHODS = ("locus", "embedllm_mf", "irt", "knn", "query_groups", "per_benchmark", "best_single", "oracle")
BASELINES: dict[str, type[Baseline]] = {
    cls.name: cls for cls in (MatrixFactorization, IRT, KNNRouter, QueryGroupTable, PerBenchmark, BestSingle)
}


class LocusMethod(Baseline):
    """LOCUS's router behind the baseline interface: fit = train_locus on the in-training models' anchor evaluations
    (it returns the trained router: set encoder, correctness predictor, query groups, blend), or, given a trained
    ``router``, no training at all; either way the in-training models become pool rows (Router.pool_rows: one forward
    pass of the set encoder, the group profile in closed form) and a PoolScorer scores them; onboard = the same for
    held-out models; nothing is refitted."""

    name = "locus"

    def __init__(
        self,
        *,
        model_config: Any = None,
        train_config: Any = None,
        progress: bool = False,
        router: Router | None = None,
        benchmarks: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        self.model_config, self.train_config, self.progress = model_config, train_config, progress
        self.router = router  # given: used as it is; else the one fit trains
        self.benchmarks = benchmarks  # (Q,) query labels for the query groups, "" where unread (test), or None
        self.scorer: PoolScorer | None = None  # the in-training models' rows, then the onboarded ones
        self.train_result: TrainResult | None = None

    def _device(self) -> str:
        return getattr(self.train_config, "device", "cpu") if self.train_config is not None else "cpu"

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        self.encodings = np.asarray(encodings, dtype=np.float32)
        train_scores = np.asarray(train_scores, np.float32)
        if self.router is None:
            model_config = self.model_config or LocusConfig(query_dim=self.encodings.shape[1])
            if model_config.query_dim != self.encodings.shape[1]:
                raise ValueError(
                    f"LocusConfig.query_dim={model_config.query_dim} but the query encodings are "
                    f"{self.encodings.shape[1]}-d; build the config with query_dim equal to the encoder's width "
                    "(384 MiniLM, 768 mpnet)"
                )
            if val_scores is None:
                val_scores = np.full_like(train_scores, np.nan)
            self.train_result = train_locus(
                self.encodings,
                train_scores,
                val_scores,
                model_config=model_config,
                benchmarks=self.benchmarks,
                train_config=self.train_config or TrainConfig(),
                progress=self.progress,
            )
            self.router = self.train_result.router
        elif self.router.model.config.query_dim != self.encodings.shape[1]:
            raise ValueError(
                f"the trained LOCUS takes {self.router.model.config.query_dim}-d query encodings, these "
                f"are {self.encodings.shape[1]}-d: encode the queries with the checkpoint's encoder"
            )
        self.n_fitted_models = len(train_scores)
        rows = self.router.pool_rows(self.encodings, train_scores, self.benchmarks, device=self._device())
        if self.router.noise is None and val_scores is not None:  # a router kept from before its noise was measured
            self.router = self.router.with_noise(self.encodings, val_scores, *rows)
        self.scorer = self.router.scorer(rows, device=self._device())

    def _fitted(self) -> tuple[np.ndarray, Router, PoolScorer]:
        """(encodings, router, scorer) once fitted (a RuntimeError before)."""
        encodings = self._require_fit()
        assert self.router is not None and self.scorer is not None  # fit sets both with the encodings
        return encodings, self.router, self.scorer

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        encodings, router, scorer = self._fitted()
        rows = np.arange(len(scorer.names), len(scorer.names) + len(scores))
        if len(scores):
            self.scorer = scorer.extended(*router.pool_rows(encodings, scores, self.benchmarks, device=self._device()))
        return rows

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        encodings, _, scorer = self._fitted()
        return scorer.proba(encodings[np.asarray(query_idx)], np.asarray(model_rows))

    def standing(self, model_rows: np.ndarray) -> np.ndarray:
        """(len(model_rows),) the standing of these rows (fitted models first, then the onboarded: onboard's rows),
        what the guard leans toward."""
        _, _, scorer = self._fitted()
        return scorer.standing[np.asarray(model_rows)]


class Fitted(NamedTuple):
    """One method's result on one fold: test P(correct) (M, Q_test), seconds, and the guard its routing applies:
    the M models' standing and the margin (LOCUS's; None for a method that routes by its P(correct) alone)."""

    probs: np.ndarray
    seconds: float
    standing: np.ndarray | None = None
    guard_margin: float | np.ndarray = 0.0  # one, or (Q_test,) per test query (the measured guard)

    def routing_scores(self, rows: np.ndarray | None = None, known: np.ndarray | None = None) -> np.ndarray:
        """What ranks the models ``rows`` (all when None) on the test queries: policy.routing_scores, the guard's
        incumbent per query the highest standing among the rows ``known`` (rows x Q_test) marks (all)."""
        rows = np.arange(len(self.probs)) if rows is None else np.asarray(rows)
        standing = None if self.standing is None else self.standing[rows]
        return routing_scores(np.asarray(self.probs, np.float64)[rows], standing, self.guard_margin, known)


def make_method(
    name: str,
    *,
    seed: int,
    model_config: Any = None,
    train_config: Any = None,
    baseline_config: Any = None,
    progress: bool = False,
    router: Router | None = None,
    benchmarks: np.ndarray | None = None,
) -> Baseline:
    """A fresh, unfitted method by its result-table name (everything in METHODS except the oracle).

    baseline_config: LatentConfig for embedllm_mf / irt (its seed is replaced by ``seed``), KNNConfig for knn,
    PerBenchmarkConfig for per_benchmark (its benchmark labels; the protocol gives them).
    router: a trained Router that "locus" uses as it is (no training).
    benchmarks: (Q,) the query labels that "locus" and "query_groups" may read to fit their query groups ("" for
    a query whose label must not be read)."""
    if name == "locus":
        return LocusMethod(
            model_config=model_config,
            train_config=train_config,
            progress=progress,
            router=router,
            benchmarks=benchmarks,
        )
    if name == "query_groups":
        return QueryGroupTable(benchmarks)
    if name in ("embedllm_mf", "irt"):
        latent_class = MatrixFactorization if name == MatrixFactorization.name else IRT
        latent = latent_class(baseline_config) if baseline_config is not None else latent_class()
        latent.config = replace(latent.config, seed=seed)
        return latent
    if name == "knn":
        return KNNRouter(baseline_config)
    if name == "per_benchmark":
        return PerBenchmark(baseline_config)
    if name in BASELINES:
        return BASELINES[name]()
    raise ValueError(f"unknown method {name!r}; choose from {list(METHODS)}")


def fit_and_predict(
    *,
    name: str,
    seed: int,
    scores: np.ndarray,  # (M, Q) all scores, NaN = no cell
    encodings: np.ndarray,  # (Q, D)
    fold: Fold,
    trained: np.ndarray,  # model rows trained on
    held: np.ndarray,  # model rows onboarded from their anchor evaluations only
    model_config: Any = None,
    train_config: Any = None,
    baseline_config: Any = None,
    progress: bool = False,
    router: Router | None = None,
    on_fitted: Callable[[Any], None] | None = None,
    benchmarks: np.ndarray | None = None,  # (Q,) query labels, or None
    guard_margin: float | str = DEFAULT_GUARD,  # LOCUS's guard (routing.policy.guard_margins: a margin or "measured")
) -> Fitted:
    """One method on one fold: fit on the trained models' anchor cells (validation: the fold's val cells),
    onboard the held-out models from their anchor cells, score every test query; Fitted((M, Q_test) P(correct),
    seconds, LOCUS's guard over the M models). A module-level function so that evaluate(jobs > 1) can run it in a worker
    process.
    ``on_fitted(method)``: called once the method is fitted (e.g. to keep its trained model). ``benchmarks``:
    the query labels; the test queries' labels are blanked before a label-free method sees them."""
    t0 = time.perf_counter()
    budget_scores, val_scores = fold.budget_and_val(scores)
    labels = None
    if benchmarks is not None:
        labels = np.asarray(benchmarks).astype(str).astype(object)
        labels[np.asarray(fold.test)] = ""
    method = make_method(
        name,
        seed=seed,
        model_config=model_config,
        train_config=train_config,
        baseline_config=baseline_config,
        progress=progress,
        router=router,
        benchmarks=labels,
    )
    method.fit(encodings, budget_scores[trained], val_scores[trained])
    if on_fitted is not None:
        on_fitted(method)
    held_rows = method.onboard(budget_scores[held])
    probs = np.empty((len(scores), len(fold.test)), dtype=np.float32)
    probs[trained] = method.predict_proba(np.arange(len(trained)), fold.test)
    if len(held):
        probs[held] = method.predict_proba(held_rows, fold.test)
    if isinstance(method, LocusMethod):  # its rows in the matrix's order: the fitted ones, then the onboarded
        order = np.empty(len(scores), np.int64)
        order[trained], order[held] = np.arange(len(trained)), held_rows
        assert method.router is not None  # fitted above
        margin = guard_margins(guard_margin, method.router.query_noise(np.asarray(encodings)[np.asarray(fold.test)]))
        return Fitted(probs, time.perf_counter() - t0, method.standing(order), margin)
    return Fitted(probs, time.perf_counter() - t0)
