"""Routing on the small pools teams have: pools of 5, 8 and 15 metabench models, five query folds.

    python -m bench.bench_small_pools --large-fits bench/.cache/fits          # every method, 10 draws per size
    python -m bench.bench_small_pools --sizes 8 --draws 3 --budgets 128 --methods best_single,per_benchmark,query_groups

Each pool is drawn (seeded) from the 400 models that the metabench protocol (`bench_accuracy --suite metabench`,
seed 0) holds out, so that "LOCUS trained on the large pool" -- each fold's checkpoint from that run's fit cache
(`--large-fits`, files ``locus_f<fold>_*.pt``) -- has never seen them. Per (size, draw, budget, fold), every method
is fitted on the pool's anchor cells (the fold's anchors, as in the protocol; validation on the fold's validation
queries) and routes the fold's test queries among the pool's models:

- ``locus_small``: LOCUS trained on the small pool alone (its router fitted on the same validation cells);
- ``locus_large``: the large pool's checkpoint reused as it is (no training), the pool's models embedded from
  their anchors, its router -- query groups, profiles, blend -- fitted on this pool's validation cells;
- ``embedllm_mf``, ``irt``, ``knn``, ``query_groups`` (the label-free per-benchmark table), ``per_benchmark``
  (reads each test query's label), ``best_single``, and the oracle.

Printed and written (bench/results/small_pools_metabench.json): per size and method the mean routing accuracy and
AUC over draws and folds, and each method minus the per-benchmark rule and minus the best single model with a 95%
interval from resampling (draw, fold) units: the pool draw is the main source of variance at these sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import REPO, load_suite
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.methods import fit_and_predict
from locus_model.evaluation.splits import choose_held_out, kfold_splits
from locus_model.router import Router
from locus_model.stats.metrics import roc_auc

ALL = ("locus_small", "locus_large", "embedllm_mf", "irt", "knn", "query_groups", "per_benchmark", "best_single")


def chosen_scores(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(Q,) the score of the model each query is routed to (the highest P(correct); the first on ties)."""
    return labels[np.argmax(probs, axis=0), np.arange(labels.shape[1])]


def interval(diffs: np.ndarray, n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean of per-unit differences with a 95% bootstrap interval over the units."""
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), (n_boot, len(diffs)))].mean(1)
    return {
        "diff": float(diffs.mean()),
        "ci_low": float(np.quantile(means, 0.025)),
        "ci_high": float(np.quantile(means, 0.975)),
    }


def large_checkpoint(fits: Path, fold: int):
    found = sorted({p.resolve() for p in fits.glob(f"locus_f{fold}_*.pt")})  # a re-keyed link is the same file
    if len(found) != 1:
        raise SystemExit(
            f"{fits}: expected one locus_f{fold}_*.pt (the metabench @256 run's fold {fold} LOCUS, from "
            f"`python -m bench.bench_accuracy --suite metabench --budgets 256 --methods locus "
            f"--fit-cache {fits}`), found {len(found)}"
        )
    return Router.load(found[0])[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[5, 8, 15])
    p.add_argument("--draws", type=int, default=10, help="pools drawn per size")
    p.add_argument(
        "--locus-small-draws",
        type=int,
        default=3,
        help="draws per size on which LOCUS is also trained on the small pool (each is a training run)",
    )
    p.add_argument("--budgets", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--methods", default=",".join(ALL))
    p.add_argument(
        "--large-fits",
        type=Path,
        default=None,
        help="the metabench @256 fit cache holding each fold's LOCUS (needed for locus_large)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "small_pools_metabench.json")
    p.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="print the markdown table of this result JSON (bench/README.md) and exit (runs nothing)",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="add this run's methods to the units already in --out (same pools, folds and budgets), e.g. "
        "the slow methods run on fewer draws after the fast ones",
    )
    args = p.parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())["summary"]))
        return 0
    torch.set_num_threads(1)
    methods = [m for m in args.methods.split(",") if m]
    if "locus_large" in methods and args.large_fits is None:
        raise SystemExit("locus_large needs --large-fits (the metabench @256 fit cache); or leave it out of --methods")
    matrix, source = load_suite("metabench")
    enc = np.asarray(encode_queries(matrix.queries, progress=False), np.float32)
    scores_all = matrix.scores.astype(np.float32)
    bench = np.asarray(matrix.benchmarks).astype(str)
    held = choose_held_out(len(matrix.models), 0.2, args.seed)  # the protocol's held-out models (seed 0)
    pools = {}  # draw d of size n is the same whatever other sizes or draws are asked for
    for size in args.sizes:
        rng = np.random.default_rng([args.seed, size])
        pools[size] = [np.sort(rng.choice(held, size, replace=False)) for _ in range(args.draws)]
    large = {}
    units: list[dict] = []
    before = {}
    if args.merge and args.out.is_file():
        before = {(u["budget"], u["size"], u["draw"], u["fold"]): u for u in json.loads(args.out.read_text())["units"]}
    start = time.perf_counter()
    for budget in args.budgets:
        splits = kfold_splits(len(matrix.query_ids), folds=args.folds, budget=budget, seed=args.seed)
        for size in args.sizes:
            for d, pool in enumerate(pools[size]):
                scores = scores_all[pool]
                for fold in splits:
                    labels = scores[:, fold.test]
                    unit = before.pop((budget, size, d, fold.index), None) or {
                        "budget": budget,
                        "size": size,
                        "draw": d,
                        "fold": fold.index,
                        "models": [matrix.models[i] for i in pool],
                        "routing": {},
                        "auc": {},
                        "chosen": {},
                        "seconds": {},
                    }
                    if unit["models"] != [matrix.models[i] for i in pool]:
                        raise SystemExit(f"--merge: {args.out} drew other pools (another --seed?)")
                    unit["routing"]["oracle"] = float(labels.max(0).mean())
                    for name in methods:
                        if name == "locus_small" and d >= args.locus_small_draws:
                            continue
                        kwargs = dict(
                            seed=args.seed + fold.index,
                            scores=scores,
                            encodings=enc,
                            fold=fold,
                            trained=np.arange(size),
                            held=np.zeros(0, np.int64),
                            benchmarks=bench,
                        )
                        if name == "per_benchmark":
                            from locus_model.evaluation.baselines import PerBenchmarkConfig

                            kwargs["baseline_config"] = PerBenchmarkConfig(benchmarks=tuple(bench))
                        if name == "locus_large":
                            if fold.index not in large:
                                large[fold.index] = large_checkpoint(args.large_fits, fold.index)
                            kwargs["router"] = large[fold.index]
                        fitted = fit_and_predict(name="locus" if name.startswith("locus") else name, **kwargs)
                        probs = fitted.probs
                        unit.setdefault("seconds", {})[name] = round(fitted.seconds, 2)
                        picked = chosen_scores(fitted.routing_scores(), labels)  # LOCUS: under its guard
                        unit["routing"][name] = float(picked.mean())
                        unit["auc"][name] = roc_auc(probs, labels)
                        unit["chosen"][name] = picked.tolist()
                    units.append(unit)
                    print(
                        f"[{time.perf_counter() - start:6.0f} s] b{budget} n{size} draw {d} fold {fold.index}: "
                        + " ".join(f"{m} {100 * v:.1f}" for m, v in unit["routing"].items()),
                        flush=True,
                    )
    units += list(before.values())  # merged units this run did not reach
    methods = [m for m in ALL if any(m in u["routing"] for u in units)]
    summary = summarise(units, methods)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "settings": {
                    **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "source": source,
                    "command": " ".join(["python -m bench.bench_small_pools", *(argv or sys.argv[1:])]),
                },
                "summary": summary,
                "units": units,
            },
            indent=1,
        )
    )
    print(table(summary))
    print(f"wrote {args.out}")
    return 0


def summarise(units: list[dict], methods: list[str]) -> dict:
    """{budget: {size: {method: {routing, auc, units, vs_per_benchmark, vs_best_single}}}} over (draw, fold) units."""
    out: dict = {}
    for budget in sorted({u["budget"] for u in units}):
        for size in sorted({u["size"] for u in units}):
            group = [u for u in units if u["budget"] == budget and u["size"] == size]
            rows = {}
            for name in [*methods, "oracle"]:
                mine = [u for u in group if name in u["routing"]]
                if not mine:
                    continue
                row: dict[str, Any] = {  # routing, units, then auc and the vs_<ref> intervals
                    "routing": float(np.mean([u["routing"][name] for u in mine])),
                    "units": len(mine),
                }
                if name != "oracle":
                    aucs = [u["auc"][name] for u in mine if u["auc"][name] == u["auc"][name]]
                    row["auc"] = float(np.mean(aucs)) if aucs else None
                    for ref in ("per_benchmark", "best_single"):
                        if ref != name and all(ref in u["routing"] for u in mine):
                            row[f"vs_{ref}"] = interval(
                                np.array([u["routing"][name] - u["routing"][ref] for u in mine])
                            )
                rows[name] = row
            out.setdefault(str(budget), {})[str(size)] = rows
    return out


def markdown(summary: dict) -> str:
    """One row per (budget, pool size): the per-benchmark rule's and the best single model's routing, and each
    method minus the per-benchmark rule on the same (draw, fold) units, with its interval."""
    shown = [
        m
        for m in ("locus_large", "locus_small", "query_groups", "irt", "embedllm_mf", "knn")
        if any(m in rows for sizes in summary.values() for rows in sizes.values())
    ]
    head = ["budget", "models", "per-benchmark", "best single"] + [f"{m} minus per-benchmark" for m in shown]
    head.append("locus_large minus best single")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def ci(c: dict | None, units: int | None = None) -> str:
        if not c:
            return "-"
        text = f"{100 * c['diff']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]"
        bold = c["ci_low"] > 0 or c["ci_high"] < 0
        return (f"**{text}**" if bold else text) + (f" ({units})" if units else "")

    for budget, sizes in summary.items():
        for size, rows in sizes.items():
            cells = [
                budget,
                size,
                f"{100 * rows['per_benchmark']['routing']:.1f}",
                f"{100 * rows['best_single']['routing']:.1f}",
            ]
            full = rows["per_benchmark"]["units"]
            for m in shown:
                row = rows.get(m)
                cells.append(
                    ci(row.get("vs_per_benchmark"), row["units"] if row["units"] != full else None) if row else "-"
                )
            cells.append(ci(rows.get("locus_large", {}).get("vs_best_single")))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(summary: dict) -> str:
    lines = []
    for budget, sizes in summary.items():
        for size, rows in sizes.items():
            lines.append(f"\nbudget {budget}, pools of {size} (mean over draws x folds; 95% interval over those units)")
            lines.append(
                f"{'method':<14}{'routing':>9}{'AUC':>7}   {'vs per_benchmark':<22}{'vs best_single':<22}units"
            )
            for name, row in rows.items():

                def ci(key: str) -> str:
                    c = row.get(key)
                    return f"{100 * c['diff']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]" if c else "-"

                auc = f"{100 * row['auc']:.1f}" if row.get("auc") is not None else "-"
                lines.append(
                    f"{name:<14}{100 * row['routing']:>9.1f}{auc:>7}   {ci('vs_per_benchmark'):<22}"
                    f"{ci('vs_best_single'):<22}{row['units']}"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
