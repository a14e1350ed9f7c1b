"""Does a model's embedding keep its per-benchmark profile, or only its accuracy?

Per fold of `bench_accuracy.py --suite S --budgets B` (the LOCUS of its --fit-cache), every model is embedded from its
B anchor evaluations (as bench_geometry.py does). The target is each model's *profile* on the fold's test queries:
its accuracy per benchmark (MMLU-Pro: category) minus its overall accuracy, so the part of "which model for which
query" that a per-benchmark router uses. Leave-one-model-out R^2 (pooled over models x benchmarks) of:

- ridge regression from the embedding z to the profile (alpha chosen inside each training split);
- the same ridge from the model's overall anchor accuracy only (what an offset alone can tell);
- the profile measured directly on the model's B anchors (no learning: what the evaluations themselves say);
- the same ridge from the accuracy and the anchors' profile together: how much the B evaluations tell beyond the
  accuracy, once their noise is shrunk.

Much of a profile follows from the accuracy alone (strong models gain most on the hard benchmarks). An embedding
that keeps the rest scores above the accuracy-only ridge, toward the accuracy + profile ridge; one that keeps only
the accuracy scores like the accuracy-only ridge.

    .venv/bin/python -m bench.diag.embedding_profile --suite mmlu --budget 1024 --fit-cache bench/.cache/fits
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.common import CACHE, fold_locus, protocol_setup
from locus_model.infer import embed_evaluation_sets


def profile(scores: np.ndarray, benchmarks: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(M, B) each model's mean score per benchmark on `queries` minus its mean over them (NaN cells skipped)."""
    y = scores[:, queries]
    cats = np.unique(benchmarks)
    per = np.stack([np.nanmean(y[:, benchmarks[queries] == c], axis=1) for c in cats], axis=1)
    return per - np.nanmean(y, axis=1, keepdims=True)


def r2(pred: np.ndarray, truth: np.ndarray) -> float:
    ok = ~(np.isnan(pred) | np.isnan(truth))
    return float(1 - np.sum((pred[ok] - truth[ok]) ** 2) / np.sum((truth[ok] - truth[ok].mean()) ** 2))


def loo_ridge(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Leave-one-row-out predictions of y (M, B) from x (M, F) by RidgeCV (standardised x)."""
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out = np.empty_like(y)
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        fit = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 4, 13))).fit(x[rest], y[rest])
        out[i] = fit.predict(x[i : i + 1])[0]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="mmlu")
    p.add_argument("--budget", type=int, default=1024)
    p.add_argument("--folds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits")
    args = p.parse_args(argv)
    setup = protocol_setup(args.suite, budget=args.budget)
    bench_of = setup.matrix.benchmarks.astype(str)
    rows = []
    for f in args.folds:
        fold = setup.splits[f]
        z = embed_evaluation_sets(
            fold_locus(setup, fold, args.fit_cache).model, setup.encodings, setup.anchor_sets(fold)
        )
        truth = profile(setup.scores, bench_of, fold.test)
        accuracy = np.nanmean(setup.scores[:, fold.anchors], axis=1, keepdims=True)
        seen = profile(setup.scores, bench_of, fold.anchors)
        rows.append(
            (
                f,
                r2(loo_ridge(np.asarray(z, np.float64), truth), truth),
                r2(loo_ridge(accuracy, truth), truth),
                r2(seen, truth),
                r2(loo_ridge(np.concatenate([accuracy, np.nan_to_num(seen)], axis=1), truth), truth),
            )
        )
        print(f"fold {f}: " + ", ".join(f"{v:+.3f}" for v in rows[-1][1:]), file=sys.stderr, flush=True)
    print(
        f"\n{args.suite}, budget {args.budget}: leave-one-model-out R^2 of each model's per-benchmark profile on the "
        f"test queries ({len(setup.matrix.models)} models x {len(np.unique(bench_of))} benchmarks)\n"
    )
    print(
        "| fold | from the embedding (ridge) | from accuracy only (ridge) | the anchors' own profile | "
        "from accuracy + the anchors' profile (ridge) |"
    )
    print("|---|---|---|---|---|")
    for f, *values in rows:
        print(f"| {f} | " + " | ".join(f"{v:+.3f}" for v in values) + " |")
    m = np.array([r[1:] for r in rows])
    print("| mean | " + " | ".join(f"{v:+.3f}" for v in m.mean(axis=0)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
