"""Does averaging LOCUS over training seeds route better than one seed? From cached fits only (nothing is refitted).

For one (suite, budget), reads each fold's test probabilities of the LOCUS fits that `bench_accuracy.py --fit-cache
DIR` (or compare_trials.py) cached for each training seed (seed 0 under --tags' first tag, seed s under the next, with
`--train-option seed=s`), and prints per fold the routing accuracy of each seed and of the ensemble that averages the
seeds' probabilities or logits over every model (in-training and held-out).

    .venv/bin/python -m bench.diag.seed_ensemble --suite metabench --budget 64 --tags _def4 _seed1 _seed2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.common import CACHE, fit_path, protocol_setup
from locus_model.stats.metrics import routing_accuracy


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="metabench")
    p.add_argument("--budget", type=int, default=64)
    p.add_argument("--tags", nargs="+", required=True, help="the fit-cache tag of seed 0, 1, 2, ... in that order")
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits")
    args = p.parse_args(argv)
    setups = [
        protocol_setup(args.suite, budget=args.budget, train_options=[f"seed={s}"] if s else [])
        for s in range(len(args.tags))
    ]
    rows: dict[str, list[float]] = {}
    for fold in setups[0].splits:
        probs = []
        for setup, tag in zip(setups, args.tags):
            path = fit_path(args.fit_cache, setup.fit_args("locus", fold), tag)
            if not path.is_file():
                raise SystemExit(
                    f"{path}: not cached; run bench_accuracy.py --suite {args.suite} --budgets "
                    f"{args.budget} --methods locus --fit-cache {args.fit_cache} --tag {tag} with that seed"
                )
            with np.load(path) as z:
                probs.append(np.clip(z["probs"].astype(np.float64), 1e-6, 1 - 1e-6))
        labels = setups[0].scores[:, fold.test]
        for s, pr in enumerate(probs):
            rows.setdefault(f"seed {s}", []).append(routing_accuracy(pr, labels))
        rows.setdefault("mean of probabilities", []).append(routing_accuracy(np.mean(probs, axis=0), labels))
        logits = np.mean([np.log(pr / (1 - pr)) for pr in probs], axis=0)
        rows.setdefault("mean of logits", []).append(routing_accuracy(logits, labels))
    print(f"| {args.suite} @{args.budget} | " + " | ".join(f"fold {f.index}" for f in setups[0].splits) + " | mean |")
    print("|---|" + "---|" * (len(setups[0].splits) + 1))
    for name, values in rows.items():
        print(f"| {name} | " + " | ".join(f"{100 * v:.1f}" for v in values) + f" | {100 * np.mean(values):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
