"""Downstream analyses of model embeddings, on tiny hand-checked cases with exact answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.analysis import (
    capability_search,
    coverage,
    coverage_greedy,
    coverage_similarity,
    distance_vs_disagreement,
    fallback,
    family_clustering,
    k_center,
    k_medoids,
    near_duplicates,
    portfolio_curve,
    resample_embeddings,
)
from locus_model.data.catalog import params_for_models, parse_params_b
from locus_model.stats.metrics import routing_accuracy


def _png(path) -> bool:
    return path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- distance vs disagreement


def test_distance_vs_disagreement_exact_on_a_line(tmp_path):
    # model i is right on the first i queries: disagreement(i, j) = |i - j| / 4 = Euclidean distance / 4
    labels = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=float)
    z = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    r = distance_vs_disagreement(z, labels, names=["a", "b", "c", "d"])
    assert r.euclidean_corr.pearson == pytest.approx(1.0)
    assert r.euclidean_corr.spearman == pytest.approx(1.0)
    assert r.euclidean_corr.kendall == pytest.approx(1.0)
    t = r.table()
    assert list(zip(t.model_a, t.model_b)) == [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
    np.testing.assert_allclose(t.disagreement, [0.25, 0.5, 0.75, 0.25, 0.5, 0.25])
    np.testing.assert_allclose(t.euclidean, [1, 2, 3, 1, 2, 1])
    assert "Pearson" in r.to_markdown() and _png(r.plot(tmp_path / "dvd.png"))


def test_distance_vs_disagreement_cosine_ranks_and_nan_labels():
    # model i right on its first c_i of 8 queries, at angle 0.1 c_i on the unit circle: both distances and the
    # disagreement |c_i - c_j| / 8 grow with |c_i - c_j|, all six pairs distinct -> rank correlations 1
    c = np.array([0, 1, 3, 7])
    z = np.stack([np.cos(0.1 * c), np.sin(0.1 * c)], axis=1)
    r = distance_vs_disagreement(z, (np.arange(8)[None, :] < c[:, None]).astype(float))
    for corr in (r.cosine_corr, r.euclidean_corr):
        assert corr.spearman == pytest.approx(1.0) and corr.kendall == pytest.approx(1.0)
    assert r.cosine_corr.pearson < 1.0  # 1 - cos is not linear in the angle
    labels = np.array([[0, 0, 0, 0, np.nan], [1, 0, 0, 0, 1], [1, 1, 0, 0, 1], [1, 1, 1, 0, 1]])
    r = distance_vs_disagreement(z, labels)
    # the NaN query is left out of pairs with model 0 only; the others agree on it
    np.testing.assert_allclose(r.disagreement, [1 / 4, 2 / 4, 3 / 4, 1 / 5, 2 / 5, 1 / 5])
    np.testing.assert_array_equal(r.n_shared, [4, 4, 4, 5, 5, 5])
    assert r.euclidean_corr.pearson == pytest.approx(np.corrcoef(r.euclidean, r.disagreement)[0, 1])


def test_distance_vs_disagreement_rejects_misaligned_labels():
    with pytest.raises(ValueError, match="labels_test has shape"):
        distance_vs_disagreement(np.zeros((4, 2)), np.zeros((3, 5)))


# ----------------------------------------------------------------------------- family clustering


def _blobs(n_per: int = 4, n_fam: int = 3, d: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = 10.0 * np.eye(d)[:n_fam] + 1.0
    z = np.concatenate([c + 0.05 * rng.normal(size=(n_per, d)) for c in centres])
    fams = [f"fam{f}" for f in range(n_fam) for _ in range(n_per)]
    return z, [f"m{i}" for i in range(len(z))], fams


def test_family_clustering_recovers_well_separated_families(tmp_path):
    z, names, fams = _blobs()
    r = family_clustering(z, names, fams)
    assert r.n_families == 3 and r.adjusted_rand == pytest.approx(1.0) and r.purity == pytest.approx(1.0)
    assert r.linkage.shape == (len(names) - 1, 4)
    assert set(r.table().columns) >= {"model", "family", "cluster", "leaf_order"}
    assert "adjusted Rand 1.000" in r.to_markdown()
    assert _png(r.plot(tmp_path / "dendrogram.png"))


def test_family_clustering_ignores_unknown_families_and_checks_linkage():
    z, names, fams = _blobs()
    fams[0] = fams[5] = ""
    r = family_clustering(z, names, fams, method="ward", metric="euclidean")
    assert r.adjusted_rand == pytest.approx(1.0) and r.clusters[0] == -1 and r.clusters[5] == -1
    assert np.isnan(family_clustering(z, names).adjusted_rand)
    with pytest.raises(ValueError, match="ward linkage is only defined for Euclidean"):
        family_clustering(z, names, fams, method="ward", metric="cosine")


# ----------------------------------------------------------------------------- portfolio selection


def test_k_center_on_a_line_starts_at_the_medoid():
    z = np.arange(11, dtype=float)[:, None]  # 0, 1, ..., 10
    # medoid 5; farthest are 0 and 10 (tie -> lower index 0); then 10; then 2 (distance 2, lowest index)
    assert k_center(z, 4) == [5, 0, 10, 2]
    assert k_center(z, 1) == [5]
    with pytest.raises(ValueError, match="k must be between 1 and the pool size 11"):
        k_center(z, 12)


def test_k_medoids_picks_the_centre_of_each_cluster():
    plus = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=float)
    z = np.concatenate([plus, plus + [10.0, 0.0]])
    assert k_medoids(z, 2) == [0, 5]
    assert k_medoids(z, 1) == [1]  # (1, 0) and (9, 0) tie as 1-medoid: lowest index, despite float rounding
    # a bad BUILD start is repaired by SWAP: three clusters, k=3 -> the three centres
    z3 = np.concatenate([plus, plus + [10.0, 0.0], plus + [0.0, 30.0]])
    assert k_medoids(z3, 3) == [0, 5, 10]


def test_coverage_greedy_respects_the_budget():
    # clusters A = {0 (70B), 1 (7B)}, B = {2 (8B), 3 (13B)}, C = {4 (1B)}; bandwidth 1 keeps them apart
    z = np.array([[0, 0], [0, 0.01], [10, 0], [10, 0.01], [0, 10]], dtype=float)
    p = np.array([70, 7, 8, 13, 1], dtype=float)
    # gain per billion: C 1/1, A via model 1 2/7, B via model 2 2/8
    assert coverage_greedy(z, p, 15, bandwidth=1.0) == [4, 1]
    assert coverage_greedy(z, p, 16, bandwidth=1.0) == [4, 1, 2]
    assert coverage_greedy(z, p, 0.5, bandwidth=1.0) == []
    p_unknown = p.copy()
    p_unknown[4] = np.nan  # unknown size: never chosen
    assert 4 not in coverage_greedy(z, p_unknown, 100, bandwidth=1.0)
    s = coverage_similarity(z, bandwidth=1.0)
    assert coverage(s, [4, 1, 2]) == pytest.approx((1 + 2 * np.exp(-0.5 * 0.01**2) * 2) / 5, rel=1e-4)
    with pytest.raises(ValueError, match="never 0"):
        coverage_greedy(z, np.array([0, 7, 8, 13, 1.0]), 15)


def test_coverage_greedy_falls_back_to_the_best_single_model():
    # ten identical 10B models vs one cheap outlier: ratio-greedy takes the outlier and can then afford
    # nothing; the single 10B model covers 10 of 11 models, so it wins
    z = np.concatenate([np.zeros((10, 2)), [[50.0, 0.0]]])
    p = np.array([10.0] * 10 + [0.5])
    assert coverage_greedy(z, p, 10, bandwidth=1.0) == [0]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("meta-llama/Llama-2-7b-chat-hf", 7.0),
        ("Qwen/Qwen1.5-1.8B-Chat", 1.8),
        ("upstage/SOLAR-10.7B-v1.0", 10.7),
        ("facebook/opt-125m", 0.125),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 56.0),
        ("Meta-Llama-3.1-70B", 70.0),
        ("dolly-v2-12b", 12.0),
        ("gpt2-xl", np.nan),
        ("microsoft/phi-2", np.nan),
        ("intfloat/e5-base", np.nan),
    ],
)
def test_parse_params_b(name, expected):
    got = parse_params_b(name)
    assert (np.isnan(got) and np.isnan(expected)) or got == pytest.approx(expected)


def test_params_for_models_prefers_the_models_table():
    table = pd.DataFrame({"model": ["a-7b", "phi-2"], "params_b": [np.nan, 2.7], "family": ["", ""]})
    np.testing.assert_allclose(params_for_models(["a-7b", "phi-2", "x"], table), [7.0, 2.7, np.nan])


def _routing_problem(m: int = 6, q: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(m, 3))
    labels = (rng.random((m, q)) < 0.5).astype(float)
    probs = np.clip(0.7 * labels + 0.3 * rng.random((m, q)), 0, 1)
    return z, probs, labels


def test_portfolio_curve_reaches_the_full_pool(tmp_path):
    z, probs, labels = _routing_problem()
    names = [f"m{i}-7b" for i in range(6)]
    c = portfolio_curve(z, probs, labels, names=names, method="k_center", n_random=3)
    assert c.full_accuracy == pytest.approx(routing_accuracy(probs, labels))
    assert list(c.xs) == [1, 2, 3, 4, 5, 6] and c.accuracy[-1] == pytest.approx(c.full_accuracy)
    first = int(np.argmax(c.accuracy >= c.full_accuracy - c.tolerance))
    assert c.smallest_matching == c.xs[first]
    order = k_center(z, 6)
    assert c.portfolios[2] == tuple(names[i] for i in order[:3])
    assert c.accuracy[2] == pytest.approx(routing_accuracy(probs[order[:3]], labels[order[:3]]))
    np.testing.assert_allclose(c.params_b, 7.0 * c.xs)
    assert len(c.table()) == 6 and "k_center" in c.to_markdown() and _png(c.plot(tmp_path / "curve.png"))

    med = portfolio_curve(z, probs, labels, method="k_medoids", ks=[2, 6], n_random=0)
    assert med.portfolios[0] == tuple(f"model_{i}" for i in k_medoids(z, 2))

    cov = portfolio_curve(z, probs, labels, method="coverage_greedy", budgets_b=[7, 21, 1000], params_b=np.full(6, 7.0))
    assert [len(p) for p in cov.portfolios][:2] == [1, 3] and cov.accuracy[-1] == pytest.approx(cov.full_accuracy)
    with pytest.raises(ValueError, match="needs budgets_b and params_b"):
        portfolio_curve(z, probs, labels, method="coverage_greedy")


# ----------------------------------------------------------------------------- fallback


def test_fallback_on_a_hand_checked_case(tmp_path):
    z = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 0.0]])  # nearest: 0 <-> 1, 2 -> 1
    n = np.nan
    probs = np.array([[0.9, 0.5, 0.1, 0.6, 0.9], [0.5, 0.2, 0.8, 0.5, 0.9], [0.1, 0.9, 0.7, 0.3, 0.9]])
    labels = np.array([[1, 0, 1, 0, 1], [0, 1, 1, n, n], [1, 1, 0, 0, n]])
    # q0: route 0, substitute 1 (label 0), second choice 1 (0); q1: route 2, substitute 1 (1), second 0 (0)
    # q2: route 1, substitute 0 (1), second 2 (0); q3: route 0, 1 unlabelled -> substitute 2 (0), second 2 (0)
    # q4: only model 0 is labelled -> no substitute, left out
    r = fallback(z, probs, labels, seed=0, n_random=2000, names=["a", "b", "c"])
    assert r.n_queries == 4
    assert r.router_accuracy == pytest.approx(3 / 4)
    assert r.router_accuracy == pytest.approx(routing_accuracy(probs[:, :4], labels[:, :4]))
    assert r.fallback_accuracy == pytest.approx(2 / 4) and r.share_kept == pytest.approx(2 / 3)
    assert r.second_choice_accuracy == pytest.approx(0.0)
    assert r.random_accuracy == pytest.approx((0.5 + 0.5 + 0.5 + 0.0) / 4, abs=0.02)  # expectation 0.375
    pm = r.per_model.set_index("model")
    assert pm.loc["a", "n_routed"] == 2 and pm.loc["a", "nearest_neighbour"] == "b"
    assert pm.loc["c", "nearest_neighbour"] == "b" and pm.loc["c", "accuracy_fallback"] == 1.0
    assert "66.7%" in r.to_markdown() and _png(r.plot(tmp_path / "fallback.png"))
    assert fallback(z, probs, labels, seed=3).random_accuracy == fallback(z, probs, labels, seed=3).random_accuracy


# ----------------------------------------------------------------------------- near-duplicates


def _profile_embed_fn(benchmark_of: np.ndarray, n_bench: int, noise: np.ndarray):
    """Stand-in embedder: per-benchmark (2 acc - 1) plus a small query-specific term."""

    def embed(idx: np.ndarray, scores: np.ndarray) -> np.ndarray:
        signed = 2.0 * scores - 1.0
        onehot = np.eye(n_bench)[benchmark_of[idx]]  # (n, B)
        per_bench = (onehot * signed[:, None]).sum(0) / np.maximum(onehot.sum(0), 1)
        return np.concatenate([per_bench, (noise[idx] * signed[:, None]).mean(0)])

    return embed


def test_near_duplicates_finds_the_copy_not_the_distinct_model(tmp_path):
    rng = np.random.default_rng(0)
    q, n_bench = 200, 4
    bench = np.arange(q) % n_bench
    embed = _profile_embed_fn(bench, n_bench, 0.3 * rng.normal(size=(q, 3)))
    a = (rng.random(q) < 0.8).astype(float)
    c = (rng.random(q) < 0.3).astype(float)
    sets = [(np.arange(q), a), (np.arange(q), a.copy()), (np.arange(q), c)]
    res = resample_embeddings(embed, sets, R=16, frac=0.5, seed=1)
    assert res.shape == (16, 3, 7)
    r = near_duplicates(res, ["a", "a-copy", "c"])
    top = r.pairs.iloc[0]
    assert (top.model_a, top.model_b) == ("a", "a-copy") and top.near_duplicate and top.score < 1.1
    assert not r.pairs.iloc[1:].near_duplicate.any() and (r.pairs.iloc[1:].score > 3).all()
    assert len(r.duplicates) == 1 and "1 pair(s)" in r.to_markdown() and _png(r.plot(tmp_path / "dup.png"))


def test_near_duplicates_with_deterministic_embeddings():
    z = np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    r = near_duplicates(np.stack([z, z]), metric="cosine")  # no resampling spread at all
    np.testing.assert_array_equal(r.pairs.score, [0.0, np.inf, np.inf])
    assert r.pairs.near_duplicate.tolist() == [True, False, False]


# ----------------------------------------------------------------------------- capability search


def test_capability_search_ranks_by_the_distance_to_the_named_benchmarks_of_the_target():
    # embeddings put m0 next to the synthetic set, but m1's actual accuracy on the named benchmarks is closer;
    # m2 matches best on "law", which the target does not name; m3 has no "math" accuracy at all
    bench = np.array(["math"] * 4 + ["law"] * 4)
    names = ["m0", "m1", "m2", "m3"]
    pool = np.array([[0.0], [1.0], [2.0], [0.5]])
    acc = pd.DataFrame({"math": [0.5, 0.85, 0.2, np.nan], "law": [0.3, 0.3, 0.9, 0.3]}, index=names)
    r = capability_search(
        {"math": 0.9},
        benchmarks=bench,
        embed_fn=lambda idx, y: np.zeros(1),
        pool_embeddings=pool,
        pool_names=names,
        pool_per_benchmark_acc=acc,
        k=4,
    )
    assert r.neighbours["model"].tolist() == ["m1", "m0", "m2", "m3"]
    np.testing.assert_allclose(r.neighbours["target_distance"].to_numpy()[:3], [0.05, 0.4, 0.7])
    assert np.isnan(r.neighbours["target_distance"].iloc[3])
    assert r.neighbours["embedding_distance"].tolist() == [1.0, 0.0, 2.0, 0.5]
    assert r.neighbours.loc[0, "law"] == 0.3  # each row carries its own model's accuracies
    assert r.headline().startswith(
        "closest to the target profile (given, 1 benchmarks): m1 (mean |actual - target| 0.050"
    )


def test_capability_search_returns_the_planted_model_first():
    rng = np.random.default_rng(0)
    n_bench, per = 3, 16
    bench_names = np.array(["gsm8k", "mmlu", "piqa"])
    bench = np.repeat(np.arange(n_bench), per)
    embed = _profile_embed_fn(bench, n_bench, np.zeros((len(bench), 1)))
    profiles = np.array([[0.25, 0.5, 0.75], [0.75, 0.5, 0.25], [0.5, 0.5, 0.5], [1.0, 0.0, 0.5], [0.0, 1.0, 1.0]])
    sets = []
    for prof in profiles:  # exactly prof * per ones in each benchmark
        y = np.concatenate([rng.permutation(np.arange(per) < round(a * per)) for a in prof]).astype(float)
        sets.append((np.arange(len(bench)), y))
    pool = np.stack([embed(i, y) for i, y in sets])
    names = [f"m{i}" for i in range(len(profiles))]
    acc = pd.DataFrame(profiles, index=names, columns=bench_names)
    target = {"gsm8k": 1.0, "mmlu": 0.0, "piqa": 0.5}  # = m3
    r = capability_search(
        target,
        benchmarks=bench_names[bench],
        embed_fn=embed,
        pool_embeddings=pool,
        pool_names=names,
        pool_per_benchmark_acc=acc,
        n_per_benchmark=8,
        seed=0,
        k=3,
    )
    first = r.neighbours.iloc[0]
    assert first.model == "m3" and first.embedding_distance == pytest.approx(0.0, abs=1e-12)
    assert first.target_distance == pytest.approx(0.0) and first.gsm8k == 1.0
    assert r.realised == target and r.n_queries == {"gsm8k": 8, "mmlu": 8, "piqa": 8}
    assert len(r.table()) == 3 and "m3" in r.to_markdown()
    with pytest.raises(ValueError, match="no candidate queries for benchmark 'gpqa'"):
        capability_search(
            {"gpqa": 0.3},
            benchmarks=bench_names[bench],
            embed_fn=embed,
            pool_embeddings=pool,
            pool_names=names,
            pool_per_benchmark_acc=acc,
        )
    with pytest.raises(ValueError, match="outside \\[0, 1\\]"):
        capability_search(
            {"mmlu": 62},
            benchmarks=bench_names[bench],
            embed_fn=embed,
            pool_embeddings=pool,
            pool_names=names,
            pool_per_benchmark_acc=acc,
        )
