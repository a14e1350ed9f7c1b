"""Issue 57's candidates for scoring a newcomer on its own evidence, on a case's kept LOCUS fits.

    python -m bench.diag.newcomer_offsets bench/.cache/case-8x500 bench/.cache/fits-case8x500 [--strengths none 0 16 64]

Reads the case subset bench_case wrote (evaluations.parquet) and the fold checkpoints its --fit-cache kept, rebuilds
the protocol's folds and held-out models (seed 0, five folds, 0.2 held out, budget 256), and scores LOCUS's router on
each fold's test queries with the own-accuracy offset at each strength (``accuracy_offsets`` below; ``none`` = no
offset), printed as LOCUS minus the best single model over all models (the protocol's
fold-stratified paired interval).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.diag.case_folds import case_folds, print_against
from locus_model.evaluation.methods import LocusMethod


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), 1e-4, 1 - 1e-4)
    return np.log(p) - np.log1p(-p)


def accuracy_offsets(router_p: np.ndarray, scores: np.ndarray, strength: float) -> np.ndarray:
    """(M,) each model's logit offset that brings the router's mean P(correct) on the model's own evaluations to the
    accuracy it observed there, shrunk by ``n / (n + strength)`` (n: the model's evaluations; empirical Bayes).
    ``router_p`` and ``scores`` (M, Q) on the same cells, NaN where the model has no evaluation."""
    scores = np.asarray(scores, np.float64)
    known = ~np.isnan(scores)
    n = known.sum(axis=1)
    observed = (np.where(known, scores, 0.0).sum(axis=1) + 0.5) / (n + 1.0)  # +0.5 / +1: never exactly 0 or 1
    predicted = np.where(known, np.asarray(router_p, np.float64), 0.0).sum(axis=1) / np.maximum(n, 1)
    return (n / (n + strength) * (_logit(observed) - _logit(predicted))).astype(np.float32)


def with_offsets(p: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(M, Q) P(correct) with each model's logit moved by its offset (M,)."""
    return (1.0 / (1.0 + np.exp(-(_logit(p) + np.asarray(offsets, np.float64)[:, None])))).astype(np.float32)


def guarded(router: np.ndarray, best: np.ndarray, margin: float) -> np.ndarray:
    """(M, Q) scores that route as the router where its choice beats the best single model's P(correct) by more than
    ``margin``, else to the best single model (best: the best_single method's constant rows)."""
    b = int(np.argmax(best.mean(axis=1)))
    q = np.arange(router.shape[1])
    keep = router.max(axis=0) - router[b] > margin
    out = np.zeros_like(router)
    out[np.argmax(router, axis=0)[keep], q[keep]] = 1.0
    out[b, ~keep] = 1.0
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", type=Path, help="the folder bench_case wrote (evaluations.parquet)")
    p.add_argument("fits", type=Path, help="its --fit-cache")
    p.add_argument("--strengths", nargs="+", default=["none", "0", "16", "64"])
    p.add_argument(
        "--margins",
        nargs="+",
        type=float,
        default=[0.05, 0.1],
        help="candidate (c): the best single model wherever the router's choice is not above it by this "
        "margin of P(correct) (the router without offset)",
    )
    p.add_argument("--budget", type=int, default=256)
    args = p.parse_args(argv)
    if "none" not in args.strengths:
        raise SystemExit("--strengths must include none (the router the guard starts from)")
    case = case_folds(args.case, args.budget)
    probs: dict[str, list[np.ndarray]] = {}
    labels = []
    for fold in case.splits:
        router = case.kept_router(args.fits, fold)
        if router is None:
            continue
        kept: dict[str, LocusMethod] = {}  # the fitted method, from on_fitted
        case.predict("locus", fold, router, on_fitted=lambda m: kept.setdefault("m", m))
        method = kept["m"]
        rows = np.concatenate([np.arange(len(case.trained)), len(case.trained) + np.arange(len(case.held))])
        order = np.concatenate([case.trained, case.held])  # method rows -> matrix rows
        own = fold.budget_and_val(case.scores)[0][order]  # the anchor evaluations each model rests on
        seen = np.flatnonzero(~np.isnan(own).all(axis=0))
        p_test, p_own = method.predict_proba(rows, fold.test), method.predict_proba(rows, seen)
        for s in args.strengths:
            shifted = p_test if s == "none" else with_offsets(p_test, accuracy_offsets(p_own, own[:, seen], float(s)))
            out = np.empty((len(case.scores), len(fold.test)), np.float32)
            out[order] = shifted
            probs.setdefault(f"locus_{s}", []).append(out)
        best = case.predict("best_single", fold)
        probs.setdefault("best_single", []).append(best)
        for margin in args.margins:
            probs.setdefault(f"guard_{margin:g}", []).append(guarded(probs["locus_none"][-1], best, margin))
        labels.append(case.scores[:, fold.test])
    print_against(probs, labels, np.arange(len(case.scores)), "all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
