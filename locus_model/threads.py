"""CPU threads: how many a process should use on the machine it runs on, and a pin for a block of torch work.

torch's default is one intra-op thread per core, whether or not the cores are free. On a machine busy with other
work that oversubscribes it: threads wait for a core that is not free, and small fits (a 300-step Adam fit of a
2,000 x 64 logistic model, a training warm-up) run 10-25x slower than on one thread (bench/README.md, "Threads").
Thread counts also change float sums (a parallel reduction adds in another order), so a training's result depends
on them; the evaluation protocol therefore pins each fit's threads (a setting it records) and runs fits side by
side, one process per free core, instead of letting the machine's core count decide.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


def free_cores(cores: int, load: float) -> int:
    """Cores not busy with other work: ``cores`` less the 1-minute ``load`` (runnable processes), rounded, at
    least 1 (a process always gets some time)."""
    if cores < 1:
        raise ValueError(f"free_cores: cores={cores}; give the number of cores this process may use (at least 1)")
    if load < 0:
        raise ValueError(f"free_cores: load={load}; give the load average (0 or more, os.getloadavg()[0])")
    return max(1, min(cores, int(cores - load + 0.5)))


def default_threads(cores: int, load: float) -> int:
    """torch intra-op threads for one process on a machine of ``cores`` at ``load``: the cores actually free."""
    return free_cores(cores, load)


def default_jobs(cores: int, load: float, tasks: int, threads: int = 1) -> int:
    """Worker processes for ``tasks`` independent fits of ``threads`` threads each: as many as the free cores hold,
    no more than there are tasks, at least 1."""
    if threads < 1:
        raise ValueError(f"default_jobs: threads={threads}; give the threads of each fit (at least 1)")
    return max(1, min(max(tasks, 1), free_cores(cores, load) // threads))


def machine() -> tuple[int, float]:
    """(cores this process may run on, 1-minute load average) of this machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return cores, float(load)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run torch CPU ops on ``n`` intra-op threads, then restore the count before. Small fits and many small
    forward passes (one evaluation set each, ~10 ms) run fastest on one thread."""
    import torch  # why: the CLI computes its defaults (this module) before it loads torch

    if n < 1:
        raise ValueError(f"torch_threads: n={n}; give 1 or more threads")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


__all__ = ["default_jobs", "default_threads", "free_cores", "machine", "torch_threads"]
