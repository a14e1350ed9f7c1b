"""How routing grows with the number of models LOCUS is trained on, and what works for a small pool.

Same folds, anchors and LOCUS settings as `bench_accuracy.py --suite S --budgets B` (the protocol's k-fold).

--sizes N ...  the training-pool curve: per fold, LOCUS (and EmbedLLM-MF, IRT) trained on N models drawn at random
               from the fold's in-training models; every other model of the suite is onboarded from its anchor
               evaluations (one forward pass, no training) and routing is over all models. The row "all" is the
               fold's full in-training pool (the bench_accuracy.py result itself when its --fit-cache has it).
--small-pools K --draws R   a team's pool: R random K-model subsets of the suite's held-out models (never trained
               on by the fold's full-pool LOCUS); on each, every method fitted on the K models alone (LOCUS trained
               on K sets with the library's TrainConfig defaults), routing among the K, plus "locus_pretrained": the
               fold's full-pool LOCUS (from --fit-cache, trained with the --train-option values given; trained now
               if absent) reused as it is, the K models embedded by one forward pass.

    .venv/bin/python -m bench.bench_training_pool --suite metabench --budget 256 --sizes 25 100 400 \
        --only-folds 0 --fit-cache bench/.cache/fits
    .venv/bin/python -m bench.bench_training_pool --suite metabench --budget 256 --small-pools 8 \
        --draws 5 --fit-cache bench/.cache/fits

Writes bench/results/training_pool_<suite>_b<budget>.json (the curve) or small_pools_<suite>_b<budget>_k<K>.json
and prints markdown tables (percent; LOCUS minus best single with its 95% paired bootstrap interval).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

import locus_model.evaluation.protocol as protocol
from bench.common import CACHE, RESULTS, cached_fit_and_predict, fold_locus, protocol_setup
from locus_model.data.matrix import EvaluationMatrix
from locus_model.evaluation.protocol import evaluate
from locus_model.evaluation.results import format_interval
from locus_model.training import TrainConfig

CURVE_METHODS = ("locus", "embedllm_mf", "irt", "best_single")
SMALL_METHODS = ("locus", "embedllm_mf", "irt", "knn", "per_benchmark", "best_single", "oracle")


def submatrix(matrix: EvaluationMatrix, rows: np.ndarray) -> EvaluationMatrix:
    """The matrix restricted to some models (same queries, same order: the same folds)."""
    rows = np.sort(np.asarray(rows, dtype=np.int64))
    return EvaluationMatrix(
        models=[matrix.models[i] for i in rows],
        query_ids=matrix.query_ids,
        queries=matrix.queries,
        benchmarks=matrix.benchmarks,
        scores=matrix.scores[rows],
        split=matrix.split,
    )


def _routing(result: dict, method: str, group: str = "all") -> dict:
    entry = result["methods"][method][group]
    return {
        "routing": entry["routing_acc"]["mean"],
        "auc": entry["auc"]["mean"],
        "vs_best_single": entry.get("vs_best_single"),
    }


def curve(setup, args) -> dict:
    rows = []
    for fold in [f for f in setup.splits if args.only_folds is None or f.index in args.only_folds]:
        rng = np.random.default_rng([args.seed, fold.index, 17])
        for n in [*args.sizes, *([None] if args.full_pool else [])]:
            trained = (
                setup.trained
                if n is None or n >= len(setup.trained)
                else np.sort(rng.choice(setup.trained, n, replace=False))
            )
            held = [setup.matrix.models[i] for i in np.setdiff1d(np.arange(len(setup.matrix.models)), trained)]
            result = evaluate(
                setup.matrix,
                setup.encodings,
                budget=args.budget,
                folds=args.folds,
                seed=args.seed,
                methods=CURVE_METHODS,
                train_config=setup.train_config,
                model_config=setup.model_config,
                only_folds=[fold.index],
                held_out=held,
                progress=True,
            )
            row = {
                "fold": fold.index,
                "trained_models": int(len(trained)),
                **{m: _routing(result, m) for m in CURVE_METHODS},
            }
            rows.append(row)
            print(
                f"fold {fold.index + 1} n={len(trained)}: "
                + ", ".join(f"{m} {100 * row[m]['routing']:.1f}" for m in CURVE_METHODS),
                file=sys.stderr,
                flush=True,
            )
    return {"rows": rows}


def small_pools(setup, args) -> dict:
    rows = []
    for fold in [f for f in setup.splits if args.only_folds is None or f.index in args.only_folds]:
        pretrained = fold_locus(setup, fold, args.fit_cache, reuse_tags=tuple(args.reuse_tags))
        rng = np.random.default_rng([args.seed, fold.index, 29])
        for draw in range(args.draws):
            pick = np.sort(rng.choice(setup.held, args.small_pools, replace=False))
            sub = submatrix(setup.matrix, pick)
            common = dict(
                budget=args.budget,
                folds=args.folds,
                seed=args.seed,
                only_folds=[fold.index],
                holdout_models=0.0,
                progress=False,
            )
            fitted = evaluate(
                sub,
                setup.encodings,
                methods=SMALL_METHODS,  # LOCUS on K sets: the library's defaults
                train_config=TrainConfig(device="cpu", seed=args.seed),
                model_config=setup.model_config,
                **common,
            )
            reused = evaluate(sub, setup.encodings, methods=("locus", "best_single"), router=pretrained, **common)
            row = {
                "fold": fold.index,
                "draw": draw,
                "models": sub.models,
                **{m: _routing(fitted, m) for m in SMALL_METHODS},
                "locus_pretrained": _routing(reused, "locus"),
            }
            rows.append(row)
            print(
                f"fold {fold.index + 1} draw {draw}: "
                + ", ".join(f"{m} {100 * row[m]['routing']:.1f}" for m in (*SMALL_METHODS, "locus_pretrained")),
                file=sys.stderr,
                flush=True,
            )
    return {"rows": rows}


def table(rows: list[dict], key: str, methods: list[str]) -> str:
    """Markdown: mean routing (and AUC) per group of rows sharing `key`, over folds/draws."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[key] if key else "all", []).append(r)
    out = [f"| {key or 'pool'} | runs | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for g, rs in groups.items():
        cells = []
        for m in methods:
            vals = np.array([100 * r[m]["routing"] for r in rs])
            vs = rs[0][m].get("vs_best_single") if len(rs) == 1 else None
            cells.append(
                f"{vals.mean():.1f}"
                + (f" ({format_interval(vs)})" if vs else "")
                + (f" ± {vals.std(ddof=1):.1f}" if len(rs) > 1 else "")
            )
        out.append(f"| {g} | {len(rs)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="metabench")
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="+", default=None)
    p.add_argument("--holdout-models", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="training-pool sizes of the curve")
    p.add_argument(
        "--full-pool",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="add the row of the fold's full in-training pool (--no-full-pool: that row is bench_accuracy.py's "
        "table, e.g. when its MF and IRT fits are cached under another tag)",
    )
    p.add_argument("--small-pools", type=int, default=None, metavar="K", help="models per small pool")
    p.add_argument("--draws", type=int, default=5, help="small pools drawn per fold")
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits")
    p.add_argument("--train-option", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument(
        "--reuse-tags",
        nargs="+",
        default=[],
        metavar="TAG",
        help="the --tag values of the bench_accuracy.py runs whose fits (and fold checkpoints) to reuse",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if (args.sizes is None) == (args.small_pools is None):
        raise SystemExit("give either --sizes (the training-pool curve) or --small-pools K")
    torch.set_num_threads(args.threads)
    protocol.fit_and_predict = cached_fit_and_predict(
        args.fit_cache, "", tuple(args.reuse_tags)
    )  # bench_accuracy's fits
    setup = protocol_setup(
        args.suite,
        budget=args.budget,
        folds=args.folds,
        seed=args.seed,
        holdout_models=args.holdout_models,
        train_options=args.train_option,
    )
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    if args.sizes is not None:
        result = curve(setup, args)
        out = args.out_dir / f"training_pool_{args.suite}_b{args.budget}.json"
        print(table(result["rows"], "trained_models", list(CURVE_METHODS)))
    else:
        result = small_pools(setup, args)
        out = args.out_dir / f"small_pools_{args.suite}_b{args.budget}_k{args.small_pools}.json"
        print(table(result["rows"], "", [*SMALL_METHODS, "locus_pretrained"]))
    out.write_text(
        json.dumps({"settings": {"command": command, "train_options": args.train_option}, **result}, indent=1)
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
