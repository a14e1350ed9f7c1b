"""Accuracy benchmark: LOCUS vs EmbedLLM-MF, IRT, kNN, best single and the oracle, same protocol, same anchors.

Suites:
  synthetic  the SYNTHETIC pool (full: 113 models x 6,000 queries, locus_model.data.synthetic_skills, seed 0), MiniLM
        encodings, budgets 256 / 512 / 1024 (and 128 for the held-out target), 5 folds over queries.
  ae1   AlpacaEval 1 (real: 53 models x 805 instructions, GPT-4-judged wins over text-davinci-003), read in
        place from ../shared/data/alpacaeval-ae1 (CC BY-NC 4.0: never copied), budgets 64 / 128 / 256, 5 folds.
  mmlu  MMLU-Pro (real: 29 models x 12,032 questions, vendored in data/), budgets 32-1024, 5 folds.
  metabench  Open LLM Leaderboard items (real: 2,001 open models x 1,075 items of ARC, GSM8K, MMLU, TruthfulQA,
        Winogrande), read in place from ../shared/data/metabench (CC BY-NC-SA 4.0: never copied), budgets 32-512.

    .venv/bin/python -m bench.bench_accuracy --suite synthetic ae1          # everything (long on 2 CPU cores)
    .venv/bin/python -m bench.bench_accuracy --suite ae1 --budgets 128 --only-folds 0
    .venv/bin/python -m bench.bench_accuracy --suite synthetic --budgets 128 --probe-held-out   # held-out check

Writes one JSON per (suite, budget) to bench/results/accuracy_<suite>_b<budget>.json (the protocol's result,
see locus_model.evaluation) and prints the tables. Encodings are cached in the user cache
(locus_model.data.encoders.user_cache_dir).
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

import locus_model.evaluation.protocol as protocol
from bench.common import BUDGETS, LABELS, RESULTS, apply_options, cached_fit_and_predict, load_suite
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.methods import METHODS
from locus_model.evaluation.protocol import evaluate
from locus_model.evaluation.results import format_interval, print_results, save_results
from locus_model.evaluation.splits import choose_held_out
from locus_model.model import LocusConfig
from locus_model.training import TrainConfig


def _cell(stat: dict | None, scale: float = 100.0) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    return f"{stat['mean'] * scale:.1f} ± {stat['std'] * scale:.1f}"


def _vs(stat: dict | None) -> str:
    text = format_interval(stat)
    return "" if text == "-" else text


def _fold_stratified(result: dict, group: str) -> bool:
    """Whether the file's LOCUS-minus intervals are fold-stratified: recorded in its settings, or (files written
    while that key did not exist yet) every diff equals the difference of the fold means, which pooled AUCs miss."""
    if result["settings"].get("vs_methods_intervals") == "fold-stratified":
        return True
    methods = result["methods"]
    for other, stats in methods["locus"][group]["vs_methods"].items():
        for metric, stat in stats.items():
            a, b = methods["locus"][group][metric]["mean"], methods[other][group][metric]["mean"]
            if stat["diff"] is not None and None not in (a, b) and abs(stat["diff"] - (a - b)) > 1e-9:
                return False
    return True


def markdown_summary(paths: list[Path]) -> str:
    """Markdown tables (percent; Brier x100; mean ± std over folds) from result JSONs."""
    out = []
    for path in paths:
        result = json.loads(path.read_text())
        s, z = result["settings"], result["sizes"]
        out.append(f"#### {s.get('suite', path.stem)}, budget {s['budget']} (`{path.name}`)\n")
        out.append(
            f"{z['models']} models ({z['held_out_models']} held out) x {z['queries']} queries, "
            f"{s['folds']} folds{'' if s.get('only_folds') is None else ' (only ' + str(s['only_folds']) + ')'}, "
            f"wall {result['wall_s'] / 60:.0f} min.\n"
        )
        groups = [
            g
            for g in ("all", "in_training", "held_out", *s.get("extra_groups", {}))
            if g in result["methods"]["best_single"]
        ]
        for group in groups:
            out.append(f"| {group} | routing | hit@3 | correctness | AUC | Brier | routing vs best_single [95% CI] |")
            out.append("|---|---|---|---|---|---|---|")
            for name, res in result["methods"].items():
                e = res.get(group)
                if e is None:
                    continue
                out.append(
                    f"| {name} | {_cell(e['routing_acc'])} | {_cell(e['hit@3'])} | {_cell(e['correctness_acc'])} | "
                    f"{_cell(e['auc'])} | {_cell(e['brier'])} | {_vs(e.get('vs_best_single'))} |"
                )
            out.append("")
            vs_methods = result["methods"].get("locus", {}).get(group, {}).get("vs_methods")
            if vs_methods:
                how = (
                    "difference of the fold means, 95% paired bootstrap CI over the test queries within folds"
                    if _fold_stratified(result, group)
                    else "difference over the test queries pooled across folds, 95% paired bootstrap CI"
                )
                out.append(f"LOCUS minus each method ({group}; {how}; Brier: negative favours LOCUS):\n")
                out.append("| vs | routing | correctness | AUC | Brier |")
                out.append("|---|---|---|---|---|")
                for other, stats in vs_methods.items():
                    out.append(
                        f"| {other} | "
                        + " | ".join(_vs(stats.get(k)) for k in ("routing_acc", "correctness_acc", "auc", "brier"))
                        + " |"
                    )
                out.append("")
    return "\n".join(out)


def sample_efficiency(paths: list[Path], out: Path | None, group: str = "all", reference_budget: int = 128) -> str:
    """Routing accuracy against budget from result JSONs of one suite: a PNG with two panels (left: each method's
    fold mean, bars = std over folds; right: LOCUS minus each method, 95% paired bootstrap interval) and a
    markdown table of the budget at which each method first reaches LOCUS's routing at ``reference_budget``."""
    results = sorted((json.loads(p.read_text()) for p in paths), key=lambda r: r["settings"]["budget"])
    suites = {str(r["settings"].get("suite")) for r in results}
    if len(suites) != 1 or len({r["settings"]["budget"] for r in results}) != len(results):
        raise SystemExit(
            f"--plot: give one result file per budget of one suite (got suites {sorted(map(str, suites))})"
        )
    budgets = [r["settings"]["budget"] for r in results]
    methods = [m for m in results[0]["methods"] if all(m in r["methods"] for r in results)]
    folds = sorted({str(r["settings"].get("only_folds") or list(range(r["settings"]["folds"]))) for r in results})

    def stat(r: dict, m: str, key: str = "routing_acc") -> dict:
        return r["methods"][m][group][key]

    lines = []
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        colours = {
            "locus": "C0",
            "embedllm_mf": "C1",
            "irt": "C2",
            "knn": "C3",
            "per_benchmark": "C4",
            "best_single": "grey",
        }
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
        for m in methods:
            if m == "oracle":  # far above the others (its value is in the title)
                continue
            mean = [100 * stat(r, m)["mean"] for r in results]
            std = [100 * (stat(r, m)["std"] or 0) for r in results]
            ax.errorbar(
                budgets,
                mean,
                yerr=std,
                marker="o",
                ms=4,
                capsize=3,
                label=LABELS.get(m, m),
                color=colours.get(m),
                ls="--" if m == "best_single" else "-",
                lw=2.5 if m == "locus" else 1.5,
                zorder=1 if m == "best_single" else 2,
            )
            vs = [r["methods"]["locus"][group].get("vs_methods", {}).get(m, {}).get("routing_acc") for r in results]
            if m != "locus" and m != "oracle" and all(v and v["diff"] is not None for v in vs):
                diff = np.array([100 * v["diff"] for v in vs])
                lo, hi = np.array([100 * v["ci_low"] for v in vs]), np.array([100 * v["ci_high"] for v in vs])
                bx.plot(budgets, diff, marker="o", ms=4, label=f"LOCUS - {LABELS.get(m, m)}", color=colours.get(m))
                bx.fill_between(budgets, lo, hi, alpha=0.2, color=colours.get(m))
        for a in (ax, bx):
            a.set_xscale("log", base=2)
            a.set_xticks(budgets, [str(b) for b in budgets])
            a.set_xlabel("budget (evaluations per model)")
            a.grid(alpha=0.3)
        bx.axhline(0, color="black", lw=0.8)
        ax.set_ylabel(f"routing accuracy, % ({group} models)")
        oracle = (
            f"; oracle {100 * min(stat(r, 'oracle')['mean'] for r in results):.1f}-"
            f"{100 * max(stat(r, 'oracle')['mean'] for r in results):.1f}"
            if "oracle" in methods
            else ""
        )
        over = (
            f"fold {folds[0].strip('[]')} only"
            if len(folds) == 1 and "," not in folds[0]
            else f"mean ± std over folds {', '.join(folds)}"
        )
        ax.set_title(f"{results[0]['settings'].get('suite')}: {over}{oracle}", fontsize=9)
        bx.set_ylabel("routing difference, points")
        bx.set_title("LOCUS minus each method, 95% paired bootstrap interval", fontsize=9)
        ax.legend(fontsize=8)
        bx.legend(fontsize=8)
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=90)
        lines.append(f"wrote {out}\n")
    ref = next((r for r in results if r["settings"]["budget"] == reference_budget), None)
    if ref is not None and "locus" in methods:
        target = stat(ref, "locus")["mean"]
        lines.append(
            f"First budget at which each method's routing ({group}) reaches LOCUS's at {reference_budget} "
            f"({100 * target:.1f}):\n"
        )
        lines.append(
            "| method | "
            + " | ".join(str(b) for b in budgets)
            + " | first budget >= LOCUS@"
            + str(reference_budget)
            + " |"
        )
        lines.append("|---|" + "---|" * (len(budgets) + 1))
        for m in methods:
            means = [stat(r, m)["mean"] for r in results]
            first = next((b for b, v in zip(budgets, means) if v >= target), None)
            lines.append(
                f"| {m} | "
                + " | ".join(f"{100 * v:.1f}" for v in means)
                + " | "
                + (str(first) if first is not None else f"not reached by {budgets[-1]}")
                + " |"
            )
    return "\n".join(lines)


def budget_tables(
    paths: list[Path], group: str = "all", metrics: tuple[str, ...] = ("routing_acc", "correctness_acc", "auc", "brier")
) -> str:
    """Markdown: one table per metric (rows = methods, columns = budgets, mean ± std over folds), then LOCUS minus
    each method with its 95% paired interval per budget, from result JSONs of one suite."""
    results = sorted((json.loads(p.read_text()) for p in paths), key=lambda r: r["settings"]["budget"])
    budgets = [r["settings"]["budget"] for r in results]
    methods = [m for m in results[0]["methods"] if all(group in r["methods"].get(m, {}) for r in results)]
    names = {
        "routing_acc": "routing",
        "correctness_acc": "correctness",
        "auc": "AUC",
        "brier": "Brier x100",
        "hit@3": "hit@3",
    }
    out = []
    for metric in metrics:
        out.append(f"| {names[metric]} ({group}) | " + " | ".join(f"@{b}" for b in budgets) + " |")
        out.append("|---|" + "---|" * len(budgets))
        for m in methods:
            if m == "oracle" and metric != "routing_acc":  # it reads the labels: 100 / 0 by construction
                continue
            cells = [
                _cell(r["methods"][m][group][metric])
                if len(r["settings"].get("only_folds") or [0, 1]) > 1
                else f"{100 * r['methods'][m][group][metric]['mean']:.1f}"
                for r in results
            ]  # one fold: no std
            out.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
        out.append("")
    if "locus" in methods:
        out.append(
            f"LOCUS minus each method ({group}; difference of the fold means, 95% paired bootstrap interval over "
            "the test queries within folds; an interval covering 0 is a tie; Brier: negative favours LOCUS):\n"
        )
        out.append("| vs | metric | " + " | ".join(f"@{b}" for b in budgets) + " |")
        out.append("|---|---|" + "---|" * len(budgets))
        for m in methods:
            if m in ("locus", "oracle"):
                continue
            for metric in ("routing_acc", "correctness_acc", "auc", "brier"):
                cells = [
                    _vs(r["methods"]["locus"][group].get("vs_methods", {}).get(m, {}).get(metric)) or "-"
                    for r in results
                ]
                out.append(f"| {LABELS.get(m, m)} | {names[metric]} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--suite", nargs="+", default=["synthetic", "ae1"], choices=sorted(BUDGETS), help="the suites to run"
    )
    p.add_argument("--budgets", type=int, nargs="+", default=None, help="override the suite's budgets")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="+", default=None, help="run only these fold indices (0-based)")
    p.add_argument("--holdout-models", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--encoder", default="all-MiniLM-L6-v2")
    p.add_argument(
        "--encoder-runtime",
        default="torch",
        help="query-encoder runtime (torch, the reference, as every result file here was made; onnx-int8, ...)",
    )
    p.add_argument("--epochs", type=int, default=None, help="LOCUS max epochs (default: TrainConfig's)")
    p.add_argument("--patience", type=int, default=None, help="LOCUS patience in epochs (default: TrainConfig's)")
    p.add_argument(
        "--train-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one LOCUS TrainConfig field, e.g. finetune_steps=300 (repeatable)",
    )
    p.add_argument(
        "--model-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a LocusConfig field for LOCUS, e.g. predictor_hidden=256 (repeatable)",
    )
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core machine)")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="(fold, method) fits at once in worker processes (cpu_count // jobs threads each)",
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--tag", default="", help="suffix for the result file names")
    p.add_argument(
        "--probe-held-out",
        action="store_true",
        help="train on all models (no hold-out) and report the models that --holdout-models would hold "
        "out as an extra group 'held_out_as_trained': their accuracy as in-training models, to set "
        "beside their accuracy when onboarded (files get the suffix _probe)",
    )
    p.add_argument(
        "--fit-cache",
        type=Path,
        default=None,
        help="keep each (fold, method) fit's test probabilities (and each fold's trained LOCUS) in this "
        "folder and reuse them: folds run in separate calls add up without refitting (--jobs 1 only)",
    )
    p.add_argument(
        "--reuse-tags",
        nargs="+",
        default=[],
        metavar="TAG",
        help="with --fit-cache: also read the fits cached by runs with these --tag values (same data, folds "
        "and configs), e.g. to assemble folds or methods run apart into one file",
    )
    p.add_argument(
        "--plot",
        type=Path,
        nargs="+",
        default=None,
        help="draw routing accuracy against budget (one line per method, fold mean and 95%% paired "
        "interval) from these result JSONs into --plot-out and exit (runs nothing)",
    )
    p.add_argument(
        "--table",
        type=Path,
        nargs="+",
        default=None,
        help="print compact markdown tables (methods x budgets, and LOCUS minus each method with its paired "
        "interval) from these result JSONs of one suite and exit (runs nothing)",
    )
    p.add_argument(
        "--group", default="all", help="the model group --table and --plot report (all, in_training, held_out)"
    )
    p.add_argument("--plot-out", type=Path, default=None, help="the PNG --plot writes")
    p.add_argument(
        "--summarize",
        type=Path,
        nargs="+",
        default=None,
        help="print markdown tables from these result JSONs and exit (runs nothing)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.summarize:
        print(markdown_summary(args.summarize))
        return 0
    if args.plot:
        print(sample_efficiency(args.plot, args.plot_out, group=args.group))
        return 0
    if args.table:
        print(budget_tables(args.table, group=args.group))
        return 0
    torch.set_num_threads(args.threads)
    if args.fit_cache is not None:
        if args.jobs != 1:
            raise SystemExit("--fit-cache works with --jobs 1 only")
        protocol.fit_and_predict = cached_fit_and_predict(args.fit_cache, args.tag, tuple(args.reuse_tags))
    train_config = TrainConfig(device="cpu", seed=args.seed)
    if args.epochs is not None:
        train_config = replace(train_config, epochs=args.epochs)
    if args.patience is not None:
        train_config = replace(train_config, patience=args.patience)
    train_config = apply_options(train_config, args.train_option)
    methods = tuple(m for m in args.methods.split(",") if m)
    for suite in args.suite:
        matrix, source = load_suite(suite)
        start = time.perf_counter()
        encodings = encode_queries(matrix.queries, encoder=args.encoder, runtime=args.encoder_runtime, progress=True)
        print(
            f"[{suite}] {len(matrix.models)} models x {len(matrix.query_ids)} queries from {source}; "
            f"encodings {encodings.shape} in {time.perf_counter() - start:.0f} s",
            flush=True,
        )
        holdout, extra, tag = args.holdout_models, None, args.tag
        if args.probe_held_out:
            held = choose_held_out(len(matrix.models), args.holdout_models, args.seed)
            holdout, extra, tag = 0.0, {"held_out_as_trained": [matrix.models[i] for i in held]}, "_probe" + args.tag
        for budget in args.budgets or BUDGETS[suite]:
            result = evaluate(
                matrix,
                encodings,
                budget=budget,
                folds=args.folds,
                holdout_models=holdout,
                seed=args.seed,
                methods=methods,
                train_config=train_config,
                model_config=apply_options(
                    LocusConfig(query_dim=encodings.shape[1]), args.model_option, "--model-option"
                ),
                only_folds=args.only_folds,
                progress=True,
                extra_groups=extra,
                jobs=args.jobs,
            )
            result["settings"].update(
                {
                    "suite": suite,
                    "source": source,
                    "encoder": args.encoder,
                    "encoder_runtime": args.encoder_runtime,
                    "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                }
            )
            path = save_results(result, args.out_dir / f"accuracy_{suite}_b{budget}{tag}.json")
            print(f"\n=== {suite}, budget {budget} ===")
            print_results(result)
            print(f"wrote {path}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
