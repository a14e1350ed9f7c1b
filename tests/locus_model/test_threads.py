"""The thread defaults: from the cores and the load, pure; the pin restores what it changed."""

from __future__ import annotations

import os

import pytest
import torch

from locus_model import threads
from locus_model.threads import default_jobs, default_threads, free_cores, torch_threads


@pytest.mark.parametrize(
    "cores, load, threads",
    [
        (2, 0.0, 2),  # idle: every core
        (2, 0.4, 2),  # a little background work rounds away
        (2, 0.6, 1),  # one core busy
        (2, 1.0, 1),
        (2, 4.0, 1),  # loaded beyond the cores (the 4-15): one thread, never 0
        (2, 15.0, 1),
        (16, 3.2, 13),
        (16, 0.0, 16),
        (1, 0.0, 1),
    ],
)
def test_threads_are_the_cores_actually_free(cores, load, threads):
    assert default_threads(cores, load) == free_cores(cores, load) == threads


@pytest.mark.parametrize(
    "cores, load, tasks, threads, jobs",
    [
        (2, 0.0, 35, 1, 2),  # idle 2 cores: two fits side by side
        (2, 6.0, 35, 1, 1),  # loaded: one
        (16, 0.0, 35, 1, 16),
        (16, 0.0, 5, 1, 5),  # no more workers than fits
        (16, 0.0, 35, 4, 4),  # 4 threads a fit: 4 fit in 16 cores
        (2, 0.0, 35, 4, 1),  # wider fits than the machine: still 1
        (2, 0.0, 0, 1, 1),
    ],
)
def test_jobs_fill_the_free_cores(cores, load, tasks, threads, jobs):
    assert default_jobs(cores, load, tasks, threads) == jobs


def test_bad_inputs_say_what_to_give():
    with pytest.raises(ValueError, match="cores=0"):
        free_cores(0, 1.0)
    with pytest.raises(ValueError, match="load=-1"):
        free_cores(2, -1.0)
    with pytest.raises(ValueError, match="threads=0"):
        default_jobs(2, 0.0, 5, threads=0)


def test_the_pin_sets_and_restores_the_count():
    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    with torch_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with torch_threads(other):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def _stat(*cpus: tuple[int, int]) -> str:
    """A /proc/stat text: per cpu (busy user ticks, idle ticks)."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"] + [
        f"cpu{i} {busy} 0 0 {idle} 0 0 0 0 0 0" for i, (busy, idle) in enumerate(cpus)
    ]
    return "\n".join(lines) + "\nintr 1 2 3\n"


def _self_stat(utime: int, stime: int) -> str:
    """A /proc/self/stat text whose command name holds a space and a parenthesis, as a real one may."""
    return f"42 (py thon) x) R 1 1 1 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0"


def test_busy_elsewhere_is_the_cores_busy_less_this_process_own_time():
    ticks = os.sysconf("SC_CLK_TCK")
    before = (_stat((0, 0), (0, 0)), _self_stat(0, 0))
    # over 2 s: cpu0 fully busy (2 s of ticks), cpu1 half busy; this process used 1 s of it
    after = (_stat((2 * ticks, 0), (ticks, ticks)), _self_stat(ticks // 2, ticks // 2))
    assert threads.busy_elsewhere({0, 1}, before, after, 2.0) == pytest.approx(1.0)  # (3 s - 1 s) / 2 s
    assert threads.busy_elsewhere({1}, before, after, 2.0) == 0.0  # its own time exceeds cpu1's: never below 0


def test_choose_threads_takes_the_request_else_the_free_cores(monkeypatch):
    monkeypatch.setattr(threads, "machine", lambda window_s=0.5: (2, 1.0))  # one of two cores busy with other work
    chosen = threads.choose_threads()
    assert (chosen.threads, chosen.cores, chosen.busy, chosen.requested) == (1, 2, 1.0, 0)
    assert "1 torch thread(s), the cores free (2 cores, 1.0 busy" in chosen.describe()
    assert threads.choose_threads(3).threads == 3  # asked for: as asked
    monkeypatch.setattr(threads, "machine", lambda window_s=0.5: (2, 0.0))
    assert threads.choose_threads().threads == 2
    with pytest.raises(ValueError, match="requested=-1"):
        threads.choose_threads(-1)


def test_threads_asked_for_are_taken_without_the_measuring_window(monkeypatch):
    monkeypatch.setattr(threads.time, "sleep", lambda s: pytest.fail(f"asked for 3 threads, it measured {s} s"))
    chosen = threads.choose_threads(3)
    assert (chosen.threads, chosen.requested) == (3, 3) and "as requested" in chosen.describe()


def test_machine_measures_this_machine():
    cores, busy = threads.machine(window_s=0.05)
    assert cores >= 1 and busy >= 0.0
