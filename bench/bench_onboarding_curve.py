"""Onboarding curve: held-out models embedded from n of their evaluations, against the same models trained on.

Per fold of `bench_accuracy.py --suite S --budgets B` (same folds, anchors and held-out models), the LOCUS trained
there (taken from its --fit-cache, trained now if absent) embeds each held-out model from the first n of a seeded
permutation of its evaluations on the fold's B anchors, n in --sizes (n = B is the protocol's own held-out
setting); the baselines (EmbedLLM-MF, IRT, kNN, best single) are fitted the same way and onboarded from the same
n cells. Every method then scores the fold's test queries: routing among the held-out models (held_out) and among
all models with the trained ones as in the protocol (all), correctness accuracy, AUC, Brier.

The trained-on side is `bench_accuracy.py --suite S --budgets B --probe-held-out` (every model trained on; the same
models reported as the group held_out_as_trained); give its JSON with --trained-on to put it beside the curve.

    .venv/bin/python -m bench.bench_onboarding_curve --suite mmlu --budget 1024 \\
        --fit-cache bench/.cache/fits --trained-on bench/results/accuracy_mmlu_b1024_probe.json

Writes bench/results/onboarding_<suite>_b<budget>.json and prints a markdown table (percent, mean ± std over folds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import CACHE, LABELS, RESULTS, fold_locus, protocol_setup
from locus_model.evaluation.baselines import Baseline
from locus_model.evaluation.methods import LocusMethod, make_method
from locus_model.stats.metrics import score_predictions

SIZES = (16, 32, 64, 128, 256, 1024)
BASELINES = ("embedllm_mf", "irt", "knn", "best_single")
SHOWN = ("routing_acc", "correctness_acc", "auc", "brier")


def onboarding_scores(
    scores: np.ndarray, anchors: np.ndarray, held: np.ndarray, sizes: list[int], rng: np.random.Generator
) -> dict[int, np.ndarray]:
    """{n: (H, Q) scores with only the first n of each held-out model's permuted anchor cells kept}: nested sets."""
    out = {n: np.full((len(held), scores.shape[1]), np.nan, np.float32) for n in sizes}
    for i, h in enumerate(held):
        cells = rng.permutation(anchors[~np.isnan(scores[h, anchors])])
        for n in sizes:
            out[n][i, cells[:n]] = scores[h, cells[:n]]
    return out


def _mean_std(values: list[float]) -> dict:
    v = np.array([np.nan if x is None else x for x in values], np.float64)
    v = v[~np.isnan(v)]
    return {"mean": float(v.mean()) if len(v) else None, "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="mmlu")
    p.add_argument("--budget", type=int, default=1024, help="the budget LOCUS and the baselines were trained at")
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="+", default=None)
    p.add_argument("--holdout-models", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default=",".join(("locus", *BASELINES)))
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits")
    p.add_argument("--tag", default="", help="the --tag of the bench_accuracy.py run whose LOCUS fits to use")
    p.add_argument(
        "--reuse-tags", nargs="+", default=(), metavar="TAG", help="LOCUS fits cached under these tags count too"
    )
    p.add_argument("--trained-on", type=Path, default=None, help="the --probe-held-out result JSON at this budget")
    p.add_argument(
        "--train-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="the --train-option values the bench_accuracy.py run used (they are part of the cache key)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--summarize", type=Path, default=None, help="print the tables of this result JSON and exit")
    args = p.parse_args(argv)
    if args.summarize:
        print(markdown(json.loads(args.summarize.read_text())))
        return 0
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    setup = protocol_setup(
        args.suite,
        budget=args.budget,
        folds=args.folds,
        seed=args.seed,
        holdout_models=args.holdout_models,
        train_options=args.train_option,
    )
    sizes = sorted(n for n in args.sizes if n <= args.budget)
    methods = [m for m in args.methods.split(",") if m]
    folds = [f for f in setup.splits if args.only_folds is None or f.index in args.only_folds]
    per_fold: dict[str, dict[int, dict[str, list]]] = {
        m: {n: {"held_out": [], "all": []} for n in sizes} for m in methods
    }
    scores, held, trained = setup.scores, setup.held, setup.trained
    for fold in folds:
        t0 = time.perf_counter()
        budget_scores, val_scores = fold.budget_and_val(scores)
        subsets = onboarding_scores(
            scores, fold.anchors, held, sizes, np.random.default_rng([args.seed, fold.index, 31])
        )
        labels = scores[:, fold.test]
        for name in methods:
            method: Baseline
            if name == "locus":  # the fold's trained LOCUS as it is: nothing is refitted
                method = LocusMethod(
                    router=fold_locus(setup, fold, args.fit_cache, args.tag, tuple(args.reuse_tags)),
                    train_config=setup.train_config,
                )
            else:
                method = make_method(name, seed=args.seed + fold.index)
            method.fit(setup.encodings, budget_scores[trained], val_scores[trained])
            probs = np.empty((len(scores), len(fold.test)), np.float32)
            probs[trained] = method.predict_proba(np.arange(len(trained)), fold.test)
            for n in sizes:
                probs[held] = method.predict_proba(method.onboard(subsets[n]), fold.test)
                per_fold[name][n]["held_out"].append(score_predictions(probs[held], labels[held]))
                per_fold[name][n]["all"].append(score_predictions(probs, labels))
        print(
            f"fold {fold.index + 1}/{len(setup.splits)}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True
        )

    result = {
        "settings": {
            "suite": args.suite,
            "budget": args.budget,
            "sizes": sizes,
            "folds": args.folds,
            "only_folds": args.only_folds,
            "holdout_models": args.holdout_models,
            "seed": args.seed,
            "methods": methods,
            "held_out_model_names": [setup.matrix.models[i] for i in held],
            "fit_cache": str(args.fit_cache),
            "trained_on": str(args.trained_on) if args.trained_on else None,
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        },
        "wall_s": round(time.perf_counter() - start, 1),
        "methods": {
            m: {
                str(n): {g: {k: _mean_std([r[k] for r in rs]) for k in SHOWN} for g, rs in per_fold[m][n].items()}
                for n in sizes
            }
            for m in methods
        },
    }
    if args.trained_on is not None:
        probe = json.loads(args.trained_on.read_text())
        if probe["settings"]["budget"] != args.budget or "held_out_as_trained" not in probe["methods"]["best_single"]:
            raise SystemExit(f"{args.trained_on}: not a --probe-held-out result at budget {args.budget}")
        result["trained_on"] = {
            m: {k: probe["methods"][m]["held_out_as_trained"][k] for k in SHOWN}
            for m in methods
            if m in probe["methods"]
        }
        result["trained_on_folds"] = probe["settings"].get("only_folds")
    out = args.out_dir / f"onboarding_{args.suite}_b{args.budget}.json"
    out.write_text(json.dumps(result, indent=1))
    print(markdown(result))
    print(f"\nwrote {out}")
    return 0


def markdown(result: dict) -> str:
    """One table per metric: rows = methods, columns = n evaluations onboarded from (held-out models), then the
    same models trained on where known."""
    s = result["settings"]
    lines = []
    trained_on = result.get("trained_on", {})
    one_fold = len(s["only_folds"] or [0, 1]) == 1

    def cell(stat: dict | None) -> str:
        if not stat or stat["mean"] is None:
            return "-"
        return f"{100 * stat['mean']:.1f}" if one_fold else f"{100 * stat['mean']:.1f} ± {100 * stat['std']:.1f}"

    for metric, title in (
        ("routing_acc", "routing accuracy among the held-out models"),
        ("correctness_acc", "correctness accuracy"),
        ("auc", "AUC"),
        ("brier", "Brier x100"),
    ):
        lines.append(
            f"**{title}** ({len(s['held_out_model_names'])} held-out models; trained at budget {s['budget']})\n"
        )
        head = [str(n) for n in s["sizes"]] + (["trained on"] if trained_on else [])
        lines.append("| method | " + " | ".join(head) + " |")
        lines.append("|---|" + "---|" * len(head))
        for m, by_n in result["methods"].items():
            cells = [cell(by_n[str(n)]["held_out"][metric]) for n in s["sizes"]]
            if trained_on:
                cells.append(cell(trained_on.get(m, {}).get(metric)))
            lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
