"""Why a method routes (almost) every query to one model: how much its predictions vary across models per query.

From the test probabilities that `bench_accuracy.py --fit-cache DIR` kept for one (suite, budget, fold), per method:
the share of test queries routed to the best single model (the model with the highest mean score on the anchors of
the training models, as best_single picks it), the share of (other model, query) pairs predicted above that model,
the spread over queries of each model's logit minus that model's (mean over models of the std), and the mean
correlation over model pairs of their logits across the test queries (1 = the predictions are one query difficulty
plus a per-model offset, so the ranking of models never changes). With --shortlists N ...: the routing accuracy
when each method routes only among its N models of highest mean predicted P(correct) over the test queries (no
labels read): if near-tied top models were a winner's curse, a short list would route better. Nothing is refitted.

    .venv/bin/python -m bench.diag.routing_spread --suite mmlu --budgets 128 1024 --fold 0
    .venv/bin/python -m bench.diag.routing_spread --suite metabench --budgets 128 --fold 0 \
        --methods locus --tag _def3 --shortlists 1 15 200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.common import CACHE, LABELS, fit_path, protocol_setup
from locus_model.stats.metrics import routing_accuracy


def spread(probs: np.ndarray, top: int) -> dict:
    p = np.clip(probs.astype(np.float64), 1e-6, 1 - 1e-6)
    logit = np.log(p / (1 - p))  # (M, Q)
    others = np.array([i for i in range(len(logit)) if i != top])
    gap = logit[others] - logit[top]
    corr = np.corrcoef(logit) if np.all(logit.std(axis=1) > 0) else None
    iu = np.triu_indices(len(logit), 1)
    return {
        "routed_to_top": float((np.argmax(p, axis=0) == top).mean()),
        "pairs_above_top": float((gap > 0).mean()),
        "gap_std": float(gap.std(axis=1).mean()),
        "logit_corr": float(corr[iu].mean()) if corr is not None else None,
    }


def shortlist_routing(probs: np.ndarray, labels: np.ndarray, n: int) -> float:
    """Routing accuracy among the n models of highest mean predicted P(correct) (ties: the lower row)."""
    top = np.argsort(-probs.mean(axis=1), kind="stable")[:n]
    return routing_accuracy(probs[top], labels[top])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="mmlu")
    p.add_argument("--budgets", type=int, nargs="+", default=[128, 1024])
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--methods", default="locus,embedllm_mf,irt,knn")
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits")
    p.add_argument("--train-option", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--tag", default="")
    p.add_argument(
        "--shortlists",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="also the routing accuracy among each method's N models of highest mean P(correct)",
    )
    args = p.parse_args(argv)
    lists = [f"routing among its top {n}" for n in args.shortlists] + (["routing among all"] if args.shortlists else [])
    print(
        "| budget | method | routed to the best single model | (model, query) pairs above it | std over queries of "
        "logit minus its logit | mean logit correlation between models |" + "".join(f" {c} |" for c in lists)
    )
    print("|---|---|---|---|---|---|" + "---|" * len(lists))
    for budget in args.budgets:
        setup = protocol_setup(args.suite, budget=budget, train_options=args.train_option)
        fold = setup.splits[args.fold]
        anchor_mean = np.nanmean(setup.scores[setup.trained][:, fold.anchors], axis=1)
        top = int(setup.trained[np.argmax(anchor_mean)])
        for name in args.methods.split(","):
            path = fit_path(args.fit_cache, setup.fit_args(name, fold), args.tag)
            if not path.is_file():
                print(f"| {budget} | {LABELS.get(name, name)} | not in {args.fit_cache} | | | |")
                continue
            with np.load(path) as z:
                probs = z["probs"].astype(np.float64)
            s = spread(probs, top)
            labels = setup.scores[:, fold.test]
            routes = [shortlist_routing(probs, labels, n) for n in args.shortlists]
            routes += [routing_accuracy(probs, labels)] if args.shortlists else []
            print(
                f"| {budget} | {LABELS.get(name, name)} | {100 * s['routed_to_top']:.1f}% | "
                f"{100 * s['pairs_above_top']:.1f}% "
                f"| {s['gap_std']:.2f} | {s['logit_corr']:.3f} |" + "".join(f" {100 * r:.1f} |" for r in routes)
            )
        print(f"(budget {budget}: best single model on the anchors = {setup.matrix.models[top]})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
