"""The methods the protocol compares, behind one interface (evaluation.baselines.Baseline): LOCUS's router (the
adapter below) and the baselines (EmbedLLM's matrix factorization, IRT, kNN, the per-benchmark rule, its label-free
form over query groups, best single model)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from locus_model.evaluation.baselines import Baseline, BestSingle, KNNRouter, PerBenchmark, QueryGroupTable
from locus_model.evaluation.latent import IRT, MatrixFactorization
from locus_model.evaluation.splits import Fold

METHODS = ("locus", "embedllm_mf", "irt", "knn", "query_groups", "per_benchmark", "best_single", "oracle")
BASELINES: dict[str, type[Baseline]] = {cls.name: cls for cls in (MatrixFactorization, IRT, KNNRouter, QueryGroupTable, PerBenchmark, BestSingle)}


class LocusMethod(Baseline):
    """LOCUS's router behind the baseline interface: fit = train_locus on the in-training models' anchor evaluations
    (or, given a trained ``model``, no training at all: the in-training models are embedded by it too), then its
    GroupRouter (locus_model.routing.query_groups: query groups, each model's group profile, the blend with the
    predictor fitted on the validation cells); onboard = one forward pass of the set encoder
    (embed_evaluation_sets) and the model's group profile in closed form; nothing is refitted."""

    name = "locus"

    def __init__(self, *, model_config: Any = None, train_config: Any = None, progress: bool = False,
                 model: Any = None, benchmarks: np.ndarray | None = None) -> None:
        super().__init__()
        self.model_config, self.train_config, self.progress = model_config, train_config, progress
        self.model = model
        self.pretrained = model is not None
        self.benchmarks = benchmarks  # (Q,) query labels for the query groups, "" where unread (test), or None
        self.embeddings = np.zeros((0, 0), np.float32)  # (M_fitted + H, d)
        self.profiles = np.zeros((0, 0), np.float32)  # (M_fitted + H, G) group profiles
        self.router = None  # GroupRouter
        self.train_result = None

    def _sets(self, scores: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        sets = []
        for row in scores:
            idx = np.flatnonzero(~np.isnan(row))
            sets.append((idx, row[idx]))
        return sets

    def _device(self) -> str:
        return getattr(self.train_config, "device", "cpu") if self.train_config is not None else "cpu"

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        from locus_model.model import LocusConfig
        from locus_model.training import TrainConfig, train_locus

        self.encodings = np.asarray(encodings, dtype=np.float32)
        if self.pretrained:
            if self.model.config.query_dim != self.encodings.shape[1]:
                raise ValueError(f"the trained LOCUS takes {self.model.config.query_dim}-d query encodings, these are "
                                 f"{self.encodings.shape[1]}-d: encode the queries with the checkpoint's encoder")
            self._fit_router(train_scores, val_scores)
            return
        model_config = self.model_config or LocusConfig(query_dim=self.encodings.shape[1])
        if model_config.query_dim != self.encodings.shape[1]:
            raise ValueError(
                f"LocusConfig.query_dim={model_config.query_dim} but the query encodings are {self.encodings.shape[1]}-d; "
                "build the config with query_dim equal to the encoder's width (384 MiniLM, 768 mpnet)"
            )
        if val_scores is None:
            val_scores = np.full_like(train_scores, np.nan)
        self.train_result = train_locus(
            self.encodings, train_scores, val_scores, model_config=model_config,
            train_config=self.train_config or TrainConfig(), on_epoch=None, progress=self.progress,
        )
        self.model = self.train_result.model
        self._fit_router(train_scores, val_scores)

    def _fit_router(self, train_scores: np.ndarray, val_scores: np.ndarray | None) -> None:
        """Embed the in-training models from their train cells and fit the GroupRouter (its blend on the validation
        cells: the predictor alone when there are none)."""
        from locus_model.routing.query_groups import fit_locus_router

        train_scores = np.asarray(train_scores, np.float32)
        val_scores = np.full_like(train_scores, np.nan) if val_scores is None else val_scores
        self.router, self.embeddings = fit_locus_router(self.model, self.encodings, train_scores, val_scores,
                                                        self.benchmarks, device=self._device())
        self.n_fitted_models = len(train_scores)
        self.profiles = self.router.profiles(self.encodings, train_scores, self.benchmarks)

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        from locus_model.infer import embed_evaluation_sets

        encodings = self._require_fit()
        rows = np.arange(len(self.embeddings), len(self.embeddings) + len(scores))
        if len(scores):
            scores = np.asarray(scores, np.float32)
            new = embed_evaluation_sets(self.model, encodings, self._sets(scores), device=self._device())
            self.embeddings = np.concatenate([self.embeddings, new])
            self.profiles = np.concatenate([self.profiles, self.router.profiles(encodings, scores, self.benchmarks)])
        return rows

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        from locus_model.routing.query_groups import router_proba

        encodings = self._require_fit()
        rows, queries = np.asarray(model_rows), np.asarray(query_idx)
        return router_proba(self.model, self.router, self.embeddings[rows], self.profiles[rows], encodings[queries],
                            device=self._device())


def make_method(
    name: str,
    *,
    seed: int,
    model_config: Any = None,
    train_config: Any = None,
    baseline_config: Any = None,
    progress: bool = False,
    locus_model: Any = None,
    benchmarks: np.ndarray | None = None,
) -> Baseline:
    """A fresh, unfitted method by its result-table name (everything in METHODS except the oracle).

    baseline_config: LatentConfig for embedllm_mf / irt (its seed is replaced by ``seed``), KNNConfig for knn,
    PerBenchmarkConfig for per_benchmark (its benchmark labels; the protocol gives them).
    locus_model: a trained Locus that "locus" uses as it is (no training).
    benchmarks: (Q,) the query labels that "locus" and "query_groups" may read to fit their query groups ("" for
    a query whose label must not be read)."""
    if name == "locus":
        return LocusMethod(model_config=model_config, train_config=train_config, progress=progress, model=locus_model,
                           benchmarks=benchmarks)
    if name == "query_groups":
        return QueryGroupTable(benchmarks)
    if name in ("embedllm_mf", "irt"):
        method = BASELINES[name](baseline_config) if baseline_config is not None else BASELINES[name]()
        method.config = replace(method.config, seed=seed)
        return method
    if name in ("knn", "per_benchmark"):
        return BASELINES[name](baseline_config)
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
    locus_model: Any = None,
    on_fitted: Callable[[Any], None] | None = None,
    benchmarks: np.ndarray | None = None,  # (Q,) query labels, or None
) -> tuple[np.ndarray, float]:
    """One method on one fold: fit on the trained models' anchor cells (validation: the fold's val cells),
    onboard the held-out models from their anchor cells, score every test query; ((M, Q_test) P(correct),
    seconds). A module-level function so that evaluate(jobs > 1) can run it in a worker process.
    ``on_fitted(method)``: called once the method is fitted (e.g. to keep its trained model). ``benchmarks``:
    the query labels; the test queries' labels are blanked before a label-free method sees them."""
    t0 = time.perf_counter()
    budget_scores, val_scores = fold.budget_and_val(scores)
    labels = None
    if benchmarks is not None:
        labels = np.asarray(benchmarks).astype(str).astype(object)
        labels[np.asarray(fold.test)] = ""
    method = make_method(
        name, seed=seed, model_config=model_config, train_config=train_config, baseline_config=baseline_config,
        progress=progress, locus_model=locus_model, benchmarks=labels,
    )
    method.fit(encodings, budget_scores[trained], val_scores[trained])
    if on_fitted is not None:
        on_fitted(method)
    held_rows = method.onboard(budget_scores[held])
    probs = np.empty((len(scores), len(fold.test)), dtype=np.float32)
    probs[trained] = method.predict_proba(np.arange(len(trained)), fold.test)
    if len(held):
        probs[held] = method.predict_proba(held_rows, fold.test)
    return probs, time.perf_counter() - t0


def set_threads(n: int) -> None:  # worker initializer of evaluate(jobs > 1)
    import torch

    torch.set_num_threads(n)
