"""One newcomer's estimates step costs memory linear in its answers (issue 68, item 1): twice the answers, well under
three times the memory, each size measured in a fresh process (bench.bench_estimate_memory). The whole Jacobian at
once grew as n^2 (four times the memory for twice the answers)."""

from __future__ import annotations

from bench.bench_estimate_memory import measure


def test_twice_the_answers_cost_less_than_three_times_the_memory() -> None:
    small, large = measure(800, hidden=16, query_dim=32), measure(1600, hidden=16, query_dim=32)
    assert small["n"] == 800 and large["n"] == 1600
    # the floor: allocator noise of a few MB; n^2 would be 4 x 41 MB = 164 MB at 1600 (16 hidden units, 4 bytes)
    assert large["step_rise_mb"] < 3 * max(small["step_rise_mb"], 20.0), (small, large)
    # the same process: the step's peak within the process's (ru_maxrss and VmHWM round apart by a few kB)
    assert large["process_peak_mb"] + 1 >= large["step_peak_mb"] >= large["step_rise_mb"] > 0
