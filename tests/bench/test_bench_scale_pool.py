"""bench/bench_scale_pool.py: a small pool runs end to end, and what it reports is what a direct computation gives
(the neighbour search itself: tests/locus_model/test_neighbours.py)."""

import numpy as np
import torch

from bench.bench_scale_pool import DIM, latency_summary, main, synthetic_pool
from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.model import Locus, LocusConfig


def test_the_latency_percentiles_are_numpy_s_linear_interpolation_in_ms():
    # 1..100 ms: the median falls between the 50th and 51st (50.5); p99 at rank 98.01 of 0..99: 99 + 0.01 (99.01)
    assert latency_summary(np.arange(1, 101) / 1e3) == {"p50_ms": 50.5, "p99_ms": 99.0}
    assert latency_summary([0.002, 0.004]) == {"p50_ms": 3.0, "p99_ms": 4.0}  # 2 + 0.99 * 2 = 3.98 -> 4.0


def test_a_small_pool_is_embedded_stored_and_routed_as_a_direct_computation_says(tmp_path):
    out = main(
        [
            "--models",
            "120",
            "--evaluations",
            "16",
            "--queries",
            "64",
            "--route-queries",
            "5",
            "--out",
            str(tmp_path / "scale.json"),
        ]
    )
    assert out["store"]["round_trip_equal"] and out["route"]["queries"] == 5 and out["decide"]["queries"] == 5
    assert (tmp_path / "scale.json").exists()
    # the same pool, embedded again: model 0's ten nearest by brute force, and the first query's route by hand
    torch.manual_seed(0)
    model = Locus(LocusConfig(query_dim=DIM)).eval()
    enc, sets = synthetic_pool(120, 16, 64)
    z = embed_evaluation_sets(model, enc, sets)
    dist = np.linalg.norm(z - z[0], axis=1)
    dist[0] = np.inf
    assert out["neighbours_of_model_0"] == np.lexsort((np.arange(120), dist))[:10].tolist()
    rng = np.random.default_rng(1)
    costs = rng.uniform(0.1, 10, 120)
    q = rng.choice(64, 5)[0]
    p = predict_proba(model, z, enc[q : q + 1])[:, 0].astype(np.float64)
    score = 0.9 * p - 0.1 * costs / costs.max()  # quality weight 0.9, no standing: no guard
    assert out["route"]["chosen"][0] == int(np.argmax(score))
