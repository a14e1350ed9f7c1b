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
- every (test query, model) pair is scored with evaluation.metrics; groups ``all``, ``in_training`` and
  ``held_out`` route among the models of the group; numbers are mean/std over folds, and a paired bootstrap
  over the pooled test queries gives the routing-accuracy difference of each method vs best_single, and one
  over the test queries of each fold gives LOCUS's difference from every other method on routing, correctness
  accuracy, AUC and Brier (``vs_methods``; the difference of the fold means).

EmbedLLM protocol (a table with a ``split`` column and ``folds=None``): the dataset's own train/val/test
queries form the single fold (the reference protocol of patel-shivam/locus_code_release; mmlu*/gpqa*
subtasks are merged when reporting per benchmark).

The result is a JSON-ready dict (see :func:`evaluate`); evaluation.results saves and prints it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from locus_model.data.contract import benchmark_group
from locus_model.data.matrix import EvaluationMatrix
from locus_model.data.query_encodings import encoding_matrix
from locus_model.evaluation.bootstrap import bootstrap_comparisons, paired_bootstrap, routing_outcomes
from locus_model.evaluation.methods import METHODS, fit_and_predict, set_threads
from locus_model.evaluation.metrics import METRICS, score_predictions
from locus_model.evaluation.results import config_dict, json_clean
from locus_model.evaluation.splits import Fold, choose_held_out, kfold_splits, table_split

REFERENCE = "best_single"  # the method every other one is compared with by paired bootstrap


def _mean_std(values: Sequence[float]) -> dict:
    vals = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    vals = vals[~np.isnan(vals)]
    if len(vals) == 0:
        return {"mean": None, "std": None}
    return {"mean": float(vals.mean()), "std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0}



def _align_encodings(encodings: np.ndarray | Mapping[str, np.ndarray], matrix: EvaluationMatrix) -> np.ndarray:
    if isinstance(encodings, Mapping):
        encodings = encoding_matrix(encodings, matrix.query_ids)
    encodings = np.asarray(encodings, dtype=np.float32)
    if encodings.ndim != 2 or len(encodings) != len(matrix.query_ids):
        raise ValueError(
            f"encodings have shape {encodings.shape}, expected ({len(matrix.query_ids)}, D): one row per query in "
            "EvaluationMatrix.from_table(table).query_ids order (sorted query_id), or a {query_id: vector} mapping"
        )
    return encodings


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def _query_folds(matrix: EvaluationMatrix, *, fold: Fold | None, folds: int | None, budget: int, seed: int,
                 val_fraction: float) -> tuple[str, list[Fold], np.ndarray]:
    """(protocol, the folds, each query's benchmark as reported): a given fold, the table's own split or k-fold."""
    if fold is not None:
        return "given_split", [fold], np.asarray(matrix.benchmarks).astype(str)
    if folds is None:
        if matrix.split is None:
            raise ValueError(
                "folds=None uses the table's own train/val/test split, but the table has no 'split' column; "
                "pass folds=5 (k-fold over queries) or an EmbedLLM folder"
            )
        splits = table_split(matrix.split, budget=budget, seed=seed)
        return "table_split", splits, np.array([benchmark_group(b) for b in matrix.benchmarks])
    splits = kfold_splits(matrix.scores.shape[1], folds=folds, budget=budget, seed=seed, val_fraction=val_fraction)
    return "kfold", splits, np.asarray(matrix.benchmarks).astype(str)


def _model_groups(matrix: EvaluationMatrix, *, held_out: Sequence[str] | None, holdout_models: float, seed: int,
                  extra_groups: Mapping[str, Sequence[str]] | None) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(in-training rows, held-out rows, {group: rows}) of the models."""
    n_models = len(matrix.models)
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
    return trained, held, groups


def _anchor_counts(scores: np.ndarray, splits: list[Fold], models: list[str]) -> np.ndarray:  # (folds, M)
    """Evaluations each model has on each fold's anchors; every model needs at least one."""
    counts = []
    for fold in splits:
        counts.append((~np.isnan(scores[:, fold.anchors])).sum(axis=1))  # (M,)
        if (counts[-1] == 0).any():
            name = models[int(np.flatnonzero(counts[-1] == 0)[0])]
            raise ValueError(
                f"fold {fold.index + 1}: model {name!r} has no evaluation among the {len(fold.anchors)} anchor queries; "
                "raise the budget or drop models with very few evaluations"
            )
    return np.stack(counts)


def _fit_all(tasks: list[tuple[Fold, str]], fit_args: Callable[[Fold, str], dict], *, jobs: int, progress: bool,
             total_folds: int) -> dict[tuple[int, str], tuple[np.ndarray, float]]:
    """(fold index, method) -> (test probs, seconds): in this process, or in ``jobs`` worker processes."""
    fitted: dict[tuple[int, str], tuple[np.ndarray, float]] = {}
    if jobs == 1:
        for fold, name in tasks:
            fitted[fold.index, name] = fit_and_predict(**fit_args(fold, name))
            _log(progress, f"fold {fold.index + 1}/{total_folds} {name:<12} {fitted[fold.index, name][1]:7.1f} s")
    elif tasks:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        threads = max(1, (multiprocessing.cpu_count() or 1) // jobs)
        with ProcessPoolExecutor(  # spawn: a forked torch runtime can hang; each worker gets its share of threads
            max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=set_threads,
            initargs=(threads,),
        ) as executor:
            futures = {executor.submit(fit_and_predict, **fit_args(fold, name)): (fold.index, name) for fold, name in tasks}
            for future in as_completed(futures):
                key = futures[future]
                fitted[key] = future.result()
                _log(progress, f"fold {key[0] + 1}/{total_folds} {key[1]:<12} {fitted[key][1]:7.1f} s (worker)")
    return fitted


@dataclass
class _FoldScores:
    """Per method and group, one entry per fold: metrics, routing outcomes, probs; the labels per group."""

    per_fold: dict[str, dict[str, list[dict]]]
    outcomes: dict[str, dict[str, list[np.ndarray]]]
    probs: dict[str, dict[str, list[np.ndarray]]]  # (M_g, Q_test)
    labels: dict[str, list[np.ndarray]]


def _score_folds(splits: list[Fold], methods: list[str], fitted: dict, scores: np.ndarray,
                 groups: dict[str, np.ndarray], bench: np.ndarray, *, progress: bool, total_folds: int) -> _FoldScores:
    out = _FoldScores({m: {g: [] for g in groups} for m in methods}, {m: {g: [] for g in groups} for m in methods},
                      {m: {g: [] for g in groups} for m in methods}, {g: [] for g in groups})
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
                out.per_fold[name][group].append(result)
                out.outcomes[name][group].append(routing_outcomes(p, y))
                out.probs[name][group].append(p)
                if name == REFERENCE:
                    out.labels[group].append(y)
            _log(progress, f"fold {fold.index + 1}/{total_folds} {name:<12} routing(all) {out.per_fold[name]['all'][-1]['routing_acc']:.4f}")
    return out


def label_warnings(scores: np.ndarray, models: Sequence[str]) -> tuple[list[str], bool]:
    """(warnings, degenerate) for a (M, Q) score matrix: ``degenerate`` when no method can be told from another
    (every score equal, e.g. all 0.5, all 0 or all 1; or no query on which two models' scores differ), so that no
    interval may be claimed; a one-model pool is warned about too (there is nothing to route between)."""
    out, degenerate = [], False
    seen = scores[~np.isnan(scores)]
    if len(models) < 2:
        out.append(f"the pool has {len(models)} model(s): routing has nothing to choose between")
    if seen.size and seen.min() == seen.max():
        out.append(f"every score is {float(seen[0]):g}: the labels carry no information, every method scores the "
                   "same on them; no interval or difference is reported")
        degenerate = True
    elif seen.size and not (np.where(np.isnan(scores), -np.inf, scores).max(axis=0)
                            > np.where(np.isnan(scores), np.inf, scores).min(axis=0)).any():
        out.append("no query on which two models' scores differ: every routing choice is as good as any other; "
                   "no interval or difference is reported")
        degenerate = True
    return out, degenerate


def _no_interval(stat: dict) -> dict:
    return {k: None for k in stat}


def _summarise(scored: _FoldScores, methods: list[str], groups: dict[str, np.ndarray], *, n_boot: int,
               seed: int, degenerate: bool = False) -> dict[str, dict]:
    """Mean/std over folds per method and group, with the paired bootstrap comparisons (none when ``degenerate``:
    see label_warnings)."""
    result_methods: dict[str, dict] = {}
    for name in methods:
        result_methods[name] = {}
        for group in groups:
            folds_res = scored.per_fold[name][group]
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
                    np.concatenate(scored.outcomes[name][group]), np.concatenate(scored.outcomes[REFERENCE][group]),
                    n_boot=n_boot, seed=seed,
                )
                if degenerate:
                    entry["vs_best_single"] = _no_interval(entry["vs_best_single"])
            if name == "locus":  # LOCUS against every other method on the same test queries, folds as strata
                compared = {m: scored.probs[m][group] for m in methods
                            if m != "oracle" and len(scored.probs[m][group]) == len(scored.labels[group])}
                entry["vs_methods"] = bootstrap_comparisons(  # diff = difference of the fold means
                    compared, scored.labels[group], against="locus", n_boot=n_boot, seed=seed,
                )
                if degenerate:
                    entry["vs_methods"] = {m: {k: _no_interval(v) for k, v in s.items()} for m, s in entry["vs_methods"].items()}
            result_methods[name][group] = entry
    return result_methods


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
    protocol, splits, bench = _query_folds(matrix, fold=fold, folds=folds, budget=budget, seed=seed,
                                           val_fraction=val_fraction)

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
    trained, held, groups = _model_groups(matrix, held_out=held_out, holdout_models=holdout_models, seed=seed,
                                          extra_groups=extra_groups)
    counts = _anchor_counts(scores, splits, matrix.models)  # (folds, M)

    configs = dict(baseline_configs or {})
    if "per_benchmark" in methods and "per_benchmark" not in configs:
        from locus_model.evaluation.baselines import PerBenchmarkConfig

        configs["per_benchmark"] = PerBenchmarkConfig(benchmarks=tuple(np.asarray(matrix.benchmarks).astype(str)))

    def fit_args(fold: Fold, name: str) -> dict:
        return dict(
            name=name, seed=seed + fold.index, scores=scores, encodings=enc, fold=fold, trained=trained, held=held,
            model_config=model_config, train_config=train_config,
            baseline_config=configs.get(name), progress=progress and jobs == 1,
            locus_model=locus_model if name == "locus" else None,
        )

    tasks = [(fold, name) for fold in splits for name in methods if name != "oracle"]  # in the order reported
    fitted = _fit_all(tasks, fit_args, jobs=jobs, progress=progress, total_folds=total_folds)
    scored = _score_folds(splits, methods, fitted, scores, groups, bench, progress=progress, total_folds=total_folds)
    warnings, degenerate = label_warnings(scores, matrix.models)
    for warning in warnings:
        _log(progress, f"WARNING: {warning}")
    result_methods = _summarise(scored, methods, groups, n_boot=n_boot, seed=seed, degenerate=degenerate)
    return json_clean({
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
            "train_config": config_dict(train_config),
            "model_config": config_dict(model_config),
            "baseline_configs": {k: config_dict(v) for k, v in (baseline_configs or {}).items()},
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
        "warnings": warnings,  # label_warnings: degenerate labels, a one-model pool
        "methods": result_methods,
    })
