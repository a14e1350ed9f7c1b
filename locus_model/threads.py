"""CPU threads: how many a process should use on the machine it runs on, and a pin for a block of torch work.

torch's default is one intra-op thread per core, whether or not the cores are free. On a machine busy with other
work that oversubscribes it: threads wait for a core that is not free, and small fits (a 300-step Adam fit of a
2,000 x 64 logistic model, a training warm-up) run 10-25x slower than on one thread (bench/README.md, "Threads").
Thread counts also change float sums (a parallel reduction adds in another order), so a training's result depends
on them; the evaluation protocol therefore pins each fit's threads (a setting it records) and runs fits side by
side, one process per free core, instead of letting the machine's core count decide.

The one rule: :func:`choose_threads` (what product code calls) takes the threads asked for, else the cores free when
the work starts (:func:`machine`: the cores other processes keep busy, measured over a short window, this process's
own time left out; :func:`default_threads` of that). Small fits pin themselves to 1 (:func:`torch_threads`).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

BUSY_WINDOW_S = 0.5  # how long machine() watches the other processes' CPU time (Linux)


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


def _cpu_ticks(cpus: set[int], stat: str) -> int:
    """Busy clock ticks (user, nice, system, irq, softirq, steal) of ``cpus`` in a /proc/stat text."""
    total = 0
    for line in stat.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
            total += user + nice + system + irq + softirq + steal
    return total


def _own_ticks(self_stat: str) -> int:
    """This process's CPU clock ticks (utime + stime, every thread) in a /proc/self/stat text."""
    fields = self_stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def busy_elsewhere(cpus: set[int], before: tuple[str, str], after: tuple[str, str], seconds: float) -> float:
    """Cores that other processes kept busy between two readings of (/proc/stat, /proc/self/stat) ``seconds``
    apart: the busy ticks of ``cpus`` less this process's own, per second (clock ticks: SC_CLK_TCK)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = _cpu_ticks(cpus, after[0]) - _cpu_ticks(cpus, before[0])
    own = _own_ticks(after[1]) - _own_ticks(before[1])
    return max(0.0, (busy - own) / tick / max(seconds, 1e-9))


def machine(window_s: float = BUSY_WINDOW_S) -> tuple[int, float]:
    """(cores this process may run on, the load of other work on them): on Linux the cores other processes keep busy
    over ``window_s`` seconds (this process's own time left out, so the work it did before does not count against
    it); elsewhere the 1-minute load average."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    stat, own = Path("/proc/stat"), Path("/proc/self/stat")
    if stat.exists() and own.exists() and window_s > 0:
        before = (stat.read_text(), own.read_text())
        start = time.perf_counter()
        time.sleep(window_s)
        after = (stat.read_text(), own.read_text())
        return len(cpus), busy_elsewhere(cpus, before, after, time.perf_counter() - start)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return len(cpus), float(load)


@dataclass(frozen=True)
class ThreadChoice:
    """The torch threads a piece of work takes and why (what a run records beside its results)."""

    threads: int
    cores: int
    busy: float  # cores busy with other work when it was chosen
    requested: int  # 0: chosen from the free cores

    def describe(self) -> str:
        why = "as requested" if self.requested else "the cores free"
        return f"{self.threads} torch thread(s), {why} ({self.cores} cores, {self.busy:.1f} busy with other work)"


def choose_threads(requested: int = 0) -> ThreadChoice:
    """The one threads rule: ``requested`` threads when it is 1 or more, else the cores free now
    (:func:`default_threads` of :func:`machine`), so a fit never spins on a core another process holds."""
    if requested < 0:
        raise ValueError(f"choose_threads: requested={requested}; give 1 or more threads, or 0 for the free cores")
    if requested:  # as asked: no half-second measuring window (a server or a test starts at once); the load average
        cores, busy = machine(window_s=0)
        return ThreadChoice(requested, cores, busy, requested)
    cores, busy = machine()
    return ThreadChoice(default_threads(cores, busy), cores, busy, requested)


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


__all__ = [
    "ThreadChoice",
    "busy_elsewhere",
    "choose_threads",
    "default_jobs",
    "default_threads",
    "free_cores",
    "machine",
    "torch_threads",
]
