"""The group profiles' pseudo-count, paired on one training: one estimated by empirical Bayes (``group_smoothing``
below) against the default fixed 1.0 (query_groups.SMOOTHING), LOCUS's router refitted on the same trained predictor
(fit_router's groups and blend; nothing else differs), on bench_small_data's draws and folds or a case file. The
estimate lost on the issue-57 case and on metabench draws (docs/experiments.md): not the default.

    python -m bench.diag.group_smoothing --suite mmlu --models 8 --questions 500 --draws 3 --epochs 20
    python -m bench.diag.group_smoothing --suite metabench --models all --questions 1075 --draws 1 --budget 256 \
        --train-option max_steps=100 --train-option latent_steps=300 --train-option finetune_steps=200

Per unit (draw, held-out choice, fold): LOCUS trained once on the in-training models' anchors; ``locus_k1`` = its
router (the default), ``locus_eb`` = fit_router again with the estimated pseudo-count; the per-benchmark rule (k = 1.0)
and best single alongside. Printed and written (bench/results/group_smoothing_<suite>_<models>x<questions>.json):
per held-out choice the mean routing (and the two routers' AUC), minus best single and locus_eb minus locus_k1, 95%
intervals over the units.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from bench.bench_small_data import HOLDOUTS, cell_budget, draw_cell, held_out_rows, run_unit
from bench.bench_small_pools import chosen_scores, interval
from bench.common import RESULTS, apply_options, load_suite
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.methods import LocusMethod, fit_and_predict
from locus_model.evaluation.splits import kfold_splits
from locus_model.router import fit_router
from locus_model.routing import routing_scores
from locus_model.stats.metrics import roc_auc
from locus_model.training import TrainConfig


def group_smoothing(scores: np.ndarray, membership: np.ndarray, floor: float = 1.0, cap: float = 1e4) -> float:
    """The pseudo-count k of query_groups.group_rates that the models' own answers call for (empirical Bayes, method
    of moments): a model's group accuracy is its true one plus binomial noise, the true ones spread around its overall
    accuracy p with a variance tau^2 shared by models and groups, and ``n / (n + k)`` with ``k = p (1 - p) / tau^2``
    minimises the expected squared error. tau^2: the mean squared gap between group and overall accuracy less its
    noise part ``p (1 - p) (1 / n_g - 1 / n)`` over the (model, group) cells with answers inside and outside the
    group; ``scores`` (M, Q), NaN = not evaluated; ``membership`` (Q, G). In [floor, cap]."""
    scores = np.asarray(scores, dtype=np.float64)
    known = ~np.isnan(scores)
    y, w = np.where(known, scores, 0.0), np.asarray(membership, dtype=np.float64)
    total, counts = known.sum(1).astype(np.float64), known.astype(np.float64) @ w  # (M,), (M, G)
    cells = (counts >= 1) & (total[:, None] > counts)
    if w.shape[1] < 2 or not cells.any():
        return floor
    overall = (y.sum(1) / np.maximum(total, 1))[:, None]
    rates = (y @ w) / np.maximum(counts, 1e-12)
    noise = overall * (1 - overall) * (1 / np.maximum(counts, 1e-12) - 1 / np.maximum(total[:, None], 1))
    spread = float(((rates - overall) ** 2 - noise)[cells].mean())
    answer_variance = float((overall * (1 - overall) * np.ones_like(counts))[cells].mean())
    return cap if spread <= answer_variance / cap else float(np.clip(answer_variance / spread, floor, cap))


def locus_pair(scores, enc, bench, fold, trained, held, seed, train_config) -> tuple[dict, dict]:
    """({"locus_k1": probs, "locus_eb": probs, "locus_guarded": routing scores}, facts) of one unit: one training,
    two routers; locus_k1's P(correct) routed as the product routes it (under its router's guard) too."""
    kept: dict[str, LocusMethod] = {}  # the fitted method, from on_fitted
    args = dict(scores=scores, encodings=enc, fold=fold, trained=trained, held=held, benchmarks=bench, seed=seed)
    fitted = fit_and_predict(name="locus", train_config=train_config, on_fitted=lambda m: kept.update(m=m), **args)
    probs = fitted.probs
    router, labels = kept["m"].router, kept["m"].benchmarks  # the labels LOCUS read: the test queries' blanked
    assert router is not None  # fitted
    budget, val = fold.budget_and_val(scores)
    k = group_smoothing(budget[trained], router.groups.membership(enc, labels))
    eb, _ = fit_router(router.model, enc, budget[trained], val[trained], labels, smoothing=k)
    probs_eb = fit_and_predict(name="locus", router=eb, **args).probs
    facts = {"smoothing": k, "blend_eb": eb.blend.to_dict(), "blend_k1": router.blend.to_dict()}
    return {"locus_eb": probs_eb, "locus_k1": probs, "locus_guarded": fitted.routing_scores()}, facts


def add_unit_arguments(p: argparse.ArgumentParser) -> None:
    """The options that say which units (draw, held-out choice, fold) run: :func:`units_of`'s."""
    p.add_argument("--suite", default="mmlu", choices=("mmlu", "metabench", "ae1"))
    p.add_argument("--models", default="8")
    p.add_argument("--questions", type=int, default=500)
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--from-draw", type=int, default=0)
    p.add_argument("--holdouts", nargs="+", default=list(HOLDOUTS), choices=HOLDOUTS)
    p.add_argument("--only-folds", type=int, nargs="*", default=None)
    p.add_argument("--budget", type=int, default=256)
    p.add_argument(
        "--case",
        type=Path,
        default=None,
        help="a case file (bench_case's): its models and questions, one "
        "draw, the protocol's 0.2 held out (as `locus evaluate`); --suite mmlu",
    )
    p.add_argument("--seed", type=int, default=0)


def units_of(args: argparse.Namespace, matrix) -> Iterator[tuple]:
    """(draw, held-out choice, fold, model names, encodings, scores, labels, trained rows, held rows) of every unit the
    options name: bench_small_data's draws (or the case's models and questions) and five query folds."""
    scores_all, bench_all = matrix.scores.astype(np.float32), np.asarray(matrix.benchmarks).astype(str)
    n_models = None if args.models == "all" else int(args.models)
    for d in range(args.from_draw, args.draws):
        rows, cols = draw_cell(scores_all, n_models, args.questions, seed=[args.seed, n_models or 0, args.questions, d])
        if args.case is not None:  # the case's models and questions instead of a draw
            spec = json.loads(args.case.read_text())
            rows = np.array(sorted(matrix.models.index(m) for m in spec["models"]))
            wanted = {str(q) for q in spec["query_ids"]}
            cols = np.array([i for i, q in enumerate(matrix.query_ids) if str(q) in wanted])
        enc = np.asarray(encode_queries([matrix.queries[q] for q in cols], progress=False), np.float32)
        scores, bench = scores_all[np.ix_(rows, cols)], bench_all[cols]
        budget = cell_budget(len(cols), 5, args.budget)
        for holdout in args.holdouts:
            held = held_out_rows(scores, holdout, args.seed + d)
            trained = np.setdiff1d(np.arange(len(rows)), held)
            for fold in kfold_splits(len(cols), folds=5, budget=budget, seed=args.seed + d):
                if args.only_folds is None or fold.index in args.only_folds:
                    yield d, holdout, fold, [matrix.models[r] for r in rows], enc, scores, bench, trained, held


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_unit_arguments(p)
    p.add_argument("--epochs", type=int, default=None, help="LOCUS max epochs (default: TrainConfig's)")
    p.add_argument("--train-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--guards",
        type=float,
        nargs="*",
        default=[],
        metavar="MARGIN",
        help="also score the default router guarded toward the model most accurate on its own anchors",
    )
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    train_config = apply_options(TrainConfig(device="cpu", seed=args.seed), args.train_option)
    if args.epochs is not None:
        train_config = replace(train_config, epochs=args.epochs)
    matrix, source = load_suite(args.suite)
    out = args.out or RESULTS / f"group_smoothing_{args.suite}_{args.models}x{args.questions}.json"
    units, start = [], time.perf_counter()
    for d, holdout, fold, _, enc, scores, bench, trained, held in units_of(args, matrix):
        labels = scores[:, fold.test]
        probs, facts = locus_pair(scores, enc, bench, fold, trained, held, args.seed + fold.index, train_config)
        own = np.nanmean(fold.budget_and_val(scores)[0], axis=1)  # each model's accuracy on its anchors
        for margin in args.guards:
            probs[f"guard_{margin:g}"] = routing_scores(
                probs["locus_k1"], own, margin
            )  # trial (e): raw anchor accuracy
        for name in ("per_benchmark", "best_single"):
            probs[name] = run_unit(name, scores, enc, bench, fold, trained, held, args.seed + fold.index)
        unit = {
            "holdout": holdout,
            "draw": d,
            "fold": fold.index,
            **facts,
            "routing": {k: float(chosen_scores(v, labels).mean()) for k, v in probs.items()},
            "auc": {k: roc_auc(probs[k], labels) for k in ("locus_eb", "locus_k1")},
        }
        units.append(unit)
        print(
            f"[{time.perf_counter() - start:6.0f} s] draw {d} {holdout} fold {fold.index}: k "
            f"{facts['smoothing']:.1f} " + " ".join(f"{m} {100 * v:.1f}" for m, v in unit["routing"].items()),
            flush=True,
        )
    summary = {}
    for holdout in sorted({u["holdout"] for u in units}):
        mine = [u for u in units if u["holdout"] == holdout]
        r = {k: np.array([u["routing"][k] for u in mine]) for k in mine[0]["routing"]}
        summary[holdout] = {
            "units": len(mine),
            "routing": {k: float(v.mean()) for k, v in r.items()},
            "locus_eb_minus_best_single": interval(r["locus_eb"] - r["best_single"]),
            "locus_k1_minus_best_single": interval(r["locus_k1"] - r["best_single"]),
            "locus_eb_minus_locus_k1": interval(r["locus_eb"] - r["locus_k1"]),
            **{
                f"{g}_minus_{ref}": interval(r[g] - r[ref])
                for g in r
                if g.startswith("guard_")
                for ref in ("best_single", "locus_k1")
            },
            "locus_guarded_minus_best_single": interval(r["locus_guarded"] - r["best_single"]),
            "locus_guarded_minus_locus_k1": interval(r["locus_guarded"] - r["locus_k1"]),
        }
        if all("auc" in u for u in mine):
            auc = {k: np.array([u["auc"][k] for u in mine]) for k in ("locus_eb", "locus_k1")}
            summary[holdout]["auc"] = {k: float(v.mean()) for k, v in auc.items()}
            summary[holdout]["auc_locus_eb_minus_locus_k1"] = interval(auc["locus_eb"] - auc["locus_k1"])
        s = summary[holdout]
        print(
            holdout,
            json.dumps(
                {
                    k: {kk: round(100 * vv, 2) for kk, vv in v.items()} if isinstance(v, dict) else v
                    for k, v in s.items()
                }
            ),
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "settings": {
                    **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "source": source,
                },
                "summary": summary,
                "units": units,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
