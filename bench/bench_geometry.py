"""Geometry of the model embeddings on real models: distance vs disagreement, and each model's nearest neighbour.

Per fold of `bench_accuracy.py --suite S --budgets B` (the LOCUS trained there, from its --fit-cache; trained now if
absent), every model is embedded from its evaluations on the fold's B anchors (the held-out ones are onboarded
exactly so), and:
- Pearson / Spearman between embedding distance (Euclidean, cosine) and the correctness disagreement rate of each
  model pair on the fold's test queries, which no embedding saw (locus_model.analysis.distance_vs_disagreement);
- nearest-neighbour fallback (share of routing accuracy kept, locus_model.analysis.fallback) and the routing accuracy
  of a --portfolio-k k-center portfolio against the whole pool (portfolio_curve), routing by the fold's LOCUS on the
  test queries;
- each model's nearest neighbour by cosine distance, beside its nearest neighbour by disagreement on the test
  queries (the behavioural truth), with families and variants from data/mmlu-pro/models.csv; and the family
  clustering's purity and adjusted Rand index (locus_model.analysis.family_clustering);
- near-duplicates, two ways: pairs of pool embeddings closer than cosine distance 1e-5 (the paper's criterion), and
  the near_duplicates asset's rule (locus_model.analysis.near_duplicates: --resamples subsets of half of each
  model's anchors, score <= 1.1); for each, how many pairs, how many have identical anchor scores (the same input:
  equal embeddings by construction), and whether they are true relatives: their disagreement on the test queries
  (which no embedding saw) against the pool's median pair, and the share in one organisation;
- coverage-greedy under a parameter budget (--coverage-budget billions, sizes from the suite's models.csv;
  locus_model.analysis.portfolio.coverage_greedy, as the portfolios asset): the models chosen, their total size and
  the routing accuracy among them against the whole pool and the size-blind k-center portfolio.

    .venv/bin/python -m bench.bench_geometry --suite mmlu --budget 1024 --fit-cache bench/.cache/fits

Writes bench/results/geometry_<suite>_b<budget>.json and prints markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.common import CACHE, REPO, RESULTS, fold_locus, protocol_setup
from locus_model.analysis import distance_vs_disagreement, family_clustering, near_duplicates, resample_embeddings
from locus_model.analysis.fallback import fallback
from locus_model.analysis.portfolio import coverage_greedy
from locus_model.analysis.portfolio_curves import portfolio_curve
from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.stats.metrics import routing_accuracy

MODELS_CSV = REPO / "data" / "mmlu-pro" / "models.csv"
SIZES_CSV = {"metabench": REPO.parent / "shared" / "data" / "metabench" / "models.csv"}
COSINE_DUPLICATE = 1e-5  # the paper's near-duplicate distance


def pair_relatives(
    a: np.ndarray,
    b: np.ndarray,
    anchor_scores: np.ndarray,
    test_labels: np.ndarray,
    organisations: list[str],
    median_disagreement: float,
) -> dict:
    """Of model pairs (a[i], b[i]): how many, how many share every anchor score, their mean test disagreement (the
    share of test queries where exactly one is right) against the pool's median pair, and the share in one
    organisation."""
    if len(a) == 0:
        return {"pairs": 0}
    same_anchors = np.all(np.nan_to_num(anchor_scores[a], nan=-1) == np.nan_to_num(anchor_scores[b], nan=-1), axis=1)
    disagree = np.nanmean(np.abs(test_labels[a] - test_labels[b]), axis=1)
    return {
        "pairs": int(len(a)),
        "identical_anchor_scores": int(same_anchors.sum()),
        "test_disagreement_mean": float(disagree.mean()),
        "test_disagreement_median_pair": median_disagreement,
        "test_disagreement_at_most_2pct": float(np.mean(disagree <= 0.02)),
        "same_organisation": float(np.mean([organisations[i] == organisations[j] for i, j in zip(a, b)])),
    }


def nearest(d: np.ndarray) -> np.ndarray:
    """(M,) index of each row's nearest other model in a (M, M) distance matrix."""
    d = d.astype(np.float64).copy()
    np.fill_diagonal(d, np.inf)
    return np.argmin(d, axis=1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="mmlu")
    p.add_argument("--budget", type=int, default=1024)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--only-folds", type=int, nargs="+", default=None)
    p.add_argument("--holdout-models", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits")
    p.add_argument("--tag", default="", help="the --tag of the bench_accuracy.py run whose LOCUS fits to use")
    p.add_argument(
        "--reuse-tags", nargs="+", default=(), metavar="TAG", help="LOCUS fits cached under these tags count too"
    )
    p.add_argument(
        "--train-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="the --train-option values the bench_accuracy.py run used (they are part of the cache key)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--portfolio-k", type=int, default=15, help="size of the k-center portfolio routed among (paper: 15)"
    )
    p.add_argument("--resamples", type=int, default=8, help="near-duplicates: resampled anchor subsets per model")
    p.add_argument(
        "--coverage-budget",
        type=float,
        default=100.0,
        help="coverage-greedy: total parameter budget in billions (sizes from the suite's models.csv)",
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    setup = protocol_setup(
        args.suite,
        budget=args.budget,
        folds=args.folds,
        seed=args.seed,
        holdout_models=args.holdout_models,
        train_options=args.train_option,
    )
    names = setup.matrix.models
    info = pd.read_csv(MODELS_CSV).set_index("model").reindex(names) if args.suite == "mmlu" else None
    families = info["family"].fillna("").tolist() if info is not None else None
    variants = info["variant"].fillna("").tolist() if info is not None else [""] * len(names)
    organisations = [name.split("/")[0] for name in names]
    if args.suite == "metabench":  # the Hugging Face organisation as the family label (2,001 models, ~500 orgs)
        families = organisations
    sizes = None
    if args.suite in SIZES_CSV and SIZES_CSV[args.suite].is_file():
        sizes = pd.read_csv(SIZES_CSV[args.suite]).set_index("model")["params_b"].reindex(names).to_numpy(np.float64)
    folds = [f for f in setup.splits if args.only_folds is None or f.index in args.only_folds]
    per_fold = []
    for fold in folds:
        model = fold_locus(setup, fold, args.fit_cache, args.tag, tuple(args.reuse_tags)).model
        z = embed_evaluation_sets(
            model, setup.encodings, setup.anchor_sets(fold)
        )  # (M, d): trained and held-out models alike
        labels = setup.scores[:, fold.test]
        dd = distance_vs_disagreement(z, labels, names)
        square = np.zeros((len(names), len(names)))
        square[dd.pair_a, dd.pair_b] = square[dd.pair_b, dd.pair_a] = dd.cosine
        truth = np.zeros_like(square)
        truth[dd.pair_a, dd.pair_b] = truth[dd.pair_b, dd.pair_a] = dd.disagreement
        clust = family_clustering(z, names, families)
        probs = predict_proba(model, z, setup.encodings[fold.test])  # (M, Qte): routing among the whole pool
        fb = fallback(z, probs, labels, names=names)
        port = portfolio_curve(z, probs, labels, names=names, method="k_center", ks=[args.portfolio_k])
        anchor_scores = setup.scores[:, fold.anchors]
        median_pair = float(np.median(dd.disagreement))
        close = dd.cosine < COSINE_DUPLICATE  # the pairs' cosine distances, already computed
        ca, cb = dd.pair_a[close], dd.pair_b[close]
        resampled = resample_embeddings(
            None,
            setup.anchor_sets(fold),
            args.resamples,
            0.5,
            args.seed,
            embed_many=lambda subsets: embed_evaluation_sets(model, setup.encodings, subsets),
        )
        nd = near_duplicates(resampled, names)
        flagged = nd.duplicates
        index = {n: i for i, n in enumerate(names)}
        fa = np.array([index[n] for n in flagged["model_a"]], dtype=np.int64)
        fb_ = np.array([index[n] for n in flagged["model_b"]], dtype=np.int64)
        duplicates = {
            "cosine_below_1e-5": pair_relatives(ca, cb, anchor_scores, labels, organisations, median_pair),
            "resampling_rule": pair_relatives(fa, fb_, anchor_scores, labels, organisations, median_pair),
            "examples": [f"{names[i]} ~ {names[j]}" for i, j in list(zip(ca, cb))[:5]],
        }
        cover = {}
        if sizes is not None:
            chosen = coverage_greedy(z, sizes, args.coverage_budget)
            cover = {
                "budget_b": args.coverage_budget,
                "models": [names[i] for i in chosen],
                "total_params_b": float(np.nansum(sizes[chosen])),
                "accuracy": float(routing_accuracy(probs[chosen], labels[chosen])),
                "k_center_total_params_b": float(np.nansum(sizes[[index[n] for n in port.portfolios[0]]])),
            }
        per_fold.append(
            {
                "duplicates": duplicates,
                "coverage_greedy": cover,
                "fold": fold.index,
                "euclidean": vars(dd.euclidean_corr),
                "cosine": vars(dd.cosine_corr),
                "nn_embedding": [names[j] for j in nearest(square)],
                "nn_disagreement": [names[j] for j in nearest(truth)],
                "purity": clust.purity,
                "adjusted_rand": clust.adjusted_rand,
                "fallback_share_kept": fb.share_kept,
                "fallback_random_share_kept": fb.random_share_kept,
                "router_accuracy": fb.router_accuracy,
                "fallback_accuracy": fb.fallback_accuracy,
                "k_center_accuracy": float(port.accuracy[0]),
                "k_center_random_accuracy": float(port.random_accuracy[0]),
                "full_pool_accuracy": port.full_accuracy,
                "k_center_models": list(port.portfolios[0]),
            }
        )
        print(
            f"fold {fold.index + 1}: Pearson {dd.euclidean_corr.pearson:.3f} (Euclidean) / "
            f"{dd.cosine_corr.pearson:.3f} (cosine)",
            file=sys.stderr,
            flush=True,
        )

    def ms(values: list[float]) -> str:
        v = np.array(values, np.float64)
        return f"{v.mean():.3f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.3f}"

    held = set(names[i] for i in setup.held)
    first = per_fold[0]
    rows = []
    for i, name in enumerate(names):
        nn = first["nn_embedding"][i]
        fam = families[i] if families else ""
        nn_fam = families[names.index(nn)] if families else ""
        rows.append(
            {
                "model": name + (" (held out)" if name in held else ""),
                "family / variant": f"{fam} / {variants[i]}",
                "nearest (embedding, cosine)": nn,
                "same family": "yes" if fam and fam == nn_fam else "no",
                "nearest (disagreement)": first["nn_disagreement"][i],
                "embedding NN = disagreement NN, "
                "folds": f"{sum(f['nn_embedding'][i] == f['nn_disagreement'][i] for f in per_fold)}/{len(per_fold)}",
                "same NN as fold 1st, folds": f"{sum(f['nn_embedding'][i] == nn for f in per_fold)}/{len(per_fold)}",
            }
        )
    table = pd.DataFrame(rows)
    summary = {
        "pearson_euclidean": ms([f["euclidean"]["pearson"] for f in per_fold]),
        "spearman_euclidean": ms([f["euclidean"]["spearman"] for f in per_fold]),
        "pearson_cosine": ms([f["cosine"]["pearson"] for f in per_fold]),
        "spearman_cosine": ms([f["cosine"]["spearman"] for f in per_fold]),
        "family_purity": ms([f["purity"] for f in per_fold]),
        "family_adjusted_rand": ms([f["adjusted_rand"] for f in per_fold]),
        "fallback_share_kept": ms([f["fallback_share_kept"] for f in per_fold]),
        "fallback_random_share_kept": ms([f["fallback_random_share_kept"] for f in per_fold]),
        "k_center_accuracy": ms([f["k_center_accuracy"] for f in per_fold]),
        "k_center_random_accuracy": ms([f["k_center_random_accuracy"] for f in per_fold]),
        "full_pool_accuracy": ms([f["full_pool_accuracy"] for f in per_fold]),
        "nn_same_family_fold_first": f"{(table['same family'] == 'yes').sum()}/{len(table)}",
        "cosine_duplicate_pairs": ms([f["duplicates"]["cosine_below_1e-5"]["pairs"] for f in per_fold]),
        "resampling_duplicate_pairs": ms([f["duplicates"]["resampling_rule"]["pairs"] for f in per_fold]),
        **(
            {
                "coverage_greedy_accuracy": ms([f["coverage_greedy"]["accuracy"] for f in per_fold]),
                "coverage_greedy_models": ms([len(f["coverage_greedy"]["models"]) for f in per_fold]),
            }
            if sizes is not None
            else {}
        ),
        "nn_equals_disagreement_nn": ms(
            [np.mean([a == b for a, b in zip(f["nn_embedding"], f["nn_disagreement"])]) for f in per_fold]
        ),
    }
    out = args.out_dir / f"geometry_{args.suite}_b{args.budget}.json"
    out.write_text(
        json.dumps(
            {
                "settings": {
                    **vars(args),
                    "fit_cache": str(args.fit_cache),
                    "out_dir": str(args.out_dir),
                    "folds_run": [f.index for f in folds],
                    "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                },
                "summary": summary,
                "per_fold": per_fold,
                "nearest_table": rows,
            },
            indent=1,
        )
    )
    print(
        f"Over folds {[f.index for f in folds]} (mean ± std): "
        + "; ".join(f"{k} {v}" for k, v in summary.items())
        + "\n"
    )
    print(
        table.head(40).to_markdown(index=False)
        + (f"\n({len(table) - 40} more rows in the JSON)" if len(table) > 40 else "")
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
