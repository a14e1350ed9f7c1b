"""How much per-query routing a router can reach on a suite, from the budget's anchors and from every training query.

`bench_accuracy.py` gives every method the same B anchor queries per model. This asks where the room is: for the
same folds (query splits, held-out models and anchors of `bench_accuracy.py --suite S --budgets B`), routing accuracy
over all models on each fold's test queries, pooled over the folds, of

- best single: the model with the highest mean score;
- category: per query, the model with the highest (smoothed) mean score on the queries of the query's benchmark
  (MMLU-Pro: its 14 categories), so query features reduced to one label;
- kNN: the KNNRouter baseline on the sentence encodings (k chosen on validation routing), and with k = 500
  (neighbourhoods as broad as a category);
- logistic: per model, an L2 logistic regression of its scores on the sentence encodings (C chosen on validation
  routing): whether the encodings carry the routing signal linearly;
- LOCUS (budget only): the fold's trained LOCUS as `--fit-cache` kept it, when present; with `--locus-category`
  also LOCUS trained (and cached) on the same anchors with the query encodings extended by a one-hot of the query's
  benchmark, which tests whether the predictor's query features are what keeps LOCUS at best single;

each once from the B anchors and once from every training query of the fold (about 9,600 on MMLU-Pro: what a router
could learn with 37x-300x the budget), plus the category router chosen on the test queries themselves (the most any
per-category router can reach) and the per-query oracle. Differences against best single from the same evaluations
carry a 95% paired bootstrap interval over the pooled test queries. Nothing is trained except the kNN's choice of k.

    .venv/bin/python -m bench.diag.routing_headroom --suite mmlu --budgets 128 256 1024 \
        --fit-cache bench/.cache/fits
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.common import CACHE, cached_fit_and_predict, fit_path, protocol_setup
from locus_model.evaluation.baselines import KNNConfig, PerBenchmark, PerBenchmarkConfig
from locus_model.evaluation.methods import fit_and_predict
from locus_model.stats.bootstrap import paired_bootstrap, routing_outcomes


def category_probs(
    scores: np.ndarray, benchmarks: np.ndarray, known_q: np.ndarray, test: np.ndarray, smoothing: float = 1.0
) -> np.ndarray:
    """(M, Q_test): each model's mean score on the known queries of each test query's benchmark, pulled toward its
    overall mean by `smoothing` pseudo-counts: the protocol's per_benchmark baseline fitted on the known queries."""
    masked = np.full_like(scores, np.nan, dtype=np.float32)
    masked[:, known_q] = scores[:, known_q]
    method = PerBenchmark(PerBenchmarkConfig(benchmarks=tuple(np.asarray(benchmarks).astype(str)), smoothing=smoothing))
    method.fit(np.zeros((len(benchmarks), 1), np.float32), masked)
    return method.predict_proba(np.arange(len(scores)), test).astype(np.float64)


def logistic_probs(
    scores: np.ndarray,
    encodings: np.ndarray,
    known_q: np.ndarray,
    val: np.ndarray,
    test: np.ndarray,
    val_rows: np.ndarray | None = None,
    cs: tuple[float, ...] = (0.01, 0.1, 1.0),
) -> np.ndarray:
    """(M, Q_test) P(correct) from one logistic regression per model on the encodings of its known queries; the
    inverse regularisation C is the one with the best routing among `val_rows` (default: every model) on the
    validation queries, as the protocol selects on the trained models' validation cells."""
    from sklearn.linear_model import LogisticRegression

    from locus_model.stats.metrics import routing_accuracy

    def fit(c: float, q: np.ndarray) -> np.ndarray:
        out = np.empty((len(scores), len(q)))
        for m in range(len(scores)):
            y = scores[m, known_q]
            ok = ~np.isnan(y)
            if len(np.unique(y[ok] >= 0.5)) < 2:  # one class only: its rate
                out[m] = float(np.mean(y[ok] >= 0.5)) if ok.any() else 0.0
                continue
            clf = LogisticRegression(C=c, max_iter=500).fit(encodings[known_q[ok]], y[ok] >= 0.5)
            out[m] = clf.predict_proba(encodings[q])[:, 1]
        return out

    rows = np.arange(len(scores)) if val_rows is None else np.asarray(val_rows)
    best = max(cs, key=lambda c: routing_accuracy(fit(c, val)[rows], scores[np.ix_(rows, val)]))
    return fit(best, test)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="mmlu")
    p.add_argument("--budgets", type=int, nargs="+", default=[128, 256, 1024])
    p.add_argument("--folds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits")
    p.add_argument("--tag", default="")
    p.add_argument(
        "--locus-category",
        action="store_true",
        help="also train LOCUS with the benchmark one-hot appended to the query encodings (cached)",
    )
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)

    rows: list[dict] = []
    memo: dict[tuple, dict[str, np.ndarray]] = {}  # per fold, the routers from every training query
    for budget in args.budgets:
        setup = protocol_setup(args.suite, budget=budget)
        scores, bench_of = setup.scores, setup.matrix.benchmarks.astype(str)
        outcomes: dict[str, list[np.ndarray]] = {}

        def add(name: str, probs: np.ndarray, fold) -> None:
            labels = scores[:, fold.test]
            outcomes.setdefault(name, []).append(routing_outcomes(np.asarray(probs, np.float64), labels))

        locus_folds = 0
        for f in args.folds:
            fold = setup.splits[f]
            every = replace(fold, anchors=fold.train)  # the same fold with every training query as an anchor
            for label, use in (("budget", fold), ("all training queries", every)):
                key = (f, fold.train.tobytes(), fold.test.tobytes())  # the same at every budget (seeded splits)
                if label == "budget" or key not in memo:
                    found = {
                        "best single": fit_and_predict(**{**setup.fit_args("best_single", use), "progress": False})[0],
                        "category": category_probs(scores, bench_of, use.anchors, fold.test),
                        "kNN": fit_and_predict(**{**setup.fit_args("knn", use), "progress": False})[0],
                        "kNN, k = 500": fit_and_predict(
                            **{**setup.fit_args("knn", use), "progress": False, "baseline_config": KNNConfig(ks=(500,))}
                        )[0],
                        "logistic": logistic_probs(
                            scores, setup.encodings, use.anchors, fold.val, fold.test, val_rows=setup.trained
                        ),
                    }
                    if label != "budget":
                        memo[key] = found
                for router, probs in (found if label == "budget" else memo[key]).items():
                    add(f"{router} | {label}", probs, fold)
            add(
                "category, chosen on the test queries",
                category_probs(scores, bench_of, fold.test, fold.test, 0.0),
                fold,
            )
            add("oracle", np.nan_to_num(scores[:, fold.test], nan=-1.0), fold)
            cached = fit_path(args.fit_cache, setup.fit_args("locus", fold), args.tag)
            if cached.is_file():
                with np.load(cached) as z:
                    add("LOCUS | budget", z["probs"], fold)
                locus_folds += 1
            if args.locus_category:
                onehot = (bench_of[:, None] == np.unique(bench_of)[None, :]).astype(np.float32)
                encodings = np.concatenate([setup.encodings, onehot], axis=1)
                fit = {
                    **setup.fit_args("locus", fold),
                    "encodings": encodings,
                    "model_config": replace(setup.model_config, query_dim=encodings.shape[1]),
                }
                probs, seconds, _ = cached_fit_and_predict(args.fit_cache, args.tag + "category-onehot")(**fit)
                add("LOCUS, encodings + benchmark one-hot | budget", probs, fold)
                print(f"budget {budget}: fold {f} LOCUS with the one-hot {seconds:.0f} s", file=sys.stderr, flush=True)
            print(f"budget {budget}: fold {f} done", file=sys.stderr, flush=True)

        pooled = {k: np.concatenate(v) for k, v in outcomes.items() if len(v) == len(args.folds)}
        print(
            f"\n### {args.suite}, budget {budget} ({len(args.folds)} folds, "
            f"{sum(len(setup.splits[f].test) for f in args.folds):,} "
            f"test queries pooled; LOCUS from {locus_folds} cached "
            f"folds{'' if locus_folds == len(args.folds) else ', so left out'})\n"
        )
        print("| router | from | routing | vs best single from the same evaluations (95% CI) |")
        print("|---|---|---|---|")
        for name, out in pooled.items():
            router, _, source = name.partition(" | ")
            ref = pooled.get(f"best single | {source}") if source else pooled["best single | all training queries"]
            if ref is None or ref is out:
                cmp = {"diff": None}
            else:
                cmp = paired_bootstrap(out, ref, seed=budget)
            cell = (
                "-"
                if cmp["diff"] is None
                else f"{cmp['diff'] * 100:+.1f} [{cmp['ci_low'] * 100:+.1f}, {cmp['ci_high'] * 100:+.1f}]"
            )
            print(f"| {router} | {source or 'the test labels'} | {np.nanmean(out) * 100:.1f} | {cell} |")
            rows.append(
                {
                    "budget": budget,
                    "router": router,
                    "from": source or "test labels",
                    "routing_acc": float(np.nanmean(out)),
                    "vs_best_single": cmp,
                }
            )
    if args.out is not None:
        args.out.write_text(json.dumps({"suite": args.suite, "folds": args.folds, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
