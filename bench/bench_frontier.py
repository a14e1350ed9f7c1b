"""Quality-cost frontier of every router on metabench: how much cheaper can the best single model's quality be had?

A thin caller of the library's frontier (locus_model.routing.frontier.evaluate_frontiers, the code of
``locus evaluate --models-file`` and of the ``routing_evaluation`` asset) on the five query folds of
`python -m bench.bench_accuracy --suite metabench` (budget 256, the same test queries, anchors and held-out models).
Nothing is retrained: each method's P(correct) comes from the fit cache that `python -m bench.bench_accuracy --fit-cache
DIR [--tag T]` writes (``--reuse-tags`` as there); the oracle's is the labels.

Routers (all 2,001 models are candidates, held-out ones included, as in the accuracy bench's "all" group): the
library's cost-aware rule (locus_model.routing.route_many, locus serve's) on each method's P(correct) as the quality
weight goes from 0 (cheapest) to 1; RouteLLM-style two-model threshold routers (the best single model when the
cheapest model's P(correct) by LOCUS or MF is below a threshold, swept); random mixing of the cheapest and the best
single model (the straight line). The best single model is the best on the anchors among the models of known cost.

Cost = the chosen model's parameter count (billions), a proxy for self-hosted inference cost, from models.csv
(``locus_model.routing.cost_table``); a model of unknown size is left out of every router, never priced (``--sizes
csv+name`` also reads sizes from names, as locus serve and the asset do). With ``--prices CSV`` (``model`` and
``price_input_per_mtok`` / ``price_output_per_mtok`` in USD per million tokens, or ``cost_per_query`` in USD: the keys
of locus serve's models config) the cost is dollars per query, each query's input tokens estimated from its text and
--output-tokens (256) per answer, as locus serve charges; a model without a price is left out.

Figures (the library's): RouterBench's AIQ (Hu et al. 2024, arXiv 2403.12031: the area under the non-decreasing
convex hull, cost normalised to [0, 1] between the cheapest and the most expensive model), the lowest mean cost at
which the hull reaches 100% / 95% of the best single model's test accuracy over that model's cost; fold means, 95%
paired intervals from resampling the test queries within folds, every router on the same resamples.

    PYTHONPATH=. .venv/bin/python bench/bench_frontier.py --suite metabench --fit-cache bench/.cache/fits \\
        --tag _s600 --reuse-tags _baselines --train-option max_steps=600

Writes bench/results/frontier_metabench_b256<tag>.json and bench/results/frontier_metabench.png; `--table JSON
[--plot-out PNG]` prints (and draws) a result again without reading the cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import METABENCH, REPO, ProtocolSetup, fit_path, protocol_setup
from locus_model.evaluation.results import format_frontier, json_clean
from locus_model.routing import COST_KEYS, DEFAULT_OUTPUT_TOKENS, cost_info, cost_table
from locus_model.routing.frontier import evaluate_frontiers, query_costs
from locus_model.routing.frontier_plot import plot_frontiers

MODELS_CSV = METABENCH.parent / "models.csv"
METHODS = ("locus", "embedllm_mf", "irt", "knn", "per_benchmark", "best_single")
LABEL_FREE = ("embedllm_mf", "irt", "knn", "best_single", "threshold_locus", "threshold_mf", "random_mix")


def model_costs(
    names: list[str],
    texts: list[str],
    sizes: str = "csv",
    prices: Path | None = None,
    *,
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
) -> tuple[np.ndarray, dict]:
    """((M, Q) cost of each query on each model, NaN = unknown; the result's ``settings.costs``) via
    routing.cost_table and routing.frontier.query_costs. Without ``prices``: billions of parameters from models.csv
    (``sizes="csv"`` keeps a size the table read from a name unknown). With ``prices``: dollars per query from a CSV
    of ``model`` and any of routing.COST_KEYS."""
    if prices is not None:
        table = cost_table(names, cost_info(pd.read_csv(prices)))
        if table.basis != "usd":
            raise SystemExit(f"{prices}: no model of the suite has a price (columns: model and any of {COST_KEYS})")
        costs = np.array(query_costs(table, texts, output_tokens), dtype=np.float64)
    else:
        table = cost_table(names, cost_info(pd.read_csv(MODELS_CSV)[["model", "params_b"]]))
        if table.basis != "params_b":
            raise SystemExit(f"{MODELS_CSV}: expected parameter counts as the cost basis, got {table.basis!r}")
        costs = np.array(query_costs(table, texts), dtype=np.float64)
        if sizes == "csv":
            costs[[i for i, n in enumerate(names) if n in set(table.parsed)]] = np.nan
    unknown = [n for n, row in zip(names, costs) if np.isnan(row).any()]
    return costs, {
        "basis": table.basis,
        "means": table.basis_means,
        "note": table.note,
        "sizes": sizes,
        "prices": None if prices is None else str(prices),
        "output_tokens": output_tokens,
        "models_of_unknown_cost": len(unknown),
        "unknown_cost": unknown,
    }


def cached_probs(cache: Path, setup: ProtocolSetup, name: str, fold, tags: tuple[str, ...]) -> tuple[np.ndarray, str]:
    """A fold's cached test probabilities of one method (bench_accuracy's fit cache; the first of ``tags`` found),
    and the file. The arguments are those bench_accuracy's evaluate() gives, so the key is the same."""
    args = setup.fit_args(name, fold)
    if name == "per_benchmark":  # evaluate() gives per_benchmark its benchmark labels (harness.evaluate)
        from locus_model.evaluation.baselines import PerBenchmarkConfig

        args["baseline_config"] = PerBenchmarkConfig(benchmarks=tuple(np.asarray(setup.matrix.benchmarks).astype(str)))
    tried = []
    for tag in tags:
        path = fit_path(cache, args, tag)
        tried.append(path.name)
        if path.is_file():
            with np.load(path) as z:
                return z["probs"], path.name
    raise SystemExit(
        f"no cached fit of {name} on fold {fold.index} in {cache} (tried {tried} for tags {list(tags)}). "
        f"How to fix: run python -m bench.bench_accuracy --suite metabench --budgets {len(fold.anchors)} --methods "
        f"{name} --only-folds {fold.index} --fit-cache {cache} --tag T with the same LOCUS options, and pass "
        "--tag/--reuse-tags T here, or leave the method out with --methods"
    )


def targets(frontier: dict) -> dict:
    """The issue's targets: LOCUS's AIQ at least every label-free router's (point estimates; the paired difference
    beside), and the best single model's accuracy at <= 20% of its cost."""
    locus = frontier.get("locus")
    if locus is None:
        return {}
    below = {
        n: frontier[n]["aiq_vs_locus"] for n in LABEL_FREE if n in frontier and frontier[n]["aiq_vs_locus"]["diff"] < 0
    }
    share = locus["cost_share_at_best_single"]
    return {
        "locus_aiq_at_least_every_label_free_router": {"met": not below, "above_locus": below},
        "best_single_accuracy_at_most_20_percent_of_its_cost": {
            "met": share["mean"] is not None and share["mean"] <= 0.2,
            "share": share,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="metabench", choices=["metabench"])
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="+", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default=",".join(METHODS), help="the cached methods to route by (best_single always)")
    p.add_argument(
        "--fit-cache",
        type=Path,
        default=REPO / "bench" / ".cache" / "fits",
        help="bench_accuracy's --fit-cache folder (read only)",
    )
    p.add_argument("--tag", default="", help="the --tag of the bench_accuracy run whose fits to read")
    p.add_argument("--reuse-tags", nargs="+", default=[], metavar="TAG", help="also read fits cached under these tags")
    p.add_argument("--epochs", type=int, default=None, help="LOCUS --epochs of that run (part of its cache key)")
    p.add_argument("--patience", type=int, default=None, help="LOCUS --patience of that run")
    p.add_argument("--train-option", action="append", default=[], metavar="NAME=VALUE", help="as bench_accuracy's")
    p.add_argument(
        "--sizes",
        choices=["csv", "csv+name"],
        default="csv",
        help="csv: sizes from models.csv only; csv+name: also sizes read from model names (as serve does)",
    )
    p.add_argument(
        "--prices",
        type=Path,
        default=None,
        help="CSV of model and price_input_per_mtok / price_output_per_mtok (USD per million tokens) or "
        "cost_per_query (USD): costs in dollars instead of parameters; models without a price are left out",
    )
    p.add_argument(
        "--output-tokens",
        type=int,
        default=DEFAULT_OUTPUT_TOKENS,
        help=f"with --prices: output tokens per query (default {DEFAULT_OUTPUT_TOKENS}, locus serve's default)",
    )
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--table", type=Path, default=None, help="print the table of this result JSON and exit")
    p.add_argument("--plot-out", type=Path, default=None, help="with --table: also draw its figure to this PNG")
    args = p.parse_args(argv)
    if args.table is not None:
        result = json.loads(args.table.read_text())
        print(format_frontier(result))
        print(json.dumps(result["targets"], indent=1))
        if args.plot_out is not None:
            print(f"wrote {plot_frontiers(result['frontier_folds'], args.plot_out)}")
        return 0
    start = time.perf_counter()
    options = (
        ([f"epochs={args.epochs}"] if args.epochs is not None else [])
        + ([f"patience={args.patience}"] if args.patience is not None else [])
        + list(args.train_option)
    )
    setup = protocol_setup(args.suite, budget=args.budget, folds=args.folds, seed=args.seed, train_options=options)
    names, texts = list(setup.matrix.models), list(setup.matrix.queries)
    costs, cost_note = model_costs(names, texts, args.sizes, args.prices, output_tokens=args.output_tokens)
    tags = (args.tag, *args.reuse_tags)
    methods = list(dict.fromkeys([*(m.strip() for m in args.methods.split(",") if m.strip()), "best_single"]))
    folds = [f for f in setup.splits if args.only_folds is None or f.index in args.only_folds]
    probs: dict[str, list[np.ndarray]] = {m: [] for m in [*methods, "oracle"]}
    labels: list[np.ndarray] = []
    fold_costs: list[np.ndarray] = []
    files: list[dict[str, str]] = []  # per fold: method -> its cached file
    for fold in folds:
        y = setup.scores[:, fold.test].astype(np.float64)
        files.append({})
        for m in methods:
            found, files[-1][m] = cached_probs(args.fit_cache, setup, m, fold, tags)
            probs[m].append(found)
        probs["oracle"].append(np.nan_to_num(y))  # knows the answers, as the harness's oracle
        labels.append(y)
        fold_costs.append(costs[:, fold.test])
    rates = [p.mean(axis=1) for p in probs["best_single"]]  # best_single: each model's anchor mean rate
    frontier = evaluate_frontiers(probs, labels, fold_costs, rates, names=names, n_boot=args.n_boot, seed=args.seed)
    result = {
        "settings": {
            "suite": args.suite,
            "budget": args.budget,
            "folds": [f.index for f in folds],
            "tags": list(tags),
            "locus_train_options": options,
            "methods": methods,
            "n_boot": args.n_boot,
            "seed": args.seed,
            "costs": cost_note,
            "files": files,
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        },
        "frontier": frontier["methods"],
        "frontier_folds": frontier["folds"],
        "targets": targets(frontier["methods"]),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"frontier_{args.suite}_b{args.budget}{args.tag or '_untagged'}.json"
    out.write_text(json.dumps(json_clean(result), indent=1, allow_nan=False))
    png = plot_frontiers(
        result["frontier_folds"],
        args.out_dir / f"frontier_{args.suite}.png",
        cost_label=f"mean cost per query ({cost_note['means']})",
    )
    print(format_frontier(result))
    print(json.dumps(result["targets"], indent=1))
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
