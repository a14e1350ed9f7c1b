"""bench/bench_scale_pool.py: a small pool runs end to end (the neighbour search: tests/locus_model/test_neighbours.py)."""

from bench.bench_scale_pool import main


def test_a_small_pool_is_embedded_stored_and_routed(tmp_path):
    out = main(["--models", "120", "--evaluations", "16", "--queries", "64", "--route-queries", "5",
                "--out", str(tmp_path / "scale.json")])
    assert out["store"]["round_trip_equal"] and out["route"]["queries"] == 5
    assert out["route"]["p99_ms"] >= out["route"]["p50_ms"] > 0
    assert out["decide"]["queries"] == 5 and out["decide"]["p99_ms"] >= out["decide"]["p50_ms"] > 0
    assert len(out["neighbours_of_model_0"]) == 10 and 0 not in out["neighbours_of_model_0"]
    assert (tmp_path / "scale.json").exists()
