"""Capability estimates, reference scores and copy recognition from n evaluations (issue 56, items 1, 2, 4, 6).

    PYTHONPATH=. HF_HUB_OFFLINE=1 .venv/bin/python -m bench.bench_capability --suite metabench --models 600 \
        --folds 5 --sizes 16 32 64 128 --reference ../shared/data/metabench/leaderboard.csv \
        --train-option max_steps=150 --out bench/results/capability_metabench.json

Per fold (the protocol's query folds and held-out models, evaluation.splits): LOCUS trained on the in-training models'
training-query cells (TrainConfig + --train-option), IRT likewise (a short fit, --irt-steps), then
evaluation.capability.capability_evaluation. Prints each key's fold mean and LOCUS minus each baseline's per-model MAE
with a 95% bootstrap interval over the held-out models of all folds (paired: same models, same draws).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import apply_options, load_suite
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.capability import DEFAULT_SIZES, METHODS, capability_evaluation
from locus_model.evaluation.splits import choose_held_out, kfold_splits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="metabench")
    p.add_argument("--models", type=int, default=None, help="a seeded subset of this many models (default all)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="*", default=None)
    p.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    p.add_argument("--encoder", default="hashing-256")
    p.add_argument("--reference", type=Path, default=None, help="CSV: model, one column per reference score")
    p.add_argument("--train-option", action="append", default=[])
    p.add_argument("--irt-steps", type=int, default=300)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()

    import torch

    from locus_model.evaluation.latent import IRT, LatentConfig
    from locus_model.model import LocusConfig
    from locus_model.training import TrainConfig, train_locus

    start = time.perf_counter()
    matrix, source = load_suite(args.suite)
    rows = np.arange(len(matrix.models))
    if args.models and args.models < len(rows):
        rows = np.sort(np.random.default_rng(args.seed).choice(rows, args.models, replace=False))
    scores = matrix.scores[rows].astype(np.float32)
    models = [matrix.models[r] for r in rows]
    enc = np.asarray(encode_queries(matrix.queries, encoder=args.encoder, progress=False), dtype=np.float32)
    reference = None
    if args.reference is not None:
        ref = pd.read_csv(args.reference).set_index("model")
        reference = ref.reindex(models)[[c for c in ref.columns if pd.api.types.is_numeric_dtype(ref[c])]]
    held = choose_held_out(len(models), 0.2, args.seed)
    trained = np.setdiff1d(np.arange(len(models)), held)
    splits = kfold_splits(scores.shape[1], folds=args.folds, budget=min(256, scores.shape[1] // 2), seed=args.seed)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    folds, per_model = [], {}
    for fold in splits:
        if args.only_folds is not None and fold.index not in args.only_folds:
            continue
        t0 = time.perf_counter()
        train_q = fold.train
        tr = np.full_like(scores, np.nan)
        tr[np.ix_(trained, train_q)] = scores[np.ix_(trained, train_q)]
        va = np.full_like(scores, np.nan)
        va[np.ix_(trained, fold.val)] = scores[np.ix_(trained, fold.val)]
        cfg = apply_options(TrainConfig(device="cpu", seed=args.seed + fold.index), args.train_option)
        model = train_locus(enc, tr[trained], va[trained], model_config=LocusConfig(query_dim=enc.shape[1]),
                            train_config=cfg, progress=False).model
        t_locus = time.perf_counter() - t0
        irt = None
        if "irt" in methods:
            irt = IRT(LatentConfig(dim=16, noise=(0.1,), max_steps=args.irt_steps, seed=args.seed))
            irt.fit(enc, tr[trained], va[trained])
        result = capability_evaluation(model, enc, scores, matrix.benchmarks, trained=trained, held=held,
                                       train_queries=train_q, sizes=args.sizes, methods=methods, reference=reference,
                                       irt=irt, seed=args.seed + fold.index)
        for key, errors in result.pop("_per_model").items():
            per_model.setdefault(key, []).append(errors)
        result["seconds"] = {"train_locus": t_locus, "fold": time.perf_counter() - t0}
        folds.append(result)
        print(f"fold {fold.index}: {json.dumps({k: round(v, 3) for k, v in result.items() if isinstance(v, float)})}",
              flush=True)
    keys = [k for k in folds[0] if isinstance(folds[0][k], float)]
    summary = {k: {"mean": float(np.mean([f[k] for f in folds])), "std": float(np.std([f[k] for f in folds]))}
               for k in keys}
    rng = np.random.default_rng(args.seed)
    paired = {}
    for (kind, method, n), errs in per_model.items():
        if method == "locus":
            continue
        mine = per_model.get((kind, "locus", n))
        if mine is None:
            continue
        diff = np.concatenate(mine) - np.concatenate(errs)
        boot = [diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(2000)]
        paired[f"{kind}.locus_minus_{method}.{n}.mae"] = {"diff": float(diff.mean()), "ci_low": float(np.quantile(boot, 0.025)),
                                                          "ci_high": float(np.quantile(boot, 0.975))}
    out = {"settings": {**vars(args), "out": str(args.out), "reference": str(args.reference), "source": source,
                        "models": len(models), "held_out": len(held), "folds_run": len(folds)},
           "summary": summary, "paired": paired, "folds": folds, "wall_s": time.perf_counter() - start}
    args.out.write_text(json.dumps(out, indent=1, default=str))
    for k in keys:
        print(f"{k:<48} {summary[k]['mean']:.3f} ± {summary[k]['std']:.3f}")
    for k, v in paired.items():
        print(f"{k:<48} {v['diff']:+.2f} [{v['ci_low']:+.2f}, {v['ci_high']:+.2f}]")


if __name__ == "__main__":
    main()
