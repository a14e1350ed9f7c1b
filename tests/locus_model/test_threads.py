"""The thread defaults: from the cores and the load, pure; the pin restores what it changed."""

from __future__ import annotations

import pytest
import torch

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
