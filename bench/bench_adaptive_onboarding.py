"""Adaptive onboarding on MMLU-Pro: a held-out model embedded from n asked questions, the questions chosen
adaptively (bench/adaptive.py, a trial: information gain under the posterior over pool models), by a fixed anchor set
(the same gain under uniform weights, ranked once) or at random.

LOCUS is trained once on the models bench_accuracy.py keeps for training (choose_held_out, 20%, seed 0: 23 of the
29 trained, 6 held out), on the candidate questions' train cells (10% of them for validation). The questions are
split once (seeded): --test-share of them are the test queries (routing), the rest the candidates one may ask.
For each held-out model h and strategy, questions are asked in batches of --batch (h's recorded answers: the
vendored matrix), up to 128; at n in --sizes:
  embedding error    ||z_n - z_all|| (z_all: h embedded from all its candidate answers), also divided by the
                     median distance between the pool's models (the scale of "near" in the pool)
  routing agreement  share of test queries whose best model by predicted P(correct) among the 23 trained + h is
                     the same with z_n as with z_all;
  local agreement    the same among h and its 5 nearest trained models (by z_all): the pool's routing almost never
                     picks a held-out model (they are not the strongest), so the first agreement is near 100% for all;
  p_mae              mean |P(correct) with z_n - with z_all| of h on the test queries (what every decision reads);
  benchmark_mae      mean over the 14 categories of |mean predicted P(correct) with z_n - h's actual accuracy| on
                     the test queries (the per-category estimate; with z_all it is the floor, reported as n=all).
Random, and "sampled" (a trial kept in this script: each round the adaptive choice among 4 x batch questions drawn
at random), are averaged over --random-seeds orders.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python -m bench.bench_adaptive_onboarding \\
        --max-queries 4000 --train-option max_steps=200 latent_steps=300 finetune_steps=300

Writes bench/results/adaptive_onboarding_mmlu.json and prints a markdown table.

``--capability`` compares instead what ``locus onboard --choice`` offers (locus_model.estimates.questions): each
held-out model asked in rounds of --batch, adaptive (the widest interval's most narrowing questions under the
estimator's posterior, Estimator.next_questions; the first round random) or random (--random-seeds orders); at each n
of --sizes its per-benchmark capability estimates (locus_model.estimates.Estimator fitted once on the training
models' answers; ``--estimate`` is kept for the older result files: only ``pool`` remains) against its accuracy over all
its recorded answers: MAE in points, 90% interval coverage, the widest interval; paired bootstrap intervals over the
held-out models of adaptive minus random at each n and of adaptive at 64 minus random at 128 (the issue's target).
Writes bench/results/adaptive_capability_mmlu.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from bench.adaptive import SelectionConfig, information_gain, next_queries, pool_posterior
from bench.common import REPO, apply_options, load_suite
from locus_model.data.encoding import encode_queries
from locus_model.evaluation.splits import choose_held_out
from locus_model.infer import embed_evaluation_set, embed_evaluation_sets, predict_proba
from locus_model.model import LocusConfig, load_checkpoint, save_checkpoint
from locus_model.training import TrainConfig, train_locus

SIZES = (16, 32, 64, 128)
STRATEGIES = ("adaptive", "sampled", "fixed", "random")


def sampled_queries(P, asked, scores, k, seed: int, share: int = 4) -> np.ndarray:
    """A trial, not the library's: each round, the adaptive choice among ``share * k`` questions drawn at random
    (the set encoder was trained on random evaluation sets; this keeps the asked set close to one)."""
    left = np.setdiff1d(np.arange(P.shape[1]), asked)
    drawn = np.random.default_rng([seed, len(asked)]).choice(left, size=min(len(left), share * k), replace=False)
    gain = information_gain(P[:, drawn], pool_posterior(P, asked, scores))  # the posterior from every answer
    return drawn[np.argsort(-gain, kind="stable")[:k]]


def trained_locus(enc, scores, trained, candidates, train_options, seed, cache: Path):
    """LOCUS trained on the trained models' candidate cells (a seeded 10% of the candidates for validation)."""
    key = hashlib.sha256(
        json.dumps([sorted(train_options), len(candidates), seed, trained.tolist(), int(enc.shape[0])]).encode()
    ).hexdigest()[:12]
    path = cache / f"adaptive_onboarding_{key}.pt"
    if path.is_file():
        return load_checkpoint(path)[0], str(path)
    rng = np.random.default_rng(seed)
    val_q = rng.choice(candidates, size=len(candidates) // 10, replace=False)
    train_q = np.setdiff1d(candidates, val_q)
    train = np.full((len(trained), scores.shape[1]), np.nan, np.float32)  # (T, Q): the trained models only
    val = np.full_like(train, np.nan)
    train[:, train_q] = scores[np.ix_(trained, train_q)]
    val[:, val_q] = scores[np.ix_(trained, val_q)]
    config = apply_options(TrainConfig(device="cpu", seed=seed), list(train_options))
    result = train_locus(
        enc, train, val, model_config=LocusConfig(query_dim=enc.shape[1]), train_config=config, progress=False
    )
    cache.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, result.model)
    return result.model, str(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-queries", type=int, default=0, help="a seeded subset of the questions (0: all 12,032)")
    p.add_argument("--test-share", type=float, default=0.2)
    p.add_argument("--batch", type=int, default=8, help="questions asked per round (the onboarding's concurrency)")
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--random-seeds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-option", nargs="*", default=[], metavar="NAME=VALUE")
    p.add_argument(
        "--estimate",
        choices=("pool", "locus"),
        default="pool",
        help="with --capability: the estimate onboarding shows (pool: empirical Bayes on the training models' "
        "answers, as the onboarding asset) or the refined LOCUS embedding's (the runs before 2026-12-06)",
    )
    p.add_argument("--cache", type=Path, default=REPO / "bench" / ".cache" / "adaptive")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="(default: bench/results/adaptive_onboarding_mmlu.json, with --capability adaptive_capability_mmlu.json)",
    )
    p.add_argument("--capability", action="store_true", help="compare the capability estimates (module docstring)")
    p.add_argument(
        "--choices",
        nargs="+",
        default=["adaptive", "random"],
        help="with --capability: adaptive | stratified (a trial: the widest benchmark's next random question) | random",
    )
    p.add_argument(
        "--with-rows",
        type=Path,
        default=None,
        help="with --capability: also the rows of an earlier run's JSON (same data; e.g. its random ones)",
    )
    p.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        default=None,
        help="report only: the --capability JSONs of several runs (e.g. --seed 0 and 1) pooled, each "
        "held-out model of each run one unit of the paired intervals",
    )
    args = p.parse_args(argv)
    if args.pool:
        rows = [
            {**r, "model": f"{i}:{r['model']}"}
            for i, f in enumerate(args.pool)
            for r in json.loads(f.read_text())["rows"]
        ]
        first = Path(args.pool[0])  # beside the first run's file: x.json -> x_pooled.json
        args.out, args.with_rows = args.out or first.with_name(f"{first.stem}_pooled.json"), None
        return report_capability(rows, args, {"pooled": [str(f) for f in args.pool]}, time.time())
    args.out = args.out or REPO / "bench" / "results" / (
        "adaptive_capability_mmlu.json" if args.capability else "adaptive_onboarding_mmlu.json"
    )
    torch.set_num_threads(1)
    start = time.time()

    matrix, source = load_suite("mmlu")
    rng = np.random.default_rng(args.seed)
    Q = len(matrix.query_ids)
    keep = np.sort(rng.choice(Q, size=args.max_queries, replace=False)) if args.max_queries else np.arange(Q)
    scores = matrix.scores[:, keep].astype(np.float32)
    bench_all = np.asarray(matrix.benchmarks)[keep]
    order = rng.permutation(len(keep))
    test = np.sort(order[: int(len(keep) * args.test_share)])
    candidates = np.sort(order[int(len(keep) * args.test_share) :])
    bench_test = bench_all[test]
    held = choose_held_out(len(matrix.models), 0.2, args.seed)
    trained = np.setdiff1d(np.arange(len(matrix.models)), held)
    print(
        f"{len(keep)} questions ({len(candidates)} candidates, {len(test)} test); {len(trained)} trained, held out: "
        f"{[matrix.models[h] for h in held]}",
        flush=True,
    )
    if args.capability:  # the estimator reads the training models' answers: no LOCUS to train
        rows = capability_rows(bench_all, scores, held, candidates, args, start)
        return report_capability(
            rows,
            args,
            {
                "source": source,
                "questions": int(len(keep)),
                "candidates": int(len(candidates)),
                "held_out": [matrix.models[h] for h in held],
                "estimate": "product (locus_model.estimates.Estimator)",
            },
            start,
        )
    enc = np.asarray(
        encode_queries([matrix.queries[i] for i in keep], encoder="all-MiniLM-L6-v2", runtime="torch"), dtype=np.float32
    )
    model, checkpoint = trained_locus(enc, scores, trained, candidates, args.train_option, args.seed, args.cache)
    print(f"trained in {time.time() - start:.0f} s -> {checkpoint}", flush=True)

    sets = [
        (candidates[~np.isnan(scores[m, candidates])], scores[m, candidates][~np.isnan(scores[m, candidates])])
        for m in trained
    ]
    pool_z = embed_evaluation_sets(model, enc, sets)  # (T, d): the pool, each model from all its candidate answers
    P_cand = predict_proba(model, pool_z, enc[candidates])  # (T, C)
    P_test_pool = predict_proba(model, pool_z, enc[test])  # (T, Qt)
    d = np.linalg.norm(pool_z[:, None] - pool_z[None], axis=-1)
    scale = float(np.median(d[np.triu_indices(len(pool_z), 1)]))

    rows = []
    for h in held:
        y_all = scores[h, candidates]
        answered = ~np.isnan(y_all)
        z_all = embed_evaluation_set(model, enc[candidates[answered]], y_all[answered])
        p_all = predict_proba(model, z_all[None], enc[test])  # (1, Qt)
        best_all = np.vstack([P_test_pool, p_all]).argmax(axis=0)
        near = np.argsort(np.linalg.norm(pool_z - z_all, axis=1))[:5]
        local_all = np.vstack([P_test_pool[near], p_all]).argmax(axis=0)
        seen = ~np.isnan(scores[h, test])
        cats = [np.flatnonzero(seen & (bench_test == b)) for b in np.unique(bench_test)]

        def benchmark_mae(p: np.ndarray) -> float:
            return float(np.mean([abs(p[c].mean() - scores[h, test[c]].mean()) for c in cats if len(c)]))

        rows.append(
            {
                "model": matrix.models[h],
                "strategy": "all",
                "seed": 0,
                "n": int(answered.sum()),
                "embedding_error": 0.0,
                "relative_error": 0.0,
                "routing_agreement": 1.0,
                "local_agreement": 1.0,
                "p_mae": 0.0,
                "benchmark_mae": benchmark_mae(p_all[0]),
            }
        )
        P_h = P_cand[:, answered]  # ask only questions the model has a recorded answer to
        cols = np.flatnonzero(answered)
        runs = [("adaptive", 0), ("fixed", 0)] + [
            (name, s) for name in ("random", "sampled") for s in range(args.random_seeds)
        ]
        for strategy, seed in runs:
            config = SelectionConfig(strategy=strategy if strategy != "sampled" else "adaptive", seed=seed)
            asked = np.empty(0, np.int64)
            while len(asked) < max(args.sizes):
                if strategy == "sampled":
                    new = sampled_queries(P_h, asked, y_all[cols[asked]], args.batch, seed)
                else:
                    new = next_queries(P_h, asked, y_all[cols[asked]], args.batch, config)
                asked = np.concatenate([asked, new])
                n = len(asked)
                if n in args.sizes:
                    q = candidates[cols[asked]]
                    z = embed_evaluation_set(model, enc[q], scores[h, q])
                    p_n = predict_proba(model, z[None], enc[test])
                    best = np.vstack([P_test_pool, p_n]).argmax(axis=0)
                    err = float(np.linalg.norm(z - z_all))
                    rows.append(
                        {
                            "model": matrix.models[h],
                            "strategy": strategy,
                            "seed": seed,
                            "n": n,
                            "embedding_error": err,
                            "relative_error": err / scale,
                            "routing_agreement": float((best == best_all).mean()),
                            "local_agreement": float(
                                (np.vstack([P_test_pool[near], p_n]).argmax(axis=0) == local_all).mean()
                            ),
                            "p_mae": float(np.abs(p_n - p_all).mean()),
                            "benchmark_mae": benchmark_mae(p_n[0]),
                        }
                    )
        print(f"{matrix.models[h]} done ({time.time() - start:.0f} s)", flush=True)

    metrics = ("embedding_error", "relative_error", "routing_agreement", "local_agreement", "p_mae", "benchmark_mae")
    summary = {"all": {k: float(np.mean([r[k] for r in rows if r["strategy"] == "all"])) for k in metrics}}
    for strategy in STRATEGIES:
        for n in args.sizes:
            sel = [r for r in rows if r["strategy"] == strategy and r["n"] == n]
            summary[f"{strategy}@{n}"] = {k: float(np.mean([r[k] for r in sel])) for k in metrics}
    result = {
        "source": source,
        "questions": int(len(keep)),
        "candidates": int(len(candidates)),
        "test": int(len(test)),
        "held_out": [matrix.models[h] for h in held],
        "trained": int(len(trained)),
        "train_options": args.train_option,
        "batch": args.batch,
        "random_seeds": args.random_seeds,
        "pool_median_distance": scale,
        "selection": asdict(SelectionConfig()),
        "checkpoint": checkpoint,
        "seconds": round(time.time() - start, 1),
        "summary": summary,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(
        "relative embedding error / routing agreement % / local agreement % / P(correct) MAE / per-category "
        f"accuracy MAE (points); with all answers the per-category MAE is {summary['all']['benchmark_mae'] * 100:.1f}"
    )
    print("| strategy | " + " | ".join(f"n={n}" for n in args.sizes) + " |")
    print("|---|" + "---|" * len(args.sizes))
    for strategy in STRATEGIES:
        cells = [summary[f"{strategy}@{n}"] for n in args.sizes]
        print(
            f"| {strategy} | "
            + " | ".join(
                f"{c['relative_error']:.3f} / {c['routing_agreement'] * 100:.1f} / {c['local_agreement'] * 100:.1f} / "
                f"{c['p_mae']:.3f} / {c['benchmark_mae'] * 100:.1f}"
                for c in cells
            )
            + " |"
        )
    print(f"-> {args.out} ({result['seconds']} s)")
    return 0


def capability_rows(bench_all, scores, held, candidates, args, start) -> list[dict]:
    """Per held-out model, choice and seed, at each n of args.sizes: its capability estimates' MAE (points),
    coverage and widest interval against its accuracy over all its recorded answers (module docstring)."""
    # why: the --capability mode only
    from locus_model.estimates import Estimator, EstimatorConfig
    from locus_model.estimates.questions import random_order

    if args.estimate != "pool" or "stratified" in args.choices:
        raise SystemExit(
            "--estimate locus and --choices stratified were trials that left the product; their figures "
            "stay in bench/results (adaptive_capability_mmlu_stratified.json)"
        )
    names = np.unique(bench_all.astype(str))
    trained = np.setdiff1d(np.arange(len(scores)), held)
    estimator = Estimator(EstimatorConfig()).fit(scores[trained], bench_all)  # once: every model and round reads it
    rows = []
    for h in held:
        y = scores[h]
        truth = np.array([np.nanmean(y[bench_all == b]) for b in names])
        askable = candidates[~np.isnan(y[candidates])]  # candidates the model has a recorded answer to
        where = {int(q): i for i, q in enumerate(askable)}
        allowed = np.zeros(scores.shape[1], dtype=bool)
        allowed[askable] = True
        runs = [(c, 0) for c in args.choices if c != "random"]
        runs += [("random", s) for s in range(args.random_seeds)] if "random" in args.choices else []
        for choice, seed in runs:
            asked, cap = np.empty(0, np.int64), None
            while len(asked) < max(args.sizes):
                k = min(args.batch, max(args.sizes) - len(asked))
                if choice == "random" or cap is None:
                    new = random_order(len(askable), asked, np.empty(0, np.int64), k, seed=seed)
                else:
                    answered = (askable[asked], y[askable[asked]])  # the evaluation set asked so far
                    picks = estimator.next_questions(answered, cap, allowed, k)
                    new = np.array([where[int(q)] for q in picks], dtype=np.int64)
                asked = np.concatenate([asked, new])
                n = len(asked)
                evaluation = (askable[asked], y[askable[asked]])
                if choice != "random" or n in args.sizes:
                    cap = estimator.estimate([evaluation])
                if n in args.sizes:
                    assert cap is not None  # estimated just above at every size
                    rows.append(
                        {
                            "model": int(h),
                            "choice": choice,
                            "seed": seed,
                            "n": n,
                            "mae": float(np.abs(cap.estimate[0] - truth).mean() * 100),
                            "coverage": float(((cap.lo[0] <= truth) & (truth <= cap.hi[0])).mean()),
                            "widest": float((cap.hi[0] - cap.lo[0]).max() * 100),
                        }
                    )
            print(f"model {h} {choice} seed {seed} done ({time.time() - start:.0f} s)", flush=True)
    return rows


def report_capability(rows: list[dict], args, facts: dict, start: float) -> int:
    """Means per choice and n, the paired intervals over the held-out models, the JSON and a table."""
    from locus_model.stats.bootstrap import paired_bootstrap  # why: the --capability mode only

    if args.with_rows:
        rows = rows + json.loads(args.with_rows.read_text())["rows"]
    choices = [c for c in ("adaptive", "stratified", "random") if any(r["choice"] == c for r in rows)]
    tried = [c for c in choices if c != "random"]

    def per_model(choice: str, n: int, key: str = "mae") -> np.ndarray:  # (H,) random: mean over its seeds
        models = sorted({r["model"] for r in rows})
        return np.array(
            [
                np.mean([r[key] for r in rows if r["model"] == m and r["choice"] == choice and r["n"] == n])
                for m in models
            ]
        )

    summary = {
        f"{c}@{n}": {k: float(per_model(c, n, k).mean()) for k in ("mae", "coverage", "widest")}
        for c in choices
        for n in args.sizes
    }
    paired = {
        f"{c}-random@{n}": paired_bootstrap(per_model(c, n), per_model("random", n)) for c in tried for n in args.sizes
    }
    if 64 in args.sizes and 128 in args.sizes:
        paired.update(
            {f"{c}@64-random@128": paired_bootstrap(per_model(c, 64), per_model("random", 128)) for c in tried}
        )
    result = {
        **facts,
        "batch": args.batch,
        "random_seeds": args.random_seeds,
        "summary": summary,
        "paired": paired,
        "seconds": round(time.time() - start, 1),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print("per-benchmark MAE (points) / 90% coverage / widest interval (points)")
    print("| choice | " + " | ".join(f"n={n}" for n in args.sizes) + " |")
    print("|---|" + "---|" * len(args.sizes))
    for c in choices:
        print(
            f"| {c} | "
            + " | ".join(
                f"{summary[f'{c}@{n}']['mae']:.2f} / {summary[f'{c}@{n}']['coverage']:.2f} / "
                f"{summary[f'{c}@{n}']['widest']:.1f}"
                for n in args.sizes
            )
            + " |"
        )
    for name, d in paired.items():
        print(f"{name}: MAE {d['diff']:+.2f} points [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}] (95%, over models)")
    print(f"-> {args.out} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
