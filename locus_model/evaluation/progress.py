"""The evaluation's progress: a line when each (fold, method) fit starts and ends, with the fits done and an ETA.

The ETA prices each remaining fit at the mean seconds of that method's finished fits (a method not yet seen: the
mean of every finished fit), divided among the worker processes; after the first fold it is the rest's sum.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence


def format_duration(seconds: float) -> str:
    """'45 s', '3 min 05 s', '1 h 02 min': what a person reads at a glance."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta_seconds(done: Mapping[str, Sequence[float]], remaining: Sequence[str], jobs: int = 1) -> float | None:
    """Seconds the ``remaining`` fits (method names) should take on ``jobs`` workers, from the seconds of the fits
    ``done`` ({method: seconds of each finished fit}); None before any fit has finished."""
    every = [s for seconds in done.values() for s in seconds]
    if not every:
        return None
    fallback = sum(every) / len(every)
    total = sum(sum(done[m]) / len(done[m]) if done.get(m) else fallback for m in remaining)
    return total / max(jobs, 1)


class FitProgress:
    """Says each fit's start and end: ``fold 2/5 irt: 12.3 s (8/30 fits, 1 min 40 s so far, ETA 6 min 10 s)``."""

    def __init__(
        self,
        tasks: Sequence[tuple[int, str]],
        *,
        total_folds: int,
        jobs: int = 1,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.pending = list(tasks)  # (fold index, method), in the order they are expected to end
        self.total, self.total_folds, self.jobs = len(tasks), total_folds, jobs
        self.say, self.clock, self.start = say, clock, clock()
        self.done: dict[str, list[float]] = {}

    def started(self, fold: int, name: str) -> None:
        self.say(f"fold {fold + 1}/{self.total_folds} {name}: fitting ...")

    def finished(self, fold: int, name: str, seconds: float, where: str = "") -> str:
        """Record the fit's seconds and say (and return) its line."""
        if (fold, name) in self.pending:
            self.pending.remove((fold, name))
        self.done.setdefault(name, []).append(seconds)
        n = self.total - len(self.pending)
        eta = eta_seconds(self.done, [m for _, m in self.pending], self.jobs)
        line = (
            f"fold {fold + 1}/{self.total_folds} {name:<12} {seconds:7.1f} s{where} ({n}/{self.total} fits, "
            f"{format_duration(self.clock() - self.start)} so far"
            + (f", ETA {format_duration(eta)})" if self.pending and eta is not None else ")")
        )
        self.say(line)
        return line


__all__ = ["FitProgress", "eta_seconds", "format_duration"]
