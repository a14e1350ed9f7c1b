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
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from bench.common import apply_options, load_suite
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.capability import DEFAULT_SIZES, METHODS, capability_folds, read_reference_scores
from locus_model.evaluation.splits import choose_held_out, kfold_splits


def cached_train(cache: Path, args):
    """train_locus with each fold's trained router kept in `cache` (keyed by suite, models, encoder, options, seed)."""
    from locus_model.router import Router
    from locus_model.training import train_locus

    key = hashlib.sha1(
        json.dumps([args.suite, args.models, args.encoder, args.train_option, args.seed, args.folds]).encode()
    ).hexdigest()[:12]

    def train(fold, kwargs):
        path = cache / f"capability_{key}_f{fold.index}.pt"
        if path.is_file():
            return Router.load(path)[0]
        router = train_locus(**kwargs).router
        cache.mkdir(parents=True, exist_ok=True)
        router.save(path, fold=fold.index)
        return router

    return train


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
    p.add_argument("--off-pool", default=None, help="the product's EstimatorConfig.off_pool (pool, ability, router)")
    p.add_argument("--robust", type=float, default=None, help="the product's EstimatorConfig.robust (default its own)")
    p.add_argument(
        "--local-share",
        type=float,
        default=None,
        help="the product's EstimatorConfig.local_share (the prior's error measured where the model falls; "
        "default its own; 0: one width for the pool)",
    )
    p.add_argument("--fit-cache", type=Path, default=None, help="keep each fold's trained router here and reuse it")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()

    from locus_model.estimates import EstimatorConfig
    from locus_model.model import LocusConfig
    from locus_model.training import TrainConfig

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
        reference = read_reference_scores(args.reference, models)
    held = choose_held_out(len(models), 0.2, args.seed)
    trained = np.setdiff1d(np.arange(len(models)), held)
    splits = kfold_splits(scores.shape[1], folds=args.folds, budget=min(256, scores.shape[1] // 2), seed=args.seed)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    splits = [f for f in splits if args.only_folds is None or f.index in args.only_folds]
    run = capability_folds(
        enc,
        scores,
        matrix.benchmarks,
        splits,
        trained=trained,
        held=held,
        model_config=LocusConfig(query_dim=enc.shape[1]),
        train_config=apply_options(TrainConfig(device="cpu", seed=args.seed), args.train_option),
        sizes=args.sizes,
        methods=methods,
        reference=reference,
        irt_steps=args.irt_steps,
        seed=args.seed,
        log=lambda message: print(message, flush=True),
        trainer=None if args.fit_cache is None else cached_train(args.fit_cache, args),
        estimator_config=EstimatorConfig(
            **{
                **({} if args.local_share is None else {"local_share": args.local_share or None}),
                **({} if args.robust is None else {"robust": args.robust}),
                **({} if args.off_pool is None else {"off_pool": args.off_pool}),
            }
        ),
    )
    summary, paired = run["summary"], run["paired"]
    out = {
        "settings": {
            **vars(args),
            "out": str(args.out),
            "reference": str(args.reference),
            "source": source,
            "models": len(models),
            "held_out": len(held),
            "folds_run": len(splits),
        },
        "summary": summary,
        "paired": paired,
        "folds": run["folds"],
        "wall_s": time.perf_counter() - start,
    }
    args.out.write_text(json.dumps(out, indent=1, default=str))
    for k in summary:
        print(f"{k:<48} {summary[k]['mean']:.3f} ± {summary[k]['std']:.3f}")
    for k, v in paired.items():
        print(f"{k:<48} {v['diff']:+.2f} [{v['ci_low']:+.2f}, {v['ci_high']:+.2f}]")


if __name__ == "__main__":
    main()
