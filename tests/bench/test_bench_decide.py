"""bench/bench_decide.py: both strategies decide every query and the figures are what it timed."""

from __future__ import annotations

from bench.bench_decide import measure


def test_the_decision_bench_times_both_strategies_and_an_outcome():
    out = measure(models=5, groups=2, outcomes=50, requests=20)
    assert out["models"] == 5 and out["requests"] == 20
    assert out["frozen_us"] > 0 and out["learning_us"] > 0 and out["outcome_us"] > 0
    assert out["learning_over_frozen"] == round(out["learning_us"] / out["frozen_us"], 2)
