"""The analyses on pools too large to list or draw model by model: same answers as the direct formulas, bounded
reports and figures (bench/bench_pool_analyses.py times them at 2,001 and 10,000 models)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from locus_model.analysis import (
    coverage,
    coverage_greedy,
    coverage_similarity,
    distance_vs_disagreement,
    family_clustering,
    k_medoids,
    near_duplicates,
    portfolio_curve,
    resample_embeddings,
)
from locus_model.analysis._common import pairwise_distances
from locus_model.analysis.clustering import DENDROGRAM_MAX_LEAVES, LISTED_CLUSTERS
from locus_model.neighbours import paired_distances


def _pool(m: int, seed: int = 0, d: int = 4, families: int = 6):
    rng = np.random.default_rng(seed)
    fam = rng.integers(0, families, size=m)
    z = 5.0 * rng.normal(size=(families, d))[fam] + rng.normal(size=(m, d))
    return z, [f"m{i}" for i in range(m)], [f"f{f}" for f in fam], rng


def test_disagreement_of_fractional_scores_matches_the_pairwise_formula():
    z, names, _, rng = _pool(30)
    y = rng.random((30, 12)).round(2)  # scores in [0, 1], not 0/1: the blockwise path
    y[rng.random(y.shape) < 0.2] = np.nan
    r = distance_vs_disagreement(z, y, names)
    for a, b, dis in zip(r.pair_a, r.pair_b, r.disagreement):
        both = ~np.isnan(y[a]) & ~np.isnan(y[b])
        assert dis == pytest.approx(np.abs(y[a, both] - y[b, both]).mean())


def test_distance_plot_draws_a_sample_of_many_pairs(tmp_path):
    z, names, _, rng = _pool(120)
    r = distance_vs_disagreement(z, (rng.random((120, 20)) < 0.5).astype(float), names)
    assert len(r.pair_a) == 120 * 119 // 2
    assert r.plot(tmp_path / "dvd.png", max_points=500).read_bytes()[:4] == b"\x89PNG"


def test_family_clustering_of_a_large_pool_draws_the_top_branches_and_lists_clusters(tmp_path):
    m = 3 * DENDROGRAM_MAX_LEAVES
    z, names, fams, _ = _pool(m)
    r = family_clustering(z, names, fams)
    width = Image.open(r.plot(tmp_path / "tree.png")).size[0]
    small = family_clustering(*_pool(DENDROGRAM_MAX_LEAVES)[:3])
    assert width == Image.open(small.plot(tmp_path / "small.png")).size[0]  # capped at DENDROGRAM_MAX_LEAVES leaves
    md = r.to_markdown()
    assert "adjusted Rand" in md and "| cluster | models |" in md
    assert md.count("\n|") <= LISTED_CLUSTERS + 2  # the largest clusters, not one row per model
    clusters = r.cluster_table()
    assert clusters["models"].sum() == m and clusters["models"].is_monotonic_decreasing
    assert len(r.table()) == m  # every model's cluster is still in the table


def test_k_medoids_curve_shares_one_build_and_matches_each_k():
    z, names, _, rng = _pool(40, d=2)
    z = np.round(z)  # many ties between candidate exchanges
    probs, labels = rng.random((40, 15)), (rng.random((40, 15)) < 0.5).astype(float)
    curve = portfolio_curve(z, probs, labels, names=names, method="k_medoids", ks=range(1, 41), n_random=0)
    assert [list(p) for p in curve.portfolios] == [[names[i] for i in k_medoids(z, k)] for k in range(1, 41)]


def test_near_duplicates_keeps_the_lowest_pairs_and_counts_all():
    rng = np.random.default_rng(3)
    e = rng.normal(size=(4, 30, 3))
    e[:, 1] = e[:, 0] + 0.01 * rng.normal(size=(4, 3))
    full = near_duplicates(e, max_pairs=None)
    cut = near_duplicates(e, max_pairs=25)
    assert len(full.pairs) == full.n_pairs == cut.n_pairs == 30 * 29 // 2 and len(cut.pairs) == 25
    assert cut.pairs.equals(full.pairs.head(25))
    assert cut.n_flagged == int(full.pairs["near_duplicate"].sum())
    assert cut.histogram[0].sum() == np.isfinite(full.pairs["score"]).sum()
    assert "The 25 lowest-scored of 435 pairs are kept" in cut.to_markdown()


def test_resample_embeddings_batched_is_the_same_as_one_by_one():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(20, 3))
    sets = [(np.arange(i, 20), rng.random(20 - i)) for i in range(5)]

    def one(idx, scores):
        return scores @ w[idx]

    a = resample_embeddings(one, sets, 3, 0.5, seed=7)
    b = resample_embeddings(None, sets, 3, 0.5, seed=7, embed_many=lambda subsets: np.stack([one(*s) for s in subsets]))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_paired_distances_are_the_diagonal_of_pairwise(metric):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(9, 5)), rng.normal(size=(9, 5))
    a[2] = 0.0
    np.testing.assert_allclose(
        paired_distances(a, b, metric=metric), np.diag(pairwise_distances(a, b, metric=metric)), atol=1e-12
    )


def test_lazy_coverage_greedy_picks_what_recomputing_every_gain_picks():
    z, _, _, rng = _pool(60, d=3)
    p = np.exp(rng.uniform(-2, 4, size=60))
    p[:5] = np.nan
    s = coverage_similarity(z)
    for budget in (1.0, 20.0, 200.0, float(np.nansum(p))):
        chosen, cover, spent = [], np.zeros(60), 0.0  # the plain greedy: every gain recomputed each step
        while True:
            gain = np.maximum(s, cover[None, :]).mean(axis=1) - cover.mean()
            ok = ~np.isnan(p) & (spent + np.nan_to_num(p, nan=np.inf) <= budget + 1e-9)
            ok[chosen] = False
            ratio = np.where(ok & (gain > 1e-12), gain / np.where(ok, p, 1.0), -np.inf)
            if not np.isfinite(ratio).any():
                break
            chosen.append(int(np.argmax(ratio)))
            spent += p[chosen[-1]]
            cover = np.maximum(cover, s[chosen[-1]])
        single = int(np.argmax(np.where(~np.isnan(p) & (p <= budget), s.mean(axis=1), -np.inf)))
        expected = [single] if coverage(s, [single]) > coverage(s, chosen) + 1e-12 else chosen
        assert coverage_greedy(z, p, budget) == expected
