"""Routing on small data (issue 57): models x questions drawn from a real matrix, five query folds per draw.

    python -m bench.bench_small_data --suite mmlu --models 8 --questions 500 --draws 3
    python -m bench.bench_small_data --suite metabench --models 4 8 16 --questions 200 500 1500 --methods
    irt,knn,per_benchmark,best_single

Per (suite, models, questions, draw): a seeded draw of that many models and questions of the suite's matrix
(``all`` = every model), then the protocol's five query folds (``kfold_splits``: validation slice, the budget's anchors
from the rest; the budget is 256 or the fold's training queries, the smaller) and two ways of choosing the held-out
(onboarded) models: ``fraction`` -- 0.2 of the draw, as `locus evaluate` holds out by default -- and ``strongest`` --
the draw's best model on all its questions, the newcomer above every model trained on. Every method (LOCUS, EmbedLLM-MF,
IRT, kNN, the per-benchmark rule, best single; bench_small_pools' fit_and_predict) is fitted on the in-training
models' anchors, onboards the held-out ones from theirs, and routes each fold's test queries among all the draw's
models. Printed and written (bench/results/small_data_<suite>.json): per cell the mean routing accuracy, and each
method minus the best single model and minus the per-benchmark rule with a 95% interval from resampling the
(draw, fold) units (bench_small_pools.interval).
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

from bench.bench_small_pools import chosen_scores, interval
from bench.common import RESULTS, load_suite
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.methods import fit_and_predict
from locus_model.evaluation.splits import choose_held_out, kfold_splits

METHODS = ("locus", "embedllm_mf", "irt", "knn", "per_benchmark", "best_single")
HOLDOUTS = ("fraction", "strongest")


def draw_cell(
    scores: np.ndarray, n_models: int | None, n_questions: int, seed: int | list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(model rows, question columns) of one seeded draw: ``n_models`` models (None = all) and ``n_questions``
    questions on which every drawn model has an evaluation (fewer when the matrix has fewer), both sorted."""
    rng = np.random.default_rng(seed)
    m = len(scores)
    models = np.arange(m) if n_models is None or n_models >= m else np.sort(rng.choice(m, n_models, replace=False))
    complete = np.flatnonzero(~np.isnan(scores[models]).any(axis=0))
    questions = np.sort(rng.choice(complete, min(n_questions, len(complete)), replace=False))
    return models, questions


def held_out_rows(scores: np.ndarray, how: str, seed: int) -> np.ndarray:
    """The held-out rows of a draw's (M, Q) scores: ``fraction`` (0.2, the protocol's draw) or ``strongest`` (the
    model with the highest mean score; the first of equals)."""
    if how == "fraction":
        return choose_held_out(len(scores), 0.2, seed)
    if how == "strongest":
        return np.array([int(np.argmax(np.nanmean(scores, axis=1)))])
    raise ValueError(f"held-out choice {how!r}: use one of {HOLDOUTS}")


def cell_budget(n_questions: int, folds: int, budget: int = 256, val_fraction: float = 0.1) -> int:
    """The anchors per model: ``budget``, or every training query of a fold when there are fewer."""
    train = n_questions - -(-n_questions // folds)  # the non-test queries of the largest test fold
    return max(1, min(budget, train - int(np.ceil(val_fraction * train)) - 1))


def run_unit(
    name: str,
    scores: np.ndarray,
    enc: np.ndarray,
    bench: np.ndarray,
    fold,
    trained: np.ndarray,
    held: np.ndarray,
    seed: int,
    train_config=None,
) -> np.ndarray:
    """(M, Q_test) what ranks the models of one draw on one fold's test queries: the method's P(correct), less
    LOCUS's guard handicap (locus_model.routing.policy)."""
    kwargs = dict(
        seed=seed,
        scores=scores,
        encodings=enc,
        fold=fold,
        trained=trained,
        held=held,
        benchmarks=bench,
        train_config=train_config,
    )
    if name == "per_benchmark":
        from locus_model.evaluation.baselines import PerBenchmarkConfig

        kwargs["baseline_config"] = PerBenchmarkConfig(benchmarks=tuple(bench))
    return fit_and_predict(name=name, **kwargs).routing_scores()


def summarise(units: list[dict]) -> list[dict]:
    """One row per (models, questions, held-out choice, method): mean routing over (draw, fold) units and the
    differences from best single and the per-benchmark rule with their intervals."""
    rows = []
    keys = sorted({(u["models"], u["questions"], u["holdout"]) for u in units}, key=str)
    for models, questions, holdout in keys:
        group = [u for u in units if (u["models"], u["questions"], u["holdout"]) == (models, questions, holdout)]
        for name in [m for m in (*METHODS, "oracle") if any(m in u["routing"] for u in group)]:
            mine = [u for u in group if name in u["routing"]]
            row = {
                "models": models,
                "questions": questions,
                "holdout": holdout,
                "method": name,
                "units": len(mine),
                "routing": float(np.mean([u["routing"][name] for u in mine])),
            }
            for ref in ("best_single", "per_benchmark"):
                if ref != name and name != "oracle" and all(ref in u["routing"] for u in mine):
                    row[f"vs_{ref}"] = interval(np.array([u["routing"][name] - u["routing"][ref] for u in mine]))
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    """bench/README.md's table: one line per cell and method."""

    def ci(c: dict | None) -> str:
        if not c:
            return "-"
        text = f"{100 * c['diff']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]"
        return f"**{text}**" if c["ci_low"] > 0 or c["ci_high"] < 0 else text

    lines = [
        "| models | questions | held out | method | routing | minus best single | minus per-benchmark | units |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['models']} | {r['questions']} | {r['holdout']} | {r['method']} | {100 * r['routing']:.1f} | "
        f"{ci(r.get('vs_best_single'))} | {ci(r.get('vs_per_benchmark'))} | {r['units']} |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="mmlu", choices=("mmlu", "metabench", "ae1"))
    p.add_argument("--models", nargs="+", default=["4", "8", "16", "all"])
    p.add_argument("--questions", type=int, nargs="+", default=[200, 500, 1500])
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--from-draw", type=int, default=0, help="skip the draws before this one (another run has them)")
    p.add_argument("--holdouts", nargs="+", default=list(HOLDOUTS), choices=HOLDOUTS)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--epochs", type=int, default=None, help="LOCUS max epochs (default: TrainConfig's)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from locus_model.training import TrainConfig

    torch.set_num_threads(1)
    methods = [m for m in args.methods.split(",") if m]
    train_config = TrainConfig(device="cpu", seed=args.seed)
    if args.epochs is not None:
        train_config = replace(train_config, epochs=args.epochs)
    matrix, source = load_suite(args.suite)
    scores_all = matrix.scores.astype(np.float32)
    bench_all = np.asarray(matrix.benchmarks).astype(str)
    out = args.out or RESULTS / f"small_data_{args.suite}.json"
    units: list[dict] = []
    start = time.perf_counter()
    encoded: dict[int, np.ndarray] = {}  # query column -> its encoding, across draws
    for size in args.models:
        n_models = None if size == "all" else int(size)
        for n_questions in args.questions:
            for d in range(args.from_draw, args.draws):
                rows, cols = draw_cell(
                    scores_all, n_models, n_questions, seed=[args.seed, n_models or 0, n_questions, d]
                )
                missing = [q for q in cols if q not in encoded]
                if missing:
                    encoded.update(zip(missing, encode_queries([matrix.queries[q] for q in missing], progress=False)))
                enc = np.stack([encoded[q] for q in cols]).astype(np.float32)
                scores, bench = scores_all[np.ix_(rows, cols)], bench_all[cols]
                splits = kfold_splits(
                    len(cols), folds=args.folds, budget=cell_budget(len(cols), args.folds), seed=args.seed + d
                )
                for holdout in args.holdouts:
                    held = held_out_rows(scores, holdout, args.seed + d)
                    trained = np.setdiff1d(np.arange(len(rows)), held)
                    for fold in splits:
                        labels = scores[:, fold.test]
                        unit = {
                            "models": size,
                            "questions": n_questions,
                            "holdout": holdout,
                            "draw": d,
                            "fold": fold.index,
                            "names": [matrix.models[i] for i in rows],
                            "routing": {"oracle": float(labels.max(0).mean())},
                        }
                        for name in methods:
                            probs = run_unit(
                                name,
                                scores,
                                enc,
                                bench,
                                fold,
                                trained,
                                held,
                                args.seed + fold.index,
                                train_config if name == "locus" else None,
                            )
                            unit["routing"][name] = float(chosen_scores(probs, labels).mean())
                        units.append(unit)
                        print(
                            f"[{time.perf_counter() - start:6.0f} s] {size}x{n_questions} {holdout} draw {d} fold "
                            f"{fold.index}: " + " ".join(f"{m} {100 * v:.1f}" for m, v in unit["routing"].items()),
                            flush=True,
                        )
    summary = summarise(units)
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
    print(markdown(summary))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
