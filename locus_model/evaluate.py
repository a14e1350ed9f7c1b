"""The accuracy harness: LOCUS and its baselines on the same queries, budgets and held-out models.

Protocol (k-fold, any evaluation table):
- queries are split into K folds; in fold f the test queries are fold f, a validation slice (``val_fraction``
  of the rest) serves LOCUS early stopping (and the baselines' model selection), the remainder are training
  queries;
- the *budget*: one random set of N training queries (seeded per fold) is the anchor set of every model;
  every method may use each model's evaluations on those anchors and nothing else (a model missing a cell
  simply has fewer);
- *held-out models* (a random ``holdout_models`` fraction, the same in every fold) are never trained on:
  LOCUS embeds them from their anchor evaluations with one forward pass (``embed_evaluation_sets``), MF and
  IRT fit only their per-model vector, kNN and best-single read their anchor scores;
- every (test query, model) pair is scored with locus_model.metrics; groups ``all``, ``in_training`` and
  ``held_out`` route among the models of the group; numbers are mean/std over folds, and a paired bootstrap
  over the pooled test queries gives the routing-accuracy difference of each method vs best_single, and one
  over the test queries of each fold gives LOCUS's difference from every other method on routing, correctness
  accuracy, AUC and Brier (``vs_methods``; the difference of the fold means).

EmbedLLM protocol (a table with a ``split`` column and ``folds=None``): the dataset's own train/val/test
queries form the single fold (the reference protocol of patel-shivam/locus_code_release; mmlu*/gpqa*
subtasks are merged when reporting per benchmark).

The result is a JSON-ready dict (see :func:`evaluate`); :func:`format_results` prints it as tables.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from locus_model import metrics
from locus_model.baselines import BASELINES, Baseline
from locus_model.evaluations import EvaluationMatrix

METHODS = ("locus", "embedllm_mf", "irt", "knn", "best_single", "oracle")
GROUPS = ("all", "in_training", "held_out")
METRICS = ("routing_acc", "hit@3", "correctness_acc", "auc", "brier")
REFERENCE = "best_single"  # the method every other one is compared with by paired bootstrap


# ---------------------------------------------------------------------------------------------- LOCUS adapter


class LocusMethod(Baseline):
    """LOCUS behind the baseline interface: fit = train_locus on the in-training models' anchor evaluations
    (or, given a trained ``model``, no training at all: the in-training models are embedded by it too);
    onboard = one forward pass of the set encoder (embed_evaluation_sets); nothing is refitted."""

    name = "locus"

    def __init__(self, *, model_config: Any = None, train_config: Any = None, progress: bool = False,
                 model: Any = None) -> None:
        super().__init__()
        self.model_config, self.train_config, self.progress = model_config, train_config, progress
        self.model = model
        self.pretrained = model is not None
        self.embeddings = np.zeros((0, 0), np.float32)  # (M_fitted + H, d)
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
        from locus_model.model import LocusConfig, embed_evaluation_sets
        from locus_model.train import TrainConfig, train_locus

        self.encodings = np.asarray(encodings, dtype=np.float32)
        if self.pretrained:
            if self.model.config.query_dim != self.encodings.shape[1]:
                raise ValueError(f"the trained LOCUS takes {self.model.config.query_dim}-d query encodings, these are "
                                 f"{self.encodings.shape[1]}-d: encode the queries with the checkpoint's encoder")
            self.embeddings = embed_evaluation_sets(self.model, self.encodings, self._sets(train_scores), device=self._device())
            self.n_fitted_models = len(train_scores)
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
        self.embeddings = embed_evaluation_sets(self.model, self.encodings, self._sets(train_scores), device=self._device())
        self.n_fitted_models = len(train_scores)

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        from locus_model.model import embed_evaluation_sets

        encodings = self._require_fit()
        rows = np.arange(len(self.embeddings), len(self.embeddings) + len(scores))
        if len(scores):
            new = embed_evaluation_sets(self.model, encodings, self._sets(np.asarray(scores, np.float32)), device=self._device())
            self.embeddings = np.concatenate([self.embeddings, new])
        return rows

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        from locus_model.model import predict_proba

        encodings = self._require_fit()
        return predict_proba(self.model, self.embeddings[np.asarray(model_rows)], encodings[np.asarray(query_idx)], device=self._device())


def make_method(
    name: str,
    *,
    seed: int,
    model_config: Any = None,
    train_config: Any = None,
    baseline_config: Any = None,
    progress: bool = False,
    locus_model: Any = None,
) -> Baseline:
    """A fresh, unfitted method by its result-table name (everything in METHODS except the oracle).

    baseline_config: LatentConfig for embedllm_mf / irt (its seed is replaced by ``seed``), KNNConfig for knn.
    locus_model: a trained Locus that "locus" uses as it is (no training)."""
    if name == "locus":
        return LocusMethod(model_config=model_config, train_config=train_config, progress=progress, model=locus_model)
    if name in ("embedllm_mf", "irt"):
        method = BASELINES[name](baseline_config) if baseline_config is not None else BASELINES[name]()
        method.config = replace(method.config, seed=seed)
        return method
    if name == "knn":
        return BASELINES[name](baseline_config)
    if name in BASELINES:
        return BASELINES[name]()
    raise ValueError(f"unknown method {name!r}; choose from {list(METHODS)}")


# ---------------------------------------------------------------------------------------------- splits


@dataclass(frozen=True)
class Fold:
    """Query indices of one fold: training queries, the anchors drawn from them, validation and test."""

    index: int
    train: np.ndarray  # (Qtr,) training queries (anchors come from these)
    anchors: np.ndarray  # (N,) the budget: every model's usable evaluations are on these queries
    val: np.ndarray  # (Qv,) LOCUS early stopping / baseline model selection
    test: np.ndarray  # (Qte,)


def _draw_anchors(train: np.ndarray, budget: int, rng: np.random.Generator, where: str) -> np.ndarray:
    if budget < 1:
        raise ValueError(f"budget={budget}: the number of evaluations per model must be >= 1")
    if budget > len(train):
        raise ValueError(
            f"{where}: budget={budget} anchors but only {len(train)} training queries; "
            "lower --budget, use fewer folds, or evaluate on a larger query pool"
        )
    return np.sort(rng.choice(train, size=budget, replace=False))


def kfold_splits(n_queries: int, *, folds: int, budget: int, seed: int, val_fraction: float = 0.1) -> list[Fold]:
    """K query folds; per fold a validation slice of the non-test queries and ``budget`` anchors from the rest."""
    if folds < 2:
        raise ValueError(f"folds={folds}: k-fold needs at least 2 folds (use folds=None for a table's own split)")
    if n_queries < folds:
        raise ValueError(f"{n_queries} queries cannot be split into {folds} folds; use fewer folds")
    order = np.random.default_rng(seed).permutation(n_queries)
    out = []
    for f, test in enumerate(np.array_split(order, folds)):
        rng = np.random.default_rng([seed, f])
        rest = rng.permutation(np.setdiff1d(order, test))
        n_val = max(1, int(round(val_fraction * len(rest)))) if val_fraction > 0 else 0
        val, train = np.sort(rest[:n_val]), np.sort(rest[n_val:])
        anchors = _draw_anchors(train, budget, rng, f"fold {f + 1}/{folds}")
        out.append(Fold(f, train, anchors, val, np.sort(test)))
    return out


def table_split(split: np.ndarray, *, budget: int, seed: int) -> list[Fold]:
    """The table's own train/val/test split as a single fold (EmbedLLM's reference protocol)."""
    split = np.asarray(split).astype(str)
    train, val, test = (np.flatnonzero(split == s) for s in ("train", "val", "test"))
    if len(test) == 0:
        raise ValueError("the table's split column has no 'test' queries; use k-fold (folds=5) instead")
    anchors = _draw_anchors(train, budget, np.random.default_rng(seed), "the table's train split")
    return [Fold(0, train, anchors, val, test)]


def choose_held_out(n_models: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of the held-out models: round(fraction * M), at least 1 when fraction > 0."""
    if not 0 <= fraction < 1:
        raise ValueError(f"holdout_models={fraction} must be in [0, 1)")
    if fraction == 0:
        return np.zeros(0, dtype=np.int64)
    n = max(1, int(round(fraction * n_models)))
    if n_models - n < 2:
        raise ValueError(
            f"holding out {n} of {n_models} models leaves fewer than 2 to train on; lower --holdout-models or add models"
        )
    rng = np.random.default_rng([seed, 7919])  # its own stream: the held-out set does not move with the folds
    return np.sort(rng.choice(n_models, size=n, replace=False))


def benchmark_group(name: str) -> str:
    """EmbedLLM reporting merges subtasks: mmlu_* -> mmlu, gpqa_* -> gpqa; other names are kept."""
    low = name.lower()
    for prefix in ("mmlu", "gpqa"):
        if low.startswith(prefix):
            return prefix
    return name


# ---------------------------------------------------------------------------------------------- metrics


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

def score_predictions(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """All METRICS on (M, Q) probs against labels (NaN = unknown)."""
    return {
        "routing_acc": metrics.routing_accuracy(probs, labels),
        "hit@3": metrics.hit_at_k(probs, labels, 3),
        "correctness_acc": metrics.correctness_accuracy(probs, labels),
        "auc": metrics.roc_auc(probs, labels),
        "brier": metrics.brier(probs, labels),
    }


def _mean_std(values: Sequence[float]) -> dict:
    vals = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    vals = vals[~np.isnan(vals)]
    if len(vals) == 0:
        return {"mean": None, "std": None}
    return {"mean": float(vals.mean()), "std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0}


# ---------------------------------------------------------------------------------------------- the harness


def _align_encodings(encodings: np.ndarray | Mapping[str, np.ndarray], matrix: EvaluationMatrix) -> np.ndarray:
    if isinstance(encodings, Mapping):
        missing = [q for q in matrix.query_ids if q not in encodings]
        if missing:
            raise ValueError(f"no encoding for {len(missing)} query_id(s), e.g. {missing[0]!r}; encode every query of the table")
        encodings = np.stack([np.asarray(encodings[q], np.float32) for q in matrix.query_ids])
    encodings = np.asarray(encodings, dtype=np.float32)
    if encodings.ndim != 2 or len(encodings) != len(matrix.query_ids):
        raise ValueError(
            f"encodings have shape {encodings.shape}, expected ({len(matrix.query_ids)}, D): one row per query in "
            "EvaluationMatrix.from_table(table).query_ids order (sorted query_id), or a {query_id: vector} mapping"
        )
    return encodings


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
) -> tuple[np.ndarray, float]:
    """One method on one fold: fit on the trained models' anchor cells (validation: the fold's val cells),
    onboard the held-out models from their anchor cells, score every test query; ((M, Q_test) P(correct),
    seconds). A module-level function so that evaluate(jobs > 1) can run it in a worker process."""
    t0 = time.perf_counter()
    budget_scores = np.full_like(scores, np.nan)
    budget_scores[:, fold.anchors] = scores[:, fold.anchors]
    val_scores = np.full_like(scores, np.nan)
    val_scores[:, fold.val] = scores[:, fold.val]
    method = make_method(
        name, seed=seed, model_config=model_config, train_config=train_config, baseline_config=baseline_config,
        progress=progress, locus_model=locus_model,
    )
    method.fit(encodings, budget_scores[trained], val_scores[trained])
    held_rows = method.onboard(budget_scores[held])
    probs = np.empty((len(scores), len(fold.test)), dtype=np.float32)
    probs[trained] = method.predict_proba(np.arange(len(trained)), fold.test)
    if len(held):
        probs[held] = method.predict_proba(held_rows, fold.test)
    return probs, time.perf_counter() - t0


def _set_threads(n: int) -> None:  # worker initializer of evaluate(jobs > 1)
    import torch

    torch.set_num_threads(n)


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def evaluate(
    table: pd.DataFrame | EvaluationMatrix,
    encodings: np.ndarray | Mapping[str, np.ndarray],
    *,
    budget: int = 256,
    folds: int | None = 5,
    holdout_models: float = 0.2,
    seed: int = 0,
    methods: Sequence[str] = METHODS,
    train_config: Any = None,
    model_config: Any = None,
    progress: bool = True,
    val_fraction: float = 0.1,
    n_boot: int = 2000,
    baseline_configs: Mapping[str, Any] | None = None,
    only_folds: Sequence[int] | None = None,
    extra_groups: Mapping[str, Sequence[str]] | None = None,
    jobs: int = 1,
    fold: Fold | None = None,
    held_out: Sequence[str] | None = None,
    locus_model: Any = None,
) -> dict:
    """Evaluate LOCUS and the baselines on one evaluation table; returns the JSON-ready result dict.

    Args:
        table: a validated long-format table (or its EvaluationMatrix).
        encodings: (Q, D) query encodings in EvaluationMatrix.from_table(table).query_ids order, or a
            {query_id: vector} mapping.
        budget: evaluations per model every method may use (the anchor queries).
        folds: K for k-fold over queries; None = the table's own split column (EmbedLLM protocol).
        holdout_models: fraction of models never trained on (onboarded from their budget evaluations).
        methods: any of METHODS; "best_single" is always run (it is the bootstrap reference).
        train_config, model_config: LOCUS TrainConfig / LocusConfig (None = defaults with query_dim = D).
        val_fraction: share of the non-test queries held for validation in each fold (k-fold only).
        n_boot: bootstrap resamples for the vs_best_single and vs_methods intervals.
        baseline_configs: {"embedllm_mf" | "irt": LatentConfig, "knn": KNNConfig} overriding the defaults.
        only_folds: run only these fold indices (0-based) of the K, e.g. when compute is short; recorded in
            settings["only_folds"], and the means/stds are then over those folds only.
        extra_groups: more groups to report, {name: model names}, e.g. the models another run holds out, so
            that their accuracy as in-training models can be set beside their accuracy when onboarded.
        jobs: (fold, method) fits run at once, each in its own process with cpu_count // jobs torch threads;
            1 = all in this process. The results do not depend on it beyond float rounding (thread counts differ).
        fold: one given split of the queries (indices in EvaluationMatrix order) instead of folds: e.g. the split
            a deployed checkpoint was trained with.
        held_out: the held-out models by name, instead of drawing a ``holdout_models`` share.
        locus_model: a trained Locus scored as it is ("locus" is not trained; its in-training models are
            embedded from their anchor evaluations like the held-out ones): e.g. the pool's checkpoint.

    Returns:
        {"settings", "sizes", "wall_s", "methods": {method: {group: {"routing_acc": {"mean", "std"}, "hit@3",
        "correctness_acc", "auc", "brier", "per_benchmark": {bench: {metric: {"mean", "std"}}},
        "vs_best_single": {"diff", "ci_low", "ci_high"}}}}}; LOCUS entries also carry "vs_methods": {other method:
        {metric: {"diff", "ci_low", "ci_high"}}}, LOCUS's fold mean minus the other's, with an interval from
        resampling the test queries within each fold (routing_acc, correctness_acc, auc, brier; see
        bootstrap_comparisons). Groups: all, in_training, held_out (absent when
        nothing is held out), then any extra_groups. Undefined numbers (e.g. AUC on one class) are None.
    """
    start = time.perf_counter()
    if jobs < 1:
        raise ValueError(f"jobs={jobs}: give the number of worker processes, 1 or more (1 = no workers)")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    methods = list(dict.fromkeys([*methods, REFERENCE]))
    matrix = table if isinstance(table, EvaluationMatrix) else EvaluationMatrix.from_table(table)
    enc = _align_encodings(encodings, matrix)
    scores = matrix.scores.astype(np.float32)  # (M, Q)
    n_models, n_queries = scores.shape

    if fold is not None:
        protocol, splits = "given_split", [fold]
        bench = np.asarray(matrix.benchmarks).astype(str)
    elif folds is None:
        if matrix.split is None:
            raise ValueError(
                "folds=None uses the table's own train/val/test split, but the table has no 'split' column; "
                "pass folds=5 (k-fold over queries) or an EmbedLLM folder"
            )
        protocol, splits = "table_split", table_split(matrix.split, budget=budget, seed=seed)
        bench = np.array([benchmark_group(b) for b in matrix.benchmarks])
    else:
        protocol = "kfold"
        splits = kfold_splits(n_queries, folds=folds, budget=budget, seed=seed, val_fraction=val_fraction)
        bench = np.asarray(matrix.benchmarks).astype(str)

    if "locus" in methods:  # record the effective LOCUS settings, not None
        from locus_model.model import LocusConfig
        from locus_model.train import TrainConfig

        model_config = locus_model.config if locus_model is not None else (model_config or LocusConfig(query_dim=enc.shape[1]))
        train_config = None if locus_model is not None else (train_config or TrainConfig())

    total_folds = len(splits)
    if only_folds is not None:
        bad = [f for f in only_folds if not 0 <= f < len(splits)]
        if bad or not only_folds:
            raise ValueError(f"only_folds={list(only_folds)}: give fold indices in [0, {len(splits)})")
        splits = [splits[f] for f in sorted(set(only_folds))]

    if held_out is not None:
        unknown_models = sorted(set(held_out) - set(matrix.models))
        if unknown_models:
            raise ValueError(f"held-out models {unknown_models[:3]} are not in the table")
        held = np.array(sorted(matrix.models.index(m) for m in held_out), dtype=np.int64)
    else:
        held = choose_held_out(n_models, holdout_models, seed)
    trained = np.setdiff1d(np.arange(n_models), held)
    groups = {"all": np.arange(n_models), "in_training": trained}
    if len(held):
        groups["held_out"] = held
    for group, names in (extra_groups or {}).items():
        if group in groups:
            raise ValueError(f"extra group {group!r} clashes with a built-in group; choose another name")
        missing = [n for n in names if n not in matrix.models]
        if missing or not names:
            raise ValueError(f"extra group {group!r}: unknown or no model names {missing[:3]}; use names from the table")
        groups[group] = np.array(sorted(matrix.models.index(n) for n in names))

    per_fold: dict[str, dict[str, list[dict]]] = {m: {g: [] for g in groups} for m in methods}
    outcomes: dict[str, dict[str, list[np.ndarray]]] = {m: {g: [] for g in groups} for m in methods}
    fold_probs: dict[str, dict[str, list[np.ndarray]]] = {m: {g: [] for g in groups} for m in methods}  # (M_g, Q_test)
    fold_labels: dict[str, list[np.ndarray]] = {g: [] for g in groups}
    anchor_counts = []
    tasks = []  # (fold, method) fits, in the order they are reported
    for fold in splits:
        counts = (~np.isnan(scores[:, fold.anchors])).sum(axis=1)  # (M,) evaluations each model has on the anchors
        anchor_counts.append(counts)
        if (counts == 0).any():
            name = matrix.models[int(np.flatnonzero(counts == 0)[0])]
            raise ValueError(
                f"fold {fold.index + 1}: model {name!r} has no evaluation among the {len(fold.anchors)} anchor queries; "
                "raise the budget or drop models with very few evaluations"
            )
        tasks += [(fold, name) for name in methods if name != "oracle"]

    def fit_args(fold: Fold, name: str) -> dict:
        return dict(
            name=name, seed=seed + fold.index, scores=scores, encodings=enc, fold=fold, trained=trained, held=held,
            model_config=model_config, train_config=train_config,
            baseline_config=(baseline_configs or {}).get(name), progress=progress and jobs == 1,
            locus_model=locus_model if name == "locus" else None,
        )

    fitted: dict[tuple[int, str], tuple[np.ndarray, float]] = {}  # (fold index, method) -> (test probs, seconds)
    if jobs == 1:
        for fold, name in tasks:
            fitted[fold.index, name] = fit_and_predict(**fit_args(fold, name))
            _log(progress, f"fold {fold.index + 1}/{total_folds} {name:<12} {fitted[fold.index, name][1]:7.1f} s")
    elif tasks:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        threads = max(1, (multiprocessing.cpu_count() or 1) // jobs)
        with ProcessPoolExecutor(  # spawn: a forked torch runtime can hang; each worker gets its share of threads
            max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_set_threads,
            initargs=(threads,),
        ) as pool:
            futures = {pool.submit(fit_and_predict, **fit_args(fold, name)): (fold.index, name) for fold, name in tasks}
            for future in as_completed(futures):
                key = futures[future]
                fitted[key] = future.result()
                _log(progress, f"fold {key[0] + 1}/{total_folds} {key[1]:<12} {fitted[key][1]:7.1f} s (worker)")

    for fold in splits:
        labels = scores[:, fold.test]  # (M, Qte)
        for name in methods:
            if name == "oracle":
                probs = np.nan_to_num(labels, nan=0.0)  # knows the answers: routing = any model correct
            else:
                probs = fitted[fold.index, name][0]
            for group, rows in groups.items():
                p, y = probs[rows], labels[rows]
                if np.isnan(y).all():
                    continue
                result = score_predictions(p, y)
                result["per_benchmark"] = {
                    b: score_predictions(p[:, bench[fold.test] == b], y[:, bench[fold.test] == b])
                    for b in sorted(set(bench[fold.test]))
                    if not np.isnan(y[:, bench[fold.test] == b]).all()
                }
                per_fold[name][group].append(result)
                outcomes[name][group].append(routing_outcomes(p, y))
                fold_probs[name][group].append(p)
                if name == REFERENCE:
                    fold_labels[group].append(y)
            _log(progress, f"fold {fold.index + 1}/{total_folds} {name:<12} routing(all) {per_fold[name]['all'][-1]['routing_acc']:.4f}")

    result_methods: dict[str, dict] = {}
    for name in methods:
        result_methods[name] = {}
        for group in groups:
            folds_res = per_fold[name][group]
            if not folds_res:
                continue
            entry: dict[str, Any] = {k: _mean_std([r[k] for r in folds_res]) for k in METRICS}
            benches = sorted({b for r in folds_res for b in r["per_benchmark"]})
            entry["per_benchmark"] = {
                b: {k: _mean_std([r["per_benchmark"][b][k] for r in folds_res if b in r["per_benchmark"]]) for k in METRICS}
                for b in benches
            }
            if name != REFERENCE:
                entry["vs_best_single"] = paired_bootstrap(
                    np.concatenate(outcomes[name][group]), np.concatenate(outcomes[REFERENCE][group]),
                    n_boot=n_boot, seed=seed,
                )
            if name == "locus":  # LOCUS against every other method on the same test queries, folds as strata
                compared = {m: fold_probs[m][group] for m in methods
                            if m != "oracle" and len(fold_probs[m][group]) == len(fold_labels[group])}
                entry["vs_methods"] = bootstrap_comparisons(  # diff = difference of the fold means
                    compared, fold_labels[group], against="locus", n_boot=n_boot, seed=seed,
                )
            result_methods[name][group] = entry

    counts = np.stack(anchor_counts)  # (folds, M)
    return _json_clean({
        "settings": {
            "protocol": protocol,
            "budget": budget,
            "folds": None if protocol == "given_split" else folds,
            "only_folds": sorted(set(only_folds)) if only_folds is not None else None,
            "holdout_models": holdout_models,
            "seed": seed,
            "val_fraction": val_fraction if folds is not None else None,
            "methods": methods,
            "n_boot": n_boot,
            "jobs": jobs,
            "vs_methods_intervals": "fold-stratified",  # LOCUS minus others: fold means, resampled within folds
            "encoding_dim": int(enc.shape[1]),
            "train_config": _config_dict(train_config),
            "model_config": _config_dict(model_config),
            "baseline_configs": {k: _config_dict(v) for k, v in (baseline_configs or {}).items()},
            "held_out_model_names": [matrix.models[i] for i in held],
            "locus_trained_here": locus_model is None,
            "extra_groups": {k: list(v) for k, v in (extra_groups or {}).items()},
        },
        "sizes": {
            "models": n_models,
            "queries": n_queries,
            "evaluations": int((~np.isnan(scores)).sum()),
            "in_training_models": len(trained),
            "held_out_models": len(held),
            "train_queries": [len(f.train) for f in splits],
            "val_queries": [len(f.val) for f in splits],
            "test_queries": [len(f.test) for f in splits],
            "anchors": [len(f.anchors) for f in splits],
            "mean_budget_evaluations_in_training": float(counts[:, trained].mean()),
            "mean_budget_evaluations_held_out": float(counts[:, held].mean()) if len(held) else None,
        },
        "wall_s": round(time.perf_counter() - start, 2),
        "methods": result_methods,
    })


def _config_dict(config: Any) -> dict | None:
    return asdict(config) if config is not None else None


def _json_clean(obj: Any) -> Any:
    """NaN/inf -> None and numpy scalars -> Python, so the result is strict JSON."""
    if isinstance(obj, dict):
        return {str(k): _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_clean(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(float(obj)) else float(obj)
    return obj


def save_results(result: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    return path


# ---------------------------------------------------------------------------------------------- printing


def _fmt(stat: dict | None, scale: float = 100.0, digits: int = 1) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    return f"{stat['mean'] * scale:.{digits}f}±{stat['std'] * scale:.{digits}f}"


def format_results(result: dict) -> str:
    """The result as plain-text tables, one per group (percent; Brier x100; +- = std over folds)."""
    s, z = result["settings"], result["sizes"]
    lines = [
        f"protocol={s['protocol']} budget={s['budget']} folds={s['folds']} held_out={z['held_out_models']}/{z['models']} "
        f"models, {z['queries']} queries, wall {result['wall_s']:.0f} s"
    ]
    header = f"{'method':<12} {'routing':>11} {'hit@3':>11} {'correct':>11} {'AUC':>11} {'Brier':>11}  {'vs best_single [95% CI]':>24}"
    groups = list(GROUPS) + [g for g in (result["settings"].get("extra_groups") or {}) if g not in GROUPS]
    for group in groups:
        rows = [(m, res[group]) for m, res in result["methods"].items() if group in res]
        if not rows:
            continue
        lines += ["", f"[{group}]", header]
        for name, entry in rows:
            vs_text = format_interval(entry.get("vs_best_single"))
            lines.append(
                f"{name:<12} {_fmt(entry['routing_acc']):>11} {_fmt(entry['hit@3']):>11} {_fmt(entry['correctness_acc']):>11} "
                f"{_fmt(entry['auc']):>11} {_fmt(entry['brier']):>11}  {vs_text:>24}"
            )
        locus = next((entry for m, entry in rows if m == "locus"), None)
        if locus and locus.get("vs_methods"):
            lines += ["", f"LOCUS minus each method [{group}] (fold means; 95% paired bootstrap CI over test queries within folds; Brier: negative favours LOCUS)",
                      f"{'method':<12} " + " ".join(f"{k:>22}" for k in _PAIRED)]
            for other, stats in locus["vs_methods"].items():
                lines.append(f"{other:<12} " + " ".join(f"{format_interval(stats.get(k)):>22}" for k in _PAIRED))
    return "\n".join(lines)


_PAIRED = ("routing_acc", "correctness_acc", "auc", "brier")


def format_interval(stat: dict | None, scale: float = 100.0) -> str:
    """'+1.2 [+0.3,+2.0]' for a {"diff", "ci_low", "ci_high"} dict (x100), with ' tie' when the interval covers 0."""
    if not stat or stat.get("diff") is None:
        return "-"
    tie = " tie" if stat["ci_low"] <= 0 <= stat["ci_high"] else ""
    return f"{stat['diff'] * scale:+.1f} [{stat['ci_low'] * scale:+.1f},{stat['ci_high'] * scale:+.1f}]{tie}"


def print_results(result: dict, file: Any = None) -> None:
    print(format_results(result), file=file or sys.stdout)


__all__ = [
    "METHODS", "GROUPS", "METRICS", "LocusMethod", "make_method", "Fold", "kfold_splits", "table_split",
    "choose_held_out", "benchmark_group", "routing_outcomes", "paired_bootstrap", "bootstrap_draws",
    "bootstrap_comparisons", "paired_bootstrap_metrics", "score_predictions",
    "evaluate", "save_results", "format_results", "format_interval", "print_results",
]
