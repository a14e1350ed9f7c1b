"""LOCUS training diagnostics: single-fold (fold 0) trials of TrainConfig options on the synthetic pool, budget 256.

Exploratory, ONE fold: differences of ~1 point are within seed noise (docs/experiments.md, "Where the
earlier defaults lost"). Usage, from the repository root:

    .venv/bin/python -m bench.diag.locus_training base noise1 ...   # trial names below
    .venv/bin/python -m bench.diag.locus_training --list

Each trial appends one JSON line to --out (default bench/.cache/diag/locus_training.jsonl, ignored by git).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from bench.common import CACHE
from locus_model.data.contract import validate_evaluations
from locus_model.data.encoding import encode_queries
from locus_model.data.matrix import EvaluationMatrix
from locus_model.data.synthetic_skills import make_synthetic_tables
from locus_model.evaluation.protocol import evaluate
from locus_model.model import LocusConfig
from locus_model.training import TrainConfig

# the bench's setting (bench/README.md "## Accuracy"): 60 epochs, no early stop; the trials change the rest
BENCH = dict(epochs=60, patience=60, device="cpu")
# the options as they were before this study (the trials of the since-deleted disjoint_targets and
# select_loss_tolerance options are in docs/experiments.md), so "base" stays the old behaviour whatever the defaults are
OLD = dict(noise_start=0.3, noise_end=0.1)
# the calibration trials (temperature, Platt) left with their options: their rows are in docs/experiments.md
TRIALS: dict[str, dict] = {
    "base": {},
    "noise1": dict(noise_start=1.0, noise_end=0.5),
    "seed1": dict(seed=1),
    "noise1_seed1": dict(noise_start=1.0, noise_end=0.5, seed=1),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trials", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=CACHE / "diag" / "locus_training.jsonl")
    args = ap.parse_args(argv)
    if args.list or not args.trials:
        for name, opts in TRIALS.items():
            print(f"{name}: {opts}")
        return 0
    unknown = [t for t in args.trials if t not in TRIALS]
    if unknown:
        raise SystemExit(f"unknown trials {unknown}; see --list")
    torch.set_num_threads(args.threads)
    evaluations, _, _ = make_synthetic_tables("full", seed=0)
    table = validate_evaluations(evaluations.drop(columns="split"), source="synthetic pool (full, seed 0)")
    matrix = EvaluationMatrix.from_table(table)
    enc = encode_queries(matrix.queries, encoder="all-MiniLM-L6-v2", progress=False)  # the user cache
    for name in args.trials:
        cfg = TrainConfig(**{**BENCH, **OLD, **TRIALS[name]})
        t0 = time.perf_counter()
        res = evaluate(
            matrix,
            enc,
            budget=256,
            folds=5,
            methods=["locus", "best_single"],
            train_config=cfg,
            model_config=LocusConfig(query_dim=enc.shape[1]),
            only_folds=[0],
            progress=False,
        )
        row = {
            "trial": name,
            "options": TRIALS[name],
            "wall_s": round(time.perf_counter() - t0, 1),
            "train_config": dataclasses.asdict(cfg),
        }
        for method in ("locus", "best_single"):
            g = res["methods"][method]["all"]
            row[method] = {
                k: round(100 * g[k]["mean"], 2) for k in ("routing_acc", "correctness_acc", "auc", "brier") if k in g
            }
        print(json.dumps(row), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
