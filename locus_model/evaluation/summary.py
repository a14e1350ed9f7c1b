"""The protocol's scores and their summary: every (fold, method, group) scored on the test queries, then mean / std
over folds with the paired-bootstrap comparisons (each method vs best_single; LOCUS vs every method), all from one
set of resamples per group, so that a figure printed twice (LOCUS vs best single: the verdict, the table) is one
figure; none when the labels cannot tell methods apart (label_warnings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from locus_model.evaluation.methods import Fitted
from locus_model.evaluation.splits import Fold
from locus_model.routing.frontier import evaluate_frontiers
from locus_model.stats.bootstrap import bootstrap_draws, routing_outcomes
from locus_model.stats.metrics import METRICS, score_predictions

REFERENCE = "best_single"  # the method every other one is compared with by paired bootstrap


def _mean_std(values: Sequence[float]) -> dict:
    vals = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    vals = vals[~np.isnan(vals)]
    if len(vals) == 0:
        return {"mean": None, "std": None}
    return {"mean": float(vals.mean()), "std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0}


@dataclass
class FoldScores:
    """Per method and group, one entry per fold: metrics, routing outcomes, probs, routing scores; the labels per
    group."""

    per_fold: dict[str, dict[str, list[dict]]]
    outcomes: dict[str, dict[str, list[np.ndarray]]]
    probs: dict[str, dict[str, list[np.ndarray]]]  # (M_g, Q_test)
    labels: dict[str, list[np.ndarray]]
    route: dict[str, dict[str, list[np.ndarray]]]  # (M_g, Q_test) what ranks: probs less a guard's handicap


def score_folds(
    splits: list[Fold],
    methods: list[str],
    fitted: dict,
    scores: np.ndarray,
    groups: dict[str, np.ndarray],
    bench: np.ndarray,
    *,
    log: Callable[[str], None],
    total_folds: int,
) -> FoldScores:
    """Every method's test-query metrics per fold and group (per benchmark too); the oracle knows the labels. A
    method with a guard (LOCUS) routes each group's queries by its routing scores among the group's labelled models
    (methods.Fitted.routing_scores)."""

    def empty() -> dict[str, dict[str, list]]:
        return {m: {g: [] for g in groups} for m in methods}

    out = FoldScores(empty(), empty(), empty(), {g: [] for g in groups}, empty())
    for fold in splits:
        labels = scores[:, fold.test]  # (M, Qte)
        for name in methods:
            fit = Fitted(np.nan_to_num(labels, nan=0.0), 0.0) if name == "oracle" else fitted[fold.index, name]
            probs = fit.probs  # the oracle knows the answers: routing = any model correct
            for group, rows in groups.items():
                p, y = probs[rows], labels[rows]
                if np.isnan(y).all():
                    continue
                r = fit.routing_scores(rows, ~np.isnan(y))
                in_bench = {b: bench[fold.test] == b for b in sorted(set(bench[fold.test]))}
                result: dict[str, Any] = score_predictions(p, y, r)  # the metrics, then per_benchmark: {b: metrics}
                result["per_benchmark"] = {
                    b: score_predictions(p[:, c], y[:, c], r[:, c])
                    for b, c in in_bench.items()
                    if not np.isnan(y[:, c]).all()
                }
                out.per_fold[name][group].append(result)
                out.outcomes[name][group].append(routing_outcomes(r, y))
                out.probs[name][group].append(p)
                out.route[name][group].append(r)
                if name == REFERENCE:
                    out.labels[group].append(y)
            log(
                f"fold {fold.index + 1}/{total_folds} {name:<12} routing(all) "
                f"{out.per_fold[name]['all'][-1]['routing_acc']:.4f}"
            )
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
        out.append(
            f"every score is {float(seen[0]):g}: the labels carry no information, every method scores the "
            "same on them; no interval or difference is reported, nor 'correct' and AUC (they compare each "
            "prediction with label >= 0.5, which is the same for every cell here)"
        )
        degenerate = True
    elif (
        seen.size
        and not (
            np.where(np.isnan(scores), -np.inf, scores).max(axis=0)
            > np.where(np.isnan(scores), np.inf, scores).min(axis=0)
        ).any()
    ):
        out.append(
            "no query on which two models' scores differ: every routing choice is as good as any other; "
            "no interval or difference is reported"
        )
        degenerate = True
    return out, degenerate


def _no_interval(stat: dict) -> dict:
    return {k: None for k in stat}


def summarise(
    scored: FoldScores,
    methods: list[str],
    groups: dict[str, np.ndarray],
    *,
    n_boot: int,
    seed: int,
    degenerate: bool = False,
) -> dict[str, dict]:
    """Mean/std over folds per method and group, with the paired bootstrap comparisons (none when ``degenerate``:
    see label_warnings)."""
    result_methods: dict[str, dict] = {}
    seen = np.concatenate([np.ravel(y) for ys in scored.labels.values() for y in ys]) if scored.labels else np.zeros(0)
    seen = seen[~np.isnan(seen)]
    constant = bool(degenerate and seen.size and seen.min() == seen.max())  # every label the same value
    resampled = {
        group: bootstrap_draws(
            {m: scored.probs[m][group] for m in methods},
            scored.labels[group],
            n_boot=n_boot,
            seed=seed,
            route={m: scored.route[m][group] for m in methods},
        )
        for group in groups
        if scored.labels[group]
    }
    for name in methods:
        result_methods[name] = {}
        for group in groups:
            folds_res = scored.per_fold[name][group]
            if not folds_res:
                continue
            entry: dict[str, Any] = {k: _mean_std([r[k] for r in folds_res]) for k in METRICS}
            benches = sorted({b for r in folds_res for b in r["per_benchmark"]})
            entry["per_benchmark"] = {
                b: {
                    k: _mean_std([r["per_benchmark"][b][k] for r in folds_res if b in r["per_benchmark"]])
                    for k in METRICS
                }
                for b in benches
            }
            if constant:  # e.g. all 0.5: 'correct' would only count predictions above 0.5, from 0 to 100 by method
                for stats in (entry, *entry["per_benchmark"].values()):
                    stats.update({k: _no_interval(stats[k]) for k in ("correctness_acc", "auc")})
            if name != REFERENCE:  # one resampling per group for every comparison (LOCUS's verdict included)
                stat = resampled[group].compare(name, REFERENCE)["routing_acc"]
                entry["vs_best_single"] = _no_interval(stat) if degenerate else stat
            if name == "locus":  # LOCUS against every other method on the same test queries, folds as strata
                entry["vs_methods"] = {
                    m: resampled[group].compare("locus", m)
                    for m in resampled[group].point
                    if m not in ("locus", "oracle")
                }  # diff = difference of the fold means
                if degenerate:
                    entry["vs_methods"] = {
                        m: {k: _no_interval(v) for k, v in s.items()} for m, s in entry["vs_methods"].items()
                    }
            result_methods[name][group] = entry
    return result_methods


def frontier_summary(
    scored: FoldScores,
    methods: list[str],
    fold_costs: list[np.ndarray],
    names: Sequence[str],
    *,
    n_boot: int,
    seed: int,
) -> dict:
    """Every method's quality-cost frontier on each fold's test queries among all the models
    (locus_model.routing.frontier.evaluate_frontiers): the cost-aware rule on each method's P(correct), the
    two-model threshold routers and random mixing; the best single model is best_single's choice (the best on the
    anchors among the models of known cost). fold_costs: (M, Q_test) per fold, NaN = unknown."""

    labels = scored.labels["all"]
    if len(labels) != len(fold_costs):
        raise ValueError(f"frontier_summary: {len(fold_costs)} folds of costs for {len(labels)} folds of labels")
    probs = {m: scored.route[m]["all"] for m in methods if len(scored.route[m]["all"]) == len(labels)}  # what ranks
    if REFERENCE in probs:  # its quality-weight-1 end is the table's best single model, not a cheaper equal
        probs[REFERENCE] = [ties_to_lower_row(p) for p in probs[REFERENCE]]
    rates = [p.mean(axis=1) for p in scored.probs[REFERENCE]["all"]]  # best_single: each model's anchor mean rate
    return evaluate_frontiers(probs, labels, fold_costs, rates, names=names, n_boot=n_boot, seed=seed)


def ties_to_lower_row(probs: np.ndarray) -> np.ndarray:  # (M, Q) -> (M, Q)
    """``probs`` with exact ties between models broken toward the lower row, every other order unchanged: each row
    less row x (the smallest gap between distinct values) / (2 M). The protocol's tables route by the first of
    equals (stats.bootstrap.routing_outcomes), the cost-aware rule by the cheaper of equals; best_single's P are
    anchor rates, where two models tie often (k / n_anchors each), so without this its frontier's quality-weight-1
    end is a cheaper equal, less accurate on the test queries, and the plot's best-single line and the frontier
    table disagree with the methods table and the star."""
    p = np.asarray(probs, np.float64)
    values = np.unique(p)
    gap = float(np.diff(values).min()) if len(values) > 1 else 1.0
    return p - np.arange(len(p), dtype=np.float64)[:, None] * gap / (2 * max(len(p), 1))
