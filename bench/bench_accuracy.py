"""Accuracy benchmark: LOCUS vs EmbedLLM-MF, IRT, kNN, best single and the oracle, same harness, same anchors.

Suites:
  demo  the SYNTHETIC demo pool (full: 113 models x 6,000 queries, locus_model.demo, seed 0), MiniLM
        encodings, budgets 256 / 512 / 1024 (and 128 for the held-out target), 5 folds over queries.
  ae1   AlpacaEval 1 (real: 53 models x 805 instructions, GPT-4-judged wins over text-davinci-003), read in
        place from ../shared/data/alpacaeval-ae1 (CC BY-NC 4.0: never copied), budgets 64 / 128 / 256, 5 folds.

    .venv/bin/python bench/bench_accuracy.py --suite demo ae1          # everything (long on 2 CPU cores)
    .venv/bin/python bench/bench_accuracy.py --suite ae1 --budgets 128 --only-folds 0
    .venv/bin/python bench/bench_accuracy.py --suite demo --budgets 128 --probe-held-out   # held-out check

Writes one JSON per (suite, budget) to bench/results/accuracy_<suite>_b<budget>.json (the harness's result,
see locus_model.evaluate) and prints the tables. Encodings are cached in the user cache (locus_model.encoding.user_cache_dir).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from locus_model.data.contract import validate_evaluations  # noqa: E402
from locus_model.data.encoding import encode_queries  # noqa: E402
from locus_model.data.long_format import read_evaluations  # noqa: E402
from locus_model.data.matrix import EvaluationMatrix  # noqa: E402
from locus_model.evaluation.harness import evaluate  # noqa: E402
from locus_model.evaluation.methods import METHODS  # noqa: E402
from locus_model.evaluation.results import format_interval, print_results, save_results  # noqa: E402
from locus_model.evaluation.splits import choose_held_out  # noqa: E402
from locus_model.model import LocusConfig  # noqa: E402
from locus_model.train import TrainConfig  # noqa: E402

AE1 = REPO.parent / "shared" / "data" / "alpacaeval-ae1" / "evaluations.parquet"
MMLU_PRO = REPO / "data" / "mmlu-pro" / "evaluations.parquet"
BUDGETS = {"demo": (128, 256, 512, 1024), "ae1": (64, 128, 256), "mmlu": (32, 64, 128, 256, 512, 1024)}


def load_suite(suite: str) -> tuple[EvaluationMatrix, str]:
    if suite == "demo":
        from locus_model.data.demo import make_demo_tables

        evaluations, _, _ = make_demo_tables("full", seed=0)
        table = validate_evaluations(evaluations.drop(columns="split"), source="demo pool (full, seed 0)")
        return EvaluationMatrix.from_table(table), "synthetic demo pool, full, seed 0"
    if suite == "ae1":
        if not AE1.is_file():
            raise SystemExit(f"{AE1} not found: the AlpacaEval matrix lives in ../shared/data (see its README)")
        return EvaluationMatrix.from_table(read_evaluations(AE1)), str(AE1)
    if suite == "mmlu":  # real: 29 models x 12,032 MMLU-Pro questions, vendored (data/mmlu-pro/README.md)
        return EvaluationMatrix.from_table(read_evaluations(MMLU_PRO)), str(MMLU_PRO)
    raise SystemExit(f"unknown suite {suite!r}: use demo, ae1 or mmlu")


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
    import json

    out = []
    for path in paths:
        result = json.loads(path.read_text())
        s, z = result["settings"], result["sizes"]
        out.append(f"#### {s.get('suite', path.stem)}, budget {s['budget']} (`{path.name}`)\n")
        out.append(f"{z['models']} models ({z['held_out_models']} held out) x {z['queries']} queries, "
                   f"{s['folds']} folds{'' if s.get('only_folds') is None else ' (only ' + str(s['only_folds']) + ')'}, "
                   f"wall {result['wall_s'] / 60:.0f} min.\n")
        groups = [g for g in ("all", "in_training", "held_out", *s.get("extra_groups", {})) if g in result["methods"]["best_single"]]
        for group in groups:
            out.append(f"| {group} | routing | hit@3 | correctness | AUC | Brier | routing vs best_single [95% CI] |")
            out.append("|---|---|---|---|---|---|---|")
            for name, res in result["methods"].items():
                e = res.get(group)
                if e is None:
                    continue
                out.append(f"| {name} | {_cell(e['routing_acc'])} | {_cell(e['hit@3'])} | {_cell(e['correctness_acc'])} | "
                           f"{_cell(e['auc'])} | {_cell(e['brier'])} | {_vs(e.get('vs_best_single'))} |")
            out.append("")
            vs_methods = result["methods"].get("locus", {}).get(group, {}).get("vs_methods")
            if vs_methods:
                how = ("difference of the fold means, 95% paired bootstrap CI over the test queries within folds"
                       if _fold_stratified(result, group) else
                       "difference over the test queries pooled across folds, 95% paired bootstrap CI")
                out.append(f"LOCUS minus each method ({group}; {how}; Brier: negative favours LOCUS):\n")
                out.append("| vs | routing | correctness | AUC | Brier |")
                out.append("|---|---|---|---|---|")
                for other, stats in vs_methods.items():
                    out.append(f"| {other} | " + " | ".join(_vs(stats.get(k)) for k in ("routing_acc", "correctness_acc", "auc", "brier")) + " |")
                out.append("")
    return "\n".join(out)


def apply_train_options(config: TrainConfig, options: list[str]) -> TrainConfig:
    """TrainConfig with NAME=VALUE overrides, each VALUE parsed as the field's current type."""
    changes = {}
    for option in options:
        name, sep, value = option.partition("=")
        if not sep or not hasattr(config, name):
            raise SystemExit(f"--train-option {option!r}: use NAME=VALUE with NAME a TrainConfig field")
        current = getattr(config, name)
        if isinstance(current, bool):
            changes[name] = value.lower() in ("1", "true", "yes")
        elif isinstance(current, tuple):  # comma-separated, e.g. finetune_noise=2,3
            changes[name] = tuple(type(current[0])(v) for v in value.split(",")) if current else tuple(value.split(","))
        else:
            changes[name] = value if isinstance(current, str) or current is None else type(current)(value)
    return replace(config, **changes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", nargs="+", default=["demo", "ae1"], choices=sorted(BUDGETS))
    p.add_argument("--budgets", type=int, nargs="+", default=None, help="override the suite's budgets")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="+", default=None, help="run only these fold indices (0-based)")
    p.add_argument("--holdout-models", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--encoder", default="all-MiniLM-L6-v2")
    p.add_argument("--epochs", type=int, default=None, help="LOCUS max epochs (default: TrainConfig's)")
    p.add_argument("--patience", type=int, default=None, help="LOCUS patience in epochs (default: TrainConfig's)")
    p.add_argument("--train-option", action="append", default=[], metavar="NAME=VALUE",
                   help="override one LOCUS TrainConfig field, e.g. finetune_steps=300 (repeatable)")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core machine)")
    p.add_argument("--jobs", type=int, default=1,
                   help="(fold, method) fits at once in worker processes (cpu_count // jobs threads each)")
    p.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--tag", default="", help="suffix for the result file names")
    p.add_argument("--probe-held-out", action="store_true",
                   help="train on all models (no hold-out) and report the models that --holdout-models would hold "
                        "out as an extra group 'held_out_as_trained': their accuracy as in-training models, to set "
                        "beside their accuracy when onboarded (files get the suffix _probe)")
    p.add_argument("--summarize", type=Path, nargs="+", default=None,
                   help="print markdown tables from these result JSONs and exit (runs nothing)")
    args = p.parse_args(argv)
    if args.summarize:
        print(markdown_summary(args.summarize))
        return 0
    torch.set_num_threads(args.threads)
    train_config = TrainConfig(device="cpu", seed=args.seed)
    if args.epochs is not None:
        train_config = replace(train_config, epochs=args.epochs)
    if args.patience is not None:
        train_config = replace(train_config, patience=args.patience)
    train_config = apply_train_options(train_config, args.train_option)
    methods = tuple(m for m in args.methods.split(",") if m)
    for suite in args.suite:
        matrix, source = load_suite(suite)
        start = time.perf_counter()
        encodings = encode_queries(matrix.queries, encoder=args.encoder, progress=True)
        print(f"[{suite}] {len(matrix.models)} models x {len(matrix.query_ids)} queries from {source}; "
              f"encodings {encodings.shape} in {time.perf_counter() - start:.0f} s", flush=True)
        holdout, extra, tag = args.holdout_models, None, args.tag
        if args.probe_held_out:
            held = choose_held_out(len(matrix.models), args.holdout_models, args.seed)
            holdout, extra, tag = 0.0, {"held_out_as_trained": [matrix.models[i] for i in held]}, "_probe" + args.tag
        for budget in args.budgets or BUDGETS[suite]:
            result = evaluate(
                matrix, encodings, budget=budget, folds=args.folds, holdout_models=holdout,
                seed=args.seed, methods=methods, train_config=train_config,
                model_config=LocusConfig(query_dim=encodings.shape[1]), only_folds=args.only_folds, progress=True,
                extra_groups=extra, jobs=args.jobs,
            )
            result["settings"].update({"suite": suite, "source": source, "encoder": args.encoder,
                                       "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])})
            path = save_results(result, args.out_dir / f"accuracy_{suite}_b{budget}{tag}.json")
            print(f"\n=== {suite}, budget {budget} ===")
            print_results(result)
            print(f"wrote {path}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
