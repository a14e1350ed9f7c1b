"""The accuracy protocol: LOCUS and its baselines on the same queries, budgets and held-out models.

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
- every (test query, model) pair is scored with stats.metrics; groups ``all``, ``in_training`` and
  ``held_out`` route among the models of the group; numbers are mean/std over folds, and a paired bootstrap
  over the pooled test queries gives the routing-accuracy difference of each method vs best_single, and one
  over the test queries of each fold gives LOCUS's difference from every other method on routing, correctness
  accuracy, AUC and Brier (``vs_methods``; the difference of the fold means).

EmbedLLM protocol (a table with a ``split`` column and ``folds=None``): the dataset's own train/val/test
queries form the single fold (the protocol of the authors' code release, patel-shivam/locus_code_release; mmlu*/gpqa*
subtasks are merged when reporting per benchmark).

The result is a JSON-ready dict (see :func:`evaluate`); evaluation.results saves and prints it.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from locus_model.data.matrix import EvaluationMatrix
from locus_model.data.query_encodings import encoding_matrix
from locus_model.evaluation.baselines import PerBenchmarkConfig
from locus_model.evaluation.methods import METHODS, fit_and_predict
from locus_model.evaluation.progress import FitProgress
from locus_model.evaluation.results import config_dict, json_clean
from locus_model.evaluation.splits import Fold, anchor_counts, model_groups, query_folds
from locus_model.evaluation.summary import REFERENCE, frontier_summary, label_warnings, score_folds, summarise
from locus_model.evaluation.verdict import best_single_name, cost_share, kept_on_best_single, routing_verdict
from locus_model.model import LocusConfig
from locus_model.routing.frontier import query_costs
from locus_model.routing.policy import RoutingPolicy
from locus_model.threads import torch_threads
from locus_model.training import TrainConfig


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


def _pinned_fit(threads: int, args: dict):
    """fit_and_predict(**args) on ``threads`` torch threads: a fit's result does not depend on the machine's cores.
    Module-level so that a worker process can run it; reads fit_and_predict at call time (benches replace it)."""
    with torch_threads(threads):
        return fit_and_predict(**args)


def _fit_all(
    tasks: list[tuple[Fold, str]],
    fit_args: Callable[[Fold, str], dict],
    *,
    jobs: int,
    threads: int,
    log: Callable[[str], None],
    total_folds: int,
) -> dict[tuple[int, str], tuple[np.ndarray, float]]:
    """(fold index, method) -> (test probs, seconds): in this process, or in ``jobs`` worker processes; every fit on
    ``threads`` torch threads; a progress line with an ETA as each ends."""
    fitted: dict[tuple[int, str], tuple[np.ndarray, float]] = {}
    progress = FitProgress([(fold.index, name) for fold, name in tasks], total_folds=total_folds, jobs=jobs, say=log)
    if jobs == 1:
        for fold, name in tasks:
            progress.started(fold.index, name)
            fitted[fold.index, name] = _pinned_fit(threads, fit_args(fold, name))
            progress.finished(fold.index, name, fitted[fold.index, name][1])
    elif tasks:
        with ProcessPoolExecutor(  # spawn: a forked torch runtime can hang
            max_workers=jobs,
            mp_context=multiprocessing.get_context("spawn"),
        ) as executor:
            futures = {
                executor.submit(_pinned_fit, threads, fit_args(fold, name)): (fold.index, name) for fold, name in tasks
            }
            for future in as_completed(futures):
                key = futures[future]
                fitted[key] = future.result()
                progress.finished(*key, fitted[key][1], " (worker)")
    return fitted


def _checked_methods(
    methods: Sequence[str], *, jobs: int, threads: int, policy: RoutingPolicy, costs: Any
) -> list[str]:
    """The protocol's arguments checked before any work; the methods to run, best_single added (the reference)."""
    if jobs < 1:
        raise ValueError(f"jobs={jobs}: give the number of worker processes, 1 or more (1 = no workers)")
    if policy.quality_weight != 1 or policy.max_cost is not None or policy.max_params is not None:
        raise ValueError(
            f"evaluate: {policy} -- the protocol measures routing at quality weight 1 and sweeps the "
            "weight on its frontier, with no cap: give RoutingPolicy(guard_margin=...) only"
        )
    if threads < 1:
        raise ValueError(f"threads={threads}: give the torch threads of each fit, 1 or more (1 = the default)")
    if costs is not None and costs.basis == "none":
        raise ValueError(
            "costs: no model has a price or a parameter count, so there is no quality-cost frontier. How "
            "to fix: give params_b, price_input_per_mtok / price_output_per_mtok or cost_per_query per model"
        )
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    return list(dict.fromkeys([*methods, REFERENCE]))


def _selected_folds(splits: list[Fold], only_folds: Sequence[int] | None) -> list[Fold]:
    """The folds ``only_folds`` names (0-based, each once, in order), or every fold."""
    if only_folds is None:
        return splits
    bad = [f for f in only_folds if not 0 <= f < len(splits)]
    if bad or not only_folds:
        raise ValueError(f"only_folds={list(only_folds)}: give fold indices in [0, {len(splits)})")
    return [splits[f] for f in sorted(set(only_folds))]


def _verdict_and_frontier(
    scored: Any,
    result_methods: dict,
    methods: list[str],
    matrix: EvaluationMatrix,
    splits: list[Fold],
    costs: Any,
    *,
    n_boot: int,
    seed: int,
) -> tuple[dict | None, dict | None]:
    """Does routing pay over the best single model (evaluation.verdict.routing_verdict), and with ``costs`` (of the
    matrix's models) every method's quality-cost frontier on the test queries (None without)."""
    frontier, share, cost_note = None, None, None
    if costs is not None:
        fold_costs = [query_costs(costs, [matrix.queries[q] for q in f.test]) for f in splits]
        frontier = frontier_summary(scored, methods, fold_costs, matrix.models, n_boot=n_boot, seed=seed)
        if "locus" in methods:
            share, cost_note = cost_share(
                scored.route["locus"]["all"], scored.probs[REFERENCE]["all"], fold_costs, matrix.models
            )
    best_name = best_single_name(scored.probs[REFERENCE]["all"], matrix.models)
    kept = (
        kept_on_best_single(scored.route["locus"]["all"], scored.labels["all"], list(matrix.models).index(best_name))
        if "locus" in methods
        else None
    )
    verdict = routing_verdict(
        result_methods,
        best_name,
        share,
        cost_note,
        frontier=None if frontier is None else frontier["methods"],
        frontier_folds=() if frontier is None else frontier["folds"],
        kept=kept,
    )
    return verdict, frontier


def _sizes(scores: np.ndarray, splits: list[Fold], trained: np.ndarray, held: np.ndarray, counts: np.ndarray) -> dict:
    """The result's "sizes": models, queries and evaluations, each fold's query counts, the anchor evaluations the
    models have (``counts``: anchor_counts, (folds, M))."""
    return {
        "models": scores.shape[0],
        "queries": scores.shape[1],
        "evaluations": int((~np.isnan(scores)).sum()),
        "in_training_models": len(trained),
        "held_out_models": len(held),
        "train_queries": [len(f.train) for f in splits],
        "val_queries": [len(f.val) for f in splits],
        "test_queries": [len(f.test) for f in splits],
        "anchors": [len(f.anchors) for f in splits],
        "mean_budget_evaluations_in_training": float(counts[:, trained].mean()),
        "mean_budget_evaluations_held_out": float(counts[:, held].mean()) if len(held) else None,
    }


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
    threads: int = 1,
    fold: Fold | None = None,
    held_out: Sequence[str] | None = None,
    router: Any = None,
    costs: Any = None,
    policy: RoutingPolicy = RoutingPolicy(),
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
        jobs: (fold, method) fits run at once, each in its own process; 1 = all in this process. The results do
            not depend on it (each fit is seeded and pinned to ``threads``).
        threads: torch intra-op threads of every fit (default 1), recorded in settings["threads"]. Pinned because
            a parallel sum adds in another order at another thread count, so the trained models (and a guarded
            router's verdict near its margin) would otherwise depend on the machine's cores; more speed comes
            from ``jobs``.
        fold: one given split of the queries (indices in EvaluationMatrix order) instead of folds: e.g. the split
            a deployed checkpoint was trained with.
        held_out: the held-out models by name, instead of drawing a ``holdout_models`` share.
        router: a trained locus_model.router.Router scored as it is ("locus" is not trained; its in-training
            models become pool rows from their anchor evaluations like the held-out ones): e.g. the pool's checkpoint.
        costs: a routing.CostTable of the matrix's models (e.g. cost_table(models, cost_info(models file))):
            adds "frontier", every method's quality-cost frontier on the test queries with RouterBench's AIQ and
            the cost shares at 100% / 95% of the best single model's accuracy (evaluation.summary.frontier_summary);
            models of unknown cost are left out of it and counted in settings["costs"].
        policy: LOCUS routes under this policy's guard (routing.policy; guard_margin 0 = by P(correct) alone),
            recorded in settings["guard_margin"]; routing accuracy is at quality weight 1 and the frontier sweeps
            it, so a policy with another quality weight or a cap is refused. Routing accuracy, hit@3, the frontier
            and the verdict read the routing scores; correctness, AUC and Brier read P(correct).

    Returns:
        {"settings", "sizes", "wall_s", "verdict" (evaluation.verdict.routing_verdict: does routing pay over the
        best single model; None without LOCUS), "methods": {method: {group: {"routing_acc": {"mean", "std"}, "hit@3",
        "correctness_acc", "auc", "brier", "per_benchmark": {bench: {metric: {"mean", "std"}}},
        "vs_best_single": {"diff", "ci_low", "ci_high"}}}}}; LOCUS entries also carry "vs_methods": {other method:
        {metric: {"diff", "ci_low", "ci_high"}}}, LOCUS's fold mean minus the other's, with an interval from
        resampling the test queries within each fold (routing_acc, correctness_acc, auc, brier; see
        bootstrap_comparisons). Groups: all, in_training, held_out (absent when
        nothing is held out), then any extra_groups. Undefined numbers (e.g. AUC on one class) are None. With
        ``costs``: "frontier": {router: {"aiq" | "cost_share_at_best_single" | "cost_share_at_95": {"mean",
        "ci_low", "ci_high"}, ...}} and "frontier_folds" (each fold's operating points and hulls, what
        routing.frontier_plot.plot_frontiers draws); a share never reached is None.
    """
    start = time.perf_counter()
    log = (lambda message: print(message, file=sys.stderr, flush=True)) if progress else (lambda message: None)
    methods = _checked_methods(methods, jobs=jobs, threads=threads, policy=policy, costs=costs)
    matrix = table if isinstance(table, EvaluationMatrix) else EvaluationMatrix.from_table(table)
    enc = _align_encodings(encodings, matrix)
    scores = matrix.scores.astype(np.float32)  # (M, Q)
    n_models = scores.shape[0]
    if n_models < 2:  # routing chooses between models; every ranking metric is undefined on one
        raise ValueError(
            f"the table has {n_models} model(s) ({', '.join(matrix.models[:1])}): evaluating a router needs "
            "at least 2 models to choose between; add another model's evaluations"
        )
    protocol, splits, bench = query_folds(
        matrix, fold=fold, folds=folds, budget=budget, seed=seed, val_fraction=val_fraction
    )

    if "locus" in methods:  # record the effective LOCUS settings, not None
        model_config = (
            router.model.config if router is not None else (model_config or LocusConfig(query_dim=enc.shape[1]))
        )
        train_config = None if router is not None else (train_config or TrainConfig())

    total_folds = len(splits)
    splits = _selected_folds(splits, only_folds)
    trained, held, groups = model_groups(
        matrix, held_out=held_out, holdout_models=holdout_models, seed=seed, extra_groups=extra_groups
    )
    counts = anchor_counts(scores, splits, matrix.models)  # (folds, M); every model needs an anchor: checked here

    configs = dict(baseline_configs or {})
    if "per_benchmark" in methods and "per_benchmark" not in configs:
        configs["per_benchmark"] = PerBenchmarkConfig(benchmarks=tuple(np.asarray(matrix.benchmarks).astype(str)))

    def fit_args(fold: Fold, name: str) -> dict:
        return dict(
            name=name,
            seed=seed + fold.index,
            scores=scores,
            encodings=enc,
            fold=fold,
            trained=trained,
            held=held,
            model_config=model_config,
            train_config=train_config,
            baseline_config=configs.get(name),
            progress=progress and jobs == 1,
            router=router if name == "locus" else None,
            guard_margin=policy.guard_margin,
            benchmarks=np.asarray(matrix.benchmarks).astype(str) if name in ("locus", "query_groups") else None,
        )

    tasks = [(fold, name) for fold in splits for name in methods if name != "oracle"]  # in the order reported
    fitted = _fit_all(tasks, fit_args, jobs=jobs, threads=threads, log=log, total_folds=total_folds)
    scored = score_folds(splits, methods, fitted, scores, groups, bench, log=log, total_folds=total_folds)
    warnings, degenerate = label_warnings(scores, matrix.models)
    for warning in warnings:
        log(f"WARNING: {warning}")
    result_methods = summarise(scored, methods, groups, n_boot=n_boot, seed=seed, degenerate=degenerate)
    if costs is not None:
        costs = costs if costs.names == tuple(matrix.models) else costs.subset(matrix.models)
    verdict, frontier = _verdict_and_frontier(
        scored, result_methods, methods, matrix, splits, costs, n_boot=n_boot, seed=seed
    )
    return json_clean(
        {
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
                "threads": threads,  # torch threads of every fit: the results depend on it (float sums), not on jobs
                "vs_methods_intervals": "fold-stratified",  # LOCUS minus others: fold means, resampled within folds
                "encoding_dim": int(enc.shape[1]),
                "guard_margin": None if "locus" not in methods else policy.guard_margin,
                "train_config": config_dict(train_config),
                "model_config": config_dict(model_config),
                "baseline_configs": {k: config_dict(v) for k, v in (baseline_configs or {}).items()},
                "held_out_model_names": [matrix.models[i] for i in held],
                "locus_trained_here": router is None,
                "extra_groups": {k: list(v) for k, v in (extra_groups or {}).items()},
                "costs": None
                if costs is None
                else {
                    "basis": costs.basis,
                    "means": costs.basis_means,
                    "note": costs.note,
                    "models_of_unknown_cost": len(costs.unknown),
                    "unknown_cost": list(costs.unknown),
                },
            },
            "sizes": _sizes(scores, splits, trained, held, counts),
            "wall_s": round(time.perf_counter() - start, 2),
            "verdict": verdict,  # evaluation.verdict: does routing pay, or call the best single model
            "warnings": warnings,  # label_warnings: degenerate labels, a one-model pool
            "methods": result_methods,
            **({} if frontier is None else {"frontier": frontier["methods"], "frontier_folds": frontier["folds"]}),
        }
    )
