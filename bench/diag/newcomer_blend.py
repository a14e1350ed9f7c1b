"""Issue 57's candidate (b): the router's blend fitted where validation models play the newcomer.

    python -m bench.diag.newcomer_blend bench/.cache/case-8x500 bench/.cache/fits-case8x500 --epochs 20 --patience 5
    python -m bench.diag.newcomer_blend --grid 8 500 0 --only-folds 0 1 --epochs 20 --patience 5  # a small-data cell

The router's blend (query_groups.fit_blend: a x predictor logit + b x group-table logit + c) is fitted on the
validation cells of the models LOCUS was trained on, whose answers the set encoder and the predictor have seen; a
newcomer's have not been. Here each fold's in-training models are split in two halves (alternating by anchor
accuracy); a LOCUS is trained on each half (same settings), and the other half's validation cells are scored as a
newcomer's: embedded and profiled from its anchor evaluations (Router.pool_rows, as at onboarding), never trained
on. The blend is fitted on those cells (``newcomer``) or on them and the fold router's own validation cells
(``pooled``), then put on the fold's kept router (bench_case --fit-cache) in place of its blend. Printed: each
variant's routing accuracy minus the best single model's over all models, five folds, the protocol's fold-stratified
paired interval; and the blends. The weights move from half-pool routers to the full router: a candidate, not a
derivation.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bench.bench_small_data import cell_budget, draw_cell, held_out_rows
from bench.common import load_suite
from bench.diag.case_folds import CaseFolds, case_folds, print_against
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.methods import LocusMethod
from locus_model.evaluation.splits import kfold_splits
from locus_model.model import LocusConfig
from locus_model.query_groups import fit_blend, group_proba
from locus_model.router import Router, _predictor_logits
from locus_model.training import TrainConfig, train_locus


def newcomer_cells(router: Router, enc: np.ndarray, anchors: np.ndarray, val: np.ndarray, labels: np.ndarray):
    """(predictor logits, group P(correct), labels), each (M, Q_val), of models scored as newcomers by ``router``
    from their anchor evaluations (M, Q) on their validation cells (M, Q)."""
    val_q = np.flatnonzero(~np.isnan(val).all(axis=0))
    z, g = router.pool_rows(enc, anchors, labels)
    return (
        _predictor_logits(router.model, z, enc[val_q], "cpu"),
        group_proba(g, router.groups.membership(enc[val_q])),
        val[:, val_q],
    )


def grid_cell(n_models: int, n_questions: int, draw: int, seed: int = 0) -> CaseFolds:
    """bench_small_data's MMLU-Pro cell (models x questions, draw), the strongest model held out."""
    matrix, _ = load_suite("mmlu")
    rows, cols = draw_cell(
        matrix.scores.astype(np.float32), n_models, n_questions, seed=[seed, n_models, n_questions, draw]
    )
    scores = matrix.scores.astype(np.float32)[np.ix_(rows, cols)]
    held = held_out_rows(scores, "strongest", seed + draw)
    print("held out:", [matrix.models[rows[i]] for i in held])
    enc = np.asarray(encode_queries([matrix.queries[q] for q in cols], progress=False), np.float32)
    return CaseFolds(
        matrix,
        enc,
        scores,
        np.setdiff1d(np.arange(len(rows)), held),
        held,
        np.asarray(matrix.benchmarks).astype(str)[cols],
        kfold_splits(len(cols), folds=5, budget=cell_budget(len(cols), 5), seed=seed + draw),
    )


def trained_router(case: CaseFolds, fold, config: TrainConfig) -> Router:
    """The fold's router as the protocol trains it (the default blend)."""
    kept: dict[str, LocusMethod] = {}  # the fitted method, from on_fitted
    case.predict(
        "locus", fold, train_config=replace(config, seed=fold.index), on_fitted=lambda m: kept.setdefault("m", m)
    )
    router = kept["m"].router
    assert router is not None  # fitted
    return router


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", type=Path, nargs="?", help="the folder bench_case wrote (evaluations.parquet)")
    p.add_argument("fits", type=Path, nargs="?", help="its --fit-cache (the fold routers)")
    p.add_argument(
        "--grid",
        nargs=3,
        type=int,
        metavar=("MODELS", "QUESTIONS", "DRAW"),
        default=None,
        help="instead of a case: bench_small_data's MMLU-Pro cell and draw, the strongest model held out, "
        "each fold's router trained here",
    )
    p.add_argument("--only-folds", type=int, nargs="+", default=None)
    p.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    p.add_argument("--patience", type=int, default=TrainConfig.patience)
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 on a shared machine)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = TrainConfig(epochs=args.epochs, patience=args.patience)
    case = case_folds(args.case, args.budget) if args.grid is None else grid_cell(*args.grid)
    enc, scores, trained = case.encodings, case.scores, case.trained
    probs: dict[str, list[np.ndarray]] = {}
    truth = []
    for fold in [f for f in case.splits if args.only_folds is None or f.index in args.only_folds]:
        router = case.kept_router(args.fits, fold) if args.grid is None else trained_router(case, fold, config)
        if router is None:
            continue
        labels = case.benchmarks.astype(object)
        labels[fold.test] = ""  # as fit_and_predict hides the test queries' labels
        anchors, val = fold.budget_and_val(scores)
        order = trained[np.argsort(-np.nanmean(anchors[trained], axis=1))]
        halves = [order[0::2], order[1::2]]
        cells = []
        for k, half in enumerate(halves):  # train on one half, the other half plays the newcomer
            result = train_locus(
                enc,
                anchors[half],
                val[half],
                model_config=LocusConfig(query_dim=enc.shape[1]),
                train_config=replace(config, seed=fold.index),
                benchmarks=labels,
                progress=False,
            )
            other = halves[1 - k]
            cells.append(newcomer_cells(result.router, enc, anchors[other], val[other], labels))
        own = newcomer_cells(router, enc, anchors[trained], val[trained], labels)  # the default's cells
        blends = {
            "default": router.blend,
            "newcomer": fit_blend(*(np.concatenate(x) for x in zip(*cells))),
            "pooled": fit_blend(*(np.concatenate(x) for x in zip(*cells, own))),
        }
        for name, blend in blends.items():
            print(f"fold {fold.index} {name:<9} {blend.describe()}", flush=True)
            probs.setdefault(name, []).append(case.predict("locus", fold, Router(router.model, router.groups, blend)))
        probs.setdefault("best_single", []).append(case.predict("best_single", fold))
        truth.append(scores[:, fold.test])
    for group, rows in (("all", np.arange(len(scores))), ("held_out", case.held), ("in_training", trained)):
        print_against(probs, truth, rows, group, ("best_single", "default"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
