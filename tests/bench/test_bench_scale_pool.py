"""bench/bench_scale_pool.py: the blockwise neighbour search is exact, and a small pool runs end to end."""

import numpy as np

from bench.bench_scale_pool import main, top_neighbours


def test_blockwise_neighbours_equal_the_full_distance_matrix():
    z = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    idx, dist = top_neighbours(z, k=5, block=7)
    full = np.sqrt(((z[:, None].astype(np.float64) - z[None]) ** 2).sum(-1))
    np.fill_diagonal(full, np.inf)
    expected = np.argsort(full, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(idx, expected)
    np.testing.assert_allclose(dist, np.take_along_axis(full, expected, axis=1), rtol=1e-6)


def test_a_small_pool_is_embedded_stored_and_routed(tmp_path):
    out = main(["--models", "120", "--evaluations", "16", "--queries", "64", "--route-queries", "5",
                "--out", str(tmp_path / "scale.json")])
    assert out["store"]["round_trip_equal"] and out["route"]["queries"] == 5
    assert out["route"]["p99_ms"] >= out["route"]["p50_ms"] > 0
    assert len(out["neighbours_of_model_0"]) == 10 and 0 not in out["neighbours_of_model_0"]
    assert (tmp_path / "scale.json").exists()
