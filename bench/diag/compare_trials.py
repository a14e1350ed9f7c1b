"""Two LOCUS trials on the same folds, paired: trial B minus trial A with the 95% interval of the accuracy bench.

`bench_accuracy.py` sets LOCUS beside the baselines; a default changes on a gain of one LOCUS setting over another
that holds across folds, which needs both on the same test queries. This script reads (or trains and caches) each
fold's LOCUS of two --train-option sets from the fit cache of `bench_accuracy.py --fit-cache DIR` (same folds,
anchors, held-out models and cache key, so a trial that bench_accuracy already ran is not retrained) and prints,
per model group, both trials' fold means and B minus A: the difference of the fold means with a percentile bootstrap
interval over the test queries resampled within folds (locus_model.stats.bootstrap.bootstrap_comparisons, as
bench_accuracy's "LOCUS minus X").

    .venv/bin/python -m bench.diag.compare_trials --suite synthetic --budget 256 --fit-cache bench/.cache/fits \\
        --a max_steps=None --b max_steps=600 [--tag-a T] [--tag-b T] [--only-folds 0 1] [--out FILE]

With --branch, trials that differ only after the selected epoch (the output refit, the fine-tuning, the calibration)
share one warm-up and one set of epochs per fold (locus_model.training.train_branches): each trial's fit is the one it
gets alone, at half the CPU.

--model-a / --model-b set LocusConfig fields of one trial (e.g. --model-b profile_clusters=8).
An option list is NAME=VALUE TrainConfig fields, comma-free values as --train-option takes them; give --a or --b
without values for the defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from bench.common import BUDGETS, apply_options, cached_fit_and_predict, protocol_setup
from locus_model.stats.bootstrap import bootstrap_comparisons
from locus_model.stats.metrics import roc_auc, routing_accuracy


def fold_probs(setup, fold, train_config, cache: Path, tag: str, model_config=None):  # methods.Fitted
    """(M, Q_test) P(correct) of the fold's LOCUS trained with train_config (and model_config, default the setup's):
    the cached fit, else trained now (and cached, as bench_accuracy's fit cache does)."""
    return cached_fit_and_predict(cache, tag)(
        **{
            **setup.fit_args("locus", fold),
            "train_config": train_config,
            "model_config": model_config or setup.model_config,
        }
    )


def branched_fold_probs(setup, fold, config_a, config_b, cache: Path, tag_a: str, tag_b: str) -> dict:
    """Both trials' (probs, seconds) on a fold when they differ only after the selected epoch (refit, fine-tuning:
    locus_model.training.train.BRANCH_FIELDS): cached fits are read; else the warm-up and the epochs run once
    (train_branches) and each trial's fit is scored and cached under the key bench_accuracy gives it."""
    import time

    from bench.common import fit_path, load_fitted, save_fitted
    from locus_model.evaluation.methods import fit_and_predict
    from locus_model.training import train_branches

    trials = {"a": (config_a, tag_a), "b": (config_b, tag_b)}
    paths = {
        k: fit_path(cache, {**setup.fit_args("locus", fold), "train_config": c}, t) for k, (c, t) in trials.items()
    }
    if not all(p.is_file() for p in paths.values()):
        t0 = time.perf_counter()
        budget, val = fold.budget_and_val(setup.scores)
        labels = setup.fit_args("locus", fold).get("benchmarks")
        if labels is not None:  # as fit_and_predict gives them: the test queries' labels unread
            labels = np.asarray(labels).astype(str).astype(object)
            labels[np.asarray(fold.test)] = ""
        results = train_branches(
            setup.encodings,
            budget[setup.trained],
            val[setup.trained],
            benchmarks=labels,
            model_config=setup.model_config,
            train_configs=[config_a, config_b],
        )
        shared = time.perf_counter() - t0
        cache.mkdir(parents=True, exist_ok=True)
        for (k, (config, _)), result in zip(trials.items(), results):
            args = {**setup.fit_args("locus", fold), "train_config": config, "router": result.router}
            fitted = fit_and_predict(**args)
            result.router.save(
                paths[k].with_suffix(".pt"),
                fold=fold.index,
                anchors=fold.anchors.tolist(),
                trained=setup.trained.tolist(),
                held=setup.held.tolist(),
                seed=args["seed"],
            )
            save_fitted(paths[k], fitted._replace(seconds=shared + fitted.seconds))
    return {k: load_fitted(path)[:2] for k, path in paths.items()}  # the trials compare P(correct), unguarded


def compare(
    setup,
    config_a,
    config_b,
    *,
    cache: Path,
    tag_a: str = "",
    tag_b: str = "",
    folds=None,
    n_boot: int = 2000,
    branch: bool = False,
    models: dict | None = None,
) -> dict:
    """Both trials on every fold (or ``folds``): per group (all, in_training, held_out) the fold means of routing and
    AUC of each trial and B minus A with its interval. models: {"a"/"b": LocusConfig} where a trial's differs from
    the setup's."""
    models = models or {}
    if branch and models:
        raise SystemExit("--branch shares the epochs of one LocusConfig: give --model-a/--model-b without --branch")
    splits = [f for f in setup.splits if folds is None or f.index in folds]
    probs: dict[str, list[np.ndarray]] = {"a": [], "b": []}  # trial -> per fold (M, Q_test)
    labels: list[np.ndarray] = []
    seconds: dict[str, list[float]] = {"a": [], "b": []}
    for fold in splits:
        both = branched_fold_probs(setup, fold, config_a, config_b, cache, tag_a, tag_b) if branch else None
        for name, config, tag in (("a", config_a, tag_a), ("b", config_b, tag_b)):
            p, s = both[name] if both is not None else fold_probs(setup, fold, config, cache, tag, models.get(name))[:2]
            probs[name].append(np.asarray(p, np.float64))
            seconds[name].append(s)
        labels.append(setup.scores[:, fold.test].astype(np.float64))
    groups = {"all": np.arange(len(setup.scores)), "in_training": setup.trained, "held_out": setup.held}
    out: dict = {"folds": [f.index for f in splits], "fit_seconds": seconds, "groups": {}}
    for group, rows in groups.items():
        if len(rows) < 2:
            continue
        sub = {k: [p[rows] for p in v] for k, v in probs.items()}
        ys = [y[rows] for y in labels]
        per_fold = {
            k: {
                "routing_acc": [routing_accuracy(p, y) for p, y in zip(v, ys)],
                "auc": [roc_auc(p, y) for p, y in zip(v, ys)],
            }
            for k, v in sub.items()
        }
        diff = bootstrap_comparisons(sub, ys, against="b", n_boot=n_boot, seed=setup.seed)["a"]
        out["groups"][group] = {"per_fold": per_fold, "b_minus_a": diff}
    return out


def report(result: dict, a: list[str], b: list[str]) -> str:
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    lines = [
        f"A = {' '.join(a) or 'defaults'}; B = {' '.join(b) or 'defaults'}; folds {result['folds']}; fit seconds "
        f"A {[round(s) for s in result['fit_seconds']['a']]}, B {[round(s) for s in result['fit_seconds']['b']]}",
        "| group | routing A | routing B | B minus A | AUC A | AUC B | B minus A |",
        "|---|---|---|---|---|---|---|",
    ]
    for group, g in result["groups"].items():
        cells = [group]
        for metric in ("routing_acc", "auc"):
            ma, mb = (np.mean(g["per_fold"][k][metric]) for k in ("a", "b"))
            d = g["b_minus_a"][metric]
            cells += [pct(ma), pct(mb), f"{100 * d['diff']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(
        "routing per fold, A: "
        + " / ".join(pct(x) for x in result["groups"]["all"]["per_fold"]["a"]["routing_acc"])
        + "; B: "
        + " / ".join(pct(x) for x in result["groups"]["all"]["per_fold"]["b"]["routing_acc"])
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True, choices=sorted(BUDGETS))
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="+", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fit-cache", type=Path, required=True)
    p.add_argument("--a", nargs="*", default=[], metavar="NAME=VALUE", help="trial A's TrainConfig overrides")
    p.add_argument("--b", nargs="*", default=[], metavar="NAME=VALUE", help="trial B's TrainConfig overrides")
    p.add_argument("--model-a", nargs="*", default=[], metavar="NAME=VALUE", help="trial A's LocusConfig overrides")
    p.add_argument("--model-b", nargs="*", default=[], metavar="NAME=VALUE", help="trial B's LocusConfig overrides")
    p.add_argument("--tag-a", default="", help="the bench_accuracy --tag whose cached fits are trial A's")
    p.add_argument("--tag-b", default="", help="the bench_accuracy --tag whose cached fits are trial B's")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--branch",
        action="store_true",
        help="train each fold once and branch after the selected epoch (A and B may differ only in "
        "locus_model.training.train.BRANCH_FIELDS: refit, fine-tuning, calibration); half the CPU",
    )
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--out", type=Path, default=None, help="also write the result JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    setup = protocol_setup(args.suite, budget=args.budget, folds=args.folds, seed=args.seed)
    config_a = apply_options(setup.train_config, args.a, "--a")
    config_b = apply_options(setup.train_config, args.b, "--b")
    models = {
        k: apply_options(setup.model_config, opts, f"--model-{k}")
        for k, opts in (("a", args.model_a), ("b", args.model_b))
        if opts
    }
    result = compare(
        setup,
        config_a,
        config_b,
        cache=args.fit_cache,
        tag_a=args.tag_a,
        tag_b=args.tag_b,
        folds=args.only_folds,
        n_boot=args.n_boot,
        branch=args.branch,
        models=models,
    )
    result["settings"] = {
        "suite": args.suite,
        "budget": args.budget,
        "a": args.a,
        "b": args.b,
        "model_a": args.model_a,
        "model_b": args.model_b,
        "command": " ".join(["compare_trials.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    print(report(result, args.a + args.model_a, args.b + args.model_b))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
