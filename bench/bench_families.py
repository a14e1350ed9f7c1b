"""Families, measured honestly (issue 56, item 7): do LOCUS's model embeddings of metabench's 2,001 real models
cluster by architecture, and do math and code fine-tunes separate, as the paper says?

One fold of `bench_accuracy.py --suite metabench --budgets B` (its LOCUS from --fit-cache; trained now if absent,
with the --train-option values given, which are part of the cache key); every model embedded from its evaluations
on the fold's B anchors (held-out models onboarded exactly so). Against `arch` of ../shared/data/metabench/
leaderboard.csv (the architecture class the leaderboard read from the model's config; models without one left out
of the scores):

- the library's family clustering (locus_model.analysis.family_clustering, as the family_clusters asset calls it:
  average linkage, cosine distance, the tree of the labelled models cut at their number of groups): adjusted Rand
  and purity at k = the number of arch classes (the asset's cut rule with arch as the family; the asset itself
  shows no cut on metabench, whose models file has no family), and at k = 5 on the models of the five largest
  classes;
- the same for two baselines: the raw 0/1 item-score vectors on the same anchors, and on all 1,075 items; and a
  floor: the embedding's clusters scored against the arch labels shuffled (mean of 20 shuffles);
- math and code fine-tunes, tagged by the model's name after its organisation (MATH, CODE below): the share of
  each tagged model's 5 nearest models (cosine) with the same tag, against the tag's share of the pool (what a
  random neighbour gives), and the tagged models' mean silhouette (cosine; labels math / code / other), in the
  embedding and in the raw scores.

    nice -n 5 .venv/bin/python -m bench.bench_families --budget 256 --fit-cache bench/.cache/fits

Prints a markdown table (bench/README.md, "Families"); writes bench/results/families_metabench_b<B>.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import silhouette_samples

from bench.common import CACHE, REPO, RESULTS, fold_locus, protocol_setup
from locus_model.analysis import family_clustering
from locus_model.infer import embed_evaluation_sets
from locus_model.neighbours import nearest_neighbours

LEADERBOARD = REPO.parent / "shared" / "data" / "metabench" / "leaderboard.csv"
MATH = re.compile(r"math|gsm|metamath|wizardmath", re.I)
CODE = re.compile(r"code|coder|starcoder", re.I)
SHUFFLES = 20
NEIGHBOURS = 5


def tag(name: str) -> str:
    """math, code or other, from the model's name after its organisation ("org/DeepSeek-Coder-6.7b" -> code)."""
    short = name.split("/", 1)[-1]
    return "math" if MATH.search(short) else "code" if CODE.search(short) else "other"


def clustering_scores(view: np.ndarray, names: list[str], arch: list[str], top: set[str], seed: int) -> dict:
    """Adjusted Rand and purity of the view's tree against arch (k = its classes), on the five largest classes
    (k = 5), and against shuffled labels (the floor)."""
    full = family_clustering(view, names, arch)
    keep = np.array([a in top for a in arch])
    five = family_clustering(view[keep], [n for n, k in zip(names, keep) if k], [a for a, k in zip(arch, keep) if k])
    rng = np.random.default_rng(seed)
    known = np.array([a != "" for a in arch])
    floor = []
    for _ in range(SHUFFLES):
        shuffled = np.array(arch, dtype=object)
        shuffled[known] = rng.permutation(shuffled[known])
        floor.append(family_clustering(view, names, shuffled.tolist()))
    return {
        "k": full.n_families,
        "adjusted_rand": full.adjusted_rand,
        "purity": full.purity,
        "top5_adjusted_rand": five.adjusted_rand,
        "top5_purity": five.purity,
        "floor_adjusted_rand": float(np.mean([f.adjusted_rand for f in floor])),
        "floor_purity": float(np.mean([f.purity for f in floor])),
    }


def tag_scores(view: np.ndarray, tags: np.ndarray) -> dict:
    """Per tag (math, code): the share of its models' NEIGHBOURS nearest (cosine) with the same tag, the tag's
    share of the pool (a random neighbour's), and the tagged models' mean silhouette."""
    nn, _ = nearest_neighbours(view, NEIGHBOURS, metric="cosine")
    sil = silhouette_samples(view, tags, metric="cosine")
    out = {}
    for t in ("math", "code"):
        mine = tags == t
        out[t] = {
            "models": int(mine.sum()),
            "nn_same_tag": float(np.mean(tags[nn[mine]] == t)),
            "base_rate": float((mine.sum() - 1) / (len(tags) - 1)),
            "silhouette": float(sil[mine].mean()),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--encoder", default="all-MiniLM-L6-v2", help="query encoder (e.g. hashing-384 where none is installed)"
    )
    p.add_argument("--fit-cache", type=Path, default=CACHE / "fits")
    p.add_argument(
        "--train-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="TrainConfig overrides (part of the cache key), e.g. a reduced max_steps=300",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    setup = protocol_setup(
        "metabench", budget=args.budget, seed=args.seed, encoder=args.encoder, train_options=args.train_option
    )
    fold = setup.splits[args.fold]
    model = fold_locus(setup, fold, args.fit_cache).model
    names = [str(n) for n in setup.matrix.models]
    z = embed_evaluation_sets(model, setup.encodings, setup.anchor_sets(fold))  # (M, d)
    board = pd.read_csv(LEADERBOARD).set_index("model")["arch"].reindex(names)
    arch = board.fillna("").astype(str).tolist()
    top = set(pd.Series([a for a in arch if a]).value_counts().index[:5])
    views = {
        "LOCUS embedding": z,
        f"raw scores, {args.budget} anchors": setup.scores[:, fold.anchors],
        "raw scores, all items": setup.scores,
    }
    tags = np.array([tag(n) for n in names])
    results = {
        v: {
            **clustering_scores(np.nan_to_num(x.astype(np.float64)), names, arch, top, args.seed),
            "tags": tag_scores(np.nan_to_num(x.astype(np.float64)), tags),
        }
        for v, x in views.items()
    }
    print(
        f"| view | ARI / purity, k = {results['LOCUS embedding']['k']} arch classes | shuffled-arch floor | "
        "ARI / purity, 5 largest classes | math: 5-NN same tag / silhouette | code: 5-NN same tag / silhouette |"
    )
    print("|---|---|---|---|---|---|")
    for v, r in results.items():
        m, c = r["tags"]["math"], r["tags"]["code"]
        print(
            f"| {v} | {r['adjusted_rand']:.3f} / {r['purity']:.3f} | {r['floor_adjusted_rand']:.3f} / "
            f"{r['floor_purity']:.3f} | {r['top5_adjusted_rand']:.3f} / {r['top5_purity']:.3f} | "
            f"{m['nn_same_tag']:.3f} / {m['silhouette']:+.3f} | {c['nn_same_tag']:.3f} / {c['silhouette']:+.3f} |"
        )
    m, c = results["LOCUS embedding"]["tags"]["math"], results["LOCUS embedding"]["tags"]["code"]
    print(
        f"\n{sum(a != '' for a in arch)} of {len(names)} models with an arch; math {m['models']} models (random "
        f"neighbour {m['base_rate']:.3f}), code {c['models']} (random {c['base_rate']:.3f}); fold {args.fold}, "
        f"budget {args.budget}, train options {args.train_option or 'defaults'}"
    )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"families_metabench_b{args.budget}.json"
    settings = {
        k: str(v.relative_to(REPO)) if isinstance(v, Path) and v.is_relative_to(REPO) else str(v)
        for k, v in vars(args).items()
    }
    out.write_text(json.dumps({"settings": settings, "results": results}, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
