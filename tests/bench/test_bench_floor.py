"""bench/bench_floor.py: the runs' command lines and the figures read back from a result, checked by hand; and
bench/bench_threads.py's fit on the thread count it is given."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.bench_floor import RUNS, command, figures
from bench.bench_threads import small_fit
from locus_model.threads import torch_threads


def test_each_run_is_the_case_as_a_user_runs_it_with_its_thread_setting():
    line = command(Path("e.parquet"), Path("m.csv"), Path("o.json"), RUNS["threads1"][0])
    assert line[1:4] == ["-m", "locus_model.cli", "evaluate"]
    assert line[line.index("--models-file") + 1] == "m.csv" and line[line.index("--folds") + 1] == "5"
    assert line[line.index("--seed") + 1] == "0" and line[-2:] == ["--threads", "1"]
    assert "--threads" not in command(Path("e"), Path("m"), Path("o"), RUNS["process2"][0])  # the default: pinned 1
    assert RUNS["process2"][1] == {"OMP_NUM_THREADS": "2"} and RUNS["busy"][2] is True


def test_the_figures_are_the_verdict_as_locus_evaluate_prints_it(tmp_path):
    result = {
        "verdict": {
            "pays": False,
            "best_single": "gemini",
            "delta": -0.8000000000000007,
            "lo": -1.6000000000000014,
            "hi": -0.19999999999998908,
            "cost_share": 0.9765,
        },
        "methods": {"locus": {"all": {"routing_acc": {"mean": 0.71}}}},
        "settings": {"threads": 1},
        "wall_s": 2239.8,
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    row = figures(path)
    assert (row["figure"], row["verdict"], row["threads"]) == ("-0.8 [-1.6, -0.2]", "call gemini", 1)
    result["verdict"].update(pays=True, delta=1.25, lo=0.05, hi=2.5)
    path.write_text(json.dumps(result))
    assert (figures(path)["figure"], figures(path)["verdict"]) == ("+1.2 [+0.1, +2.5]", "pays")


def test_the_small_fit_runs_on_the_count_it_is_given(monkeypatch):
    seen = []
    real = torch.optim.Adam.step

    def step(self, *a, **k):
        seen.append(torch.get_num_threads())
        return real(self, *a, **k)

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    with torch_threads(1):
        assert small_fit(steps=3, rows=20, features=4) > 0
    assert seen == [1, 1, 1]
