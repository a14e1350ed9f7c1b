"""Where a LOCUS training's time goes: the wall seconds of each stage (TrainResult.seconds) on one fold of a suite.

Same folds, anchors, model split and TrainConfig as `bench_accuracy.py --suite S --budgets B` (the protocol's k-fold;
--train-option overrides as there). Each budget is trained once with the library as it is and, with --baseline-cells,
once more with TrainConfig.predictor_step_cells set to that value (the cap on cells per predictor-only step;
1000000 = no cap below the 2,048-query x 256-model limit, the behaviour before the cap), so the ratio of the two is
measured in the same run on the same machine. Per stage: seconds, share, and (with a baseline) the ratio.

    .venv/bin/python -m bench.bench_training_stages --suite metabench --budgets 128 512 --fold 0 \\
        --threads 1 [--baseline-cells 1000000] [--out bench/results/training_stages_metabench.json]

Smoke run (seconds): `--budgets 32 --train-option max_steps=25 --train-option latent_steps=20 --train-option
finetune_steps=20`.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.common import BUDGETS, protocol_setup
from locus_model.training import train_locus
from locus_model.training.train import STAGES


def train_stages(setup, fold, step_cells: int | None = None) -> dict:
    """One LOCUS training on the fold's anchors (validation: its val cells), as fit_and_predict trains it; the
    seconds per stage, the total, the warm-up's and the fine-tuning's steps. step_cells: predictor_step_cells for this
    training (None = the setup's)."""
    budget, val = fold.budget_and_val(setup.scores)
    config = setup.train_config if step_cells is None else replace(setup.train_config, predictor_step_cells=step_cells)
    t0 = time.perf_counter()
    result = train_locus(
        setup.encodings,
        budget[setup.trained],
        val[setup.trained],
        model_config=setup.model_config,
        train_config=config,
        progress=False,
    )
    total = time.perf_counter() - t0
    return {
        "step_cells": config.predictor_step_cells,
        "seconds": result.seconds,
        "total": total,
        "latent_steps_run": result.latent.get("steps_run"),
        "finetune_steps_run": result.finetune.get("steps_run"),
        "val_routing_acc": result.finetune.get("val_routing_acc", result.best_metrics.get("val_routing_acc")),
    }


def table(budget: int, runs: list[dict]) -> str:
    head = (
        "| stage | "
        + " | ".join(f"{r['step_cells']:,} cells/step (s)" for r in runs)
        + (" | ratio |" if len(runs) == 2 else " |")
    )
    lines = [f"budget {budget}", head, "|---" * (len(runs) + 1 + (len(runs) == 2)) + "|"]
    for stage in [*STAGES, "total"]:
        vals = [r["total"] if stage == "total" else r["seconds"].get(stage) for r in runs]
        if all(v is None for v in vals):
            continue
        cells = [f"{v:.1f}" if v is not None else "-" for v in vals]
        if len(runs) == 2 and None not in vals:
            cells.append(f"{vals[1] / max(vals[0], 1e-9):.2f}x")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="metabench", choices=sorted(BUDGETS))
    p.add_argument("--budgets", type=int, nargs="+", default=[128, 512])
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--baseline-cells",
        type=int,
        default=None,
        help="also train with predictor_step_cells at this value and print the ratio (library / baseline)",
    )
    p.add_argument("--train-option", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = {"suite": args.suite, "fold": args.fold, "threads": args.threads, "budgets": {}}
    for b in args.budgets:
        setup = protocol_setup(args.suite, budget=b, seed=args.seed, train_options=args.train_option)
        fold = setup.splits[args.fold]
        runs = ([train_stages(setup, fold, args.baseline_cells)] if args.baseline_cells else []) + [
            train_stages(setup, fold)
        ]
        out["budgets"][str(b)] = runs
        print(table(b, runs), flush=True)
        for r in runs:
            print(
                f"  {r['step_cells']:,} cells/step: warm-up steps {r['latent_steps_run']}, fine-tuning steps "
                f"{r['finetune_steps_run']}, val routing {r['val_routing_acc']:.4f}",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
