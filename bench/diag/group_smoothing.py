"""The group profiles' pseudo-count, paired on one training: the estimated one (query_groups.group_smoothing, the
default) against the former fixed 1.0, LOCUS's router refitted on the same trained predictor (fit_router's groups and
blend; nothing else differs), on bench_small_data's draws and folds.

    python -m bench.diag.group_smoothing --suite mmlu --models 8 --questions 500 --draws 3 --epochs 20
    python -m bench.diag.group_smoothing --suite metabench --models all --questions 1075 --draws 1 --budget 256 \
        --train-option max_steps=100 --train-option latent_steps=300 --train-option finetune_steps=200

Per unit (draw, held-out choice, fold): LOCUS trained once on the in-training models' anchors; ``locus`` = its router
(the estimated pseudo-count), ``locus_k1`` = fit_router again with smoothing 1.0; the per-benchmark rule (k = 1.0, a
baseline) and best single alongside. Printed and written (bench/results/group_smoothing_<suite>_<models>x<questions>.json):
per held-out choice the mean routing (and the two routers' AUC), minus best single and locus minus locus_k1, 95%
intervals over the units.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bench.bench_small_data import HOLDOUTS, cell_budget, draw_cell, held_out_rows, run_unit
from bench.bench_small_pools import chosen_scores, interval
from bench.common import RESULTS, apply_options, load_suite
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.methods import fit_and_predict
from locus_model.evaluation.splits import kfold_splits
from locus_model.stats.metrics import roc_auc
from locus_model.router import fit_router
from locus_model.training import TrainConfig


def locus_pair(scores, enc, bench, fold, trained, held, seed, train_config) -> tuple[dict, dict]:
    """({"locus": probs, "locus_k1": probs}, facts) of one unit: one training, two routers."""
    kept = {}
    args = dict(scores=scores, encodings=enc, fold=fold, trained=trained, held=held, benchmarks=bench, seed=seed)
    probs, _ = fit_and_predict(name="locus", train_config=train_config, on_fitted=lambda m: kept.update(m=m), **args)
    router = kept["m"].router
    budget, val = fold.budget_and_val(scores)
    labels = np.asarray(bench).astype(str).astype(object)
    labels[np.asarray(fold.test)] = ""
    k1, _ = fit_router(router.model, enc, budget[trained], val[trained], labels, smoothing=1.0)
    probs_k1, _ = fit_and_predict(name="locus", router=k1, **args)
    facts = {"smoothing": router.groups.smoothing, "blend": router.blend.to_dict(), "blend_k1": k1.blend.to_dict()}
    return {"locus": probs, "locus_k1": probs_k1}, facts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="mmlu", choices=("mmlu", "metabench", "ae1"))
    p.add_argument("--models", default="8")
    p.add_argument("--questions", type=int, default=500)
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--from-draw", type=int, default=0)
    p.add_argument("--holdouts", nargs="+", default=list(HOLDOUTS), choices=HOLDOUTS)
    p.add_argument("--only-folds", type=int, nargs="*", default=None)
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--epochs", type=int, default=None, help="LOCUS max epochs (default: TrainConfig's)")
    p.add_argument("--train-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    train_config = apply_options(TrainConfig(device="cpu", seed=args.seed), args.train_option)
    if args.epochs is not None:
        train_config = replace(train_config, epochs=args.epochs)
    matrix, source = load_suite(args.suite)
    scores_all, bench_all = matrix.scores.astype(np.float32), np.asarray(matrix.benchmarks).astype(str)
    n_models = None if args.models == "all" else int(args.models)
    out = args.out or RESULTS / f"group_smoothing_{args.suite}_{args.models}x{args.questions}.json"
    units, start = [], time.perf_counter()
    for d in range(args.from_draw, args.draws):
        rows, cols = draw_cell(scores_all, n_models, args.questions, seed=[args.seed, n_models or 0, args.questions, d])
        enc = np.asarray(encode_queries([matrix.queries[q] for q in cols], progress=False), np.float32)
        scores, bench = scores_all[np.ix_(rows, cols)], bench_all[cols]
        budget = cell_budget(len(cols), 5, args.budget)
        for holdout in args.holdouts:
            held = held_out_rows(scores, holdout, args.seed + d)
            trained = np.setdiff1d(np.arange(len(rows)), held)
            for fold in kfold_splits(len(cols), folds=5, budget=budget, seed=args.seed + d):
                if args.only_folds is not None and fold.index not in args.only_folds:
                    continue
                labels = scores[:, fold.test]
                probs, facts = locus_pair(scores, enc, bench, fold, trained, held, args.seed + fold.index, train_config)
                for name in ("per_benchmark", "best_single"):
                    probs[name] = run_unit(name, scores, enc, bench, fold, trained, held, args.seed + fold.index)
                unit = {"holdout": holdout, "draw": d, "fold": fold.index, **facts,
                        "routing": {k: float(chosen_scores(v, labels).mean()) for k, v in probs.items()},
                        "auc": {k: roc_auc(probs[k], labels) for k in ("locus", "locus_k1")}}
                units.append(unit)
                print(f"[{time.perf_counter() - start:6.0f} s] draw {d} {holdout} fold {fold.index}: k "
                      f"{facts['smoothing']:.1f} " + " ".join(f"{m} {100 * v:.1f}" for m, v in unit["routing"].items()),
                      flush=True)
    summary = {}
    for holdout in sorted({u["holdout"] for u in units}):
        mine = [u for u in units if u["holdout"] == holdout]
        r = {k: np.array([u["routing"][k] for u in mine]) for k in mine[0]["routing"]}
        summary[holdout] = {"units": len(mine), "routing": {k: float(v.mean()) for k, v in r.items()},
                            "locus_minus_best_single": interval(r["locus"] - r["best_single"]),
                            "locus_k1_minus_best_single": interval(r["locus_k1"] - r["best_single"]),
                            "locus_minus_locus_k1": interval(r["locus"] - r["locus_k1"])}
        if all("auc" in u for u in mine):
            auc = {k: np.array([u["auc"][k] for u in mine]) for k in ("locus", "locus_k1")}
            summary[holdout]["auc"] = {k: float(v.mean()) for k, v in auc.items()}
            summary[holdout]["auc_locus_minus_locus_k1"] = interval(auc["locus"] - auc["locus_k1"])
        s = summary[holdout]
        print(holdout, json.dumps({k: {kk: round(100 * vv, 2) for kk, vv in v.items()} if isinstance(v, dict) else v
                                   for k, v in s.items()}))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": {**{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                            "source": source}, "summary": summary, "units": units}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
