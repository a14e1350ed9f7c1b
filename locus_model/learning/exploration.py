"""Exploration only where someone grades: a request of query group k may leave the best estimate only while the
explored requests of k stay within ``explore`` x the graded outcomes of k x how wide the posterior still is there.

Why per query group (the learner's cell column), not per request or per client: an explored answer is worth its cost
only if its outcome comes back, and outcomes come back where someone grades; a group's outcomes are the evidence
that exploration of that group feeds (a cell is (model, group)), and the group is known at decision time, from the
query alone, in the gateway and the replay alike (a client's identity is not: the router answers clients that never
grade beside ones that do, and a label costs nothing to change). No outcome in a group: no exploration there, ever
(a server nobody grades explores nothing); as the cells narrow (posterior sd / prior sd), the budget shrinks with
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Exploration:
    """Per query group: graded outcomes and explored requests (counts), and the share ``explore`` between them."""

    explore: float
    groups: int
    graded: np.ndarray | None = field(default=None)  # (K,) outcomes taken per group
    explored: np.ndarray | None = field(default=None)  # (K,) requests explored per group

    def __post_init__(self) -> None:
        self.graded = np.zeros(self.groups) if self.graded is None else np.asarray(self.graded, np.float64)
        self.explored = np.zeros(self.groups) if self.explored is None else np.asarray(self.explored, np.float64)

    def _counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(graded, explored): arrays from __post_init__ on (None only as the constructor's default)."""
        assert self.graded is not None and self.explored is not None, "Exploration: counts set in __post_init__"
        return self.graded, self.explored

    def budget(self, group: int, narrowing: float) -> float:
        """Requests of ``group`` that may be explored in all: explore x graded x narrowing."""
        return self.explore * float(self._counts()[0][group]) * narrowing

    def allows(self, group: int, narrowing: float) -> tuple[bool, str]:
        """Whether a request of ``group`` may be explored now, and why (or why not), in words."""
        graded, explored = self._counts()
        if self.explore <= 0:
            return False, "exploration is off (explore 0)"
        if graded[group] <= 0:
            return False, "no graded outcome in this query's group yet: nothing is explored where nobody grades"
        room = self.budget(group, narrowing)
        if explored[group] + 1 > room:
            return False, (
                f"the exploration budget of this query's group is spent ({int(explored[group])} explored of "
                f"{room:.1f} allowed: {self.explore:g} x {graded[group]:g} outcomes x "
                + (f"{narrowing:.2f}, the posterior's remaining width)" if narrowing < 1 else "at most 1, its width)")
            )
        return True, (
            f"within the group's budget ({int(explored[group])} explored of {room:.1f} allowed: "
            f"{self.explore:g} x {graded[group]:g} outcomes x {narrowing:.2f}, the posterior's remaining width)"
        )

    def record(self, group: int, explored: bool) -> None:
        self._counts()[1][group] += float(explored)

    def outcome(self, group: int) -> None:
        self._counts()[0][group] += 1.0

    def state_dict(self) -> dict:
        graded, explored = self._counts()
        return {"graded": graded.tolist(), "explored": explored.tolist()}

    @classmethod
    def from_state(cls, explore: float, groups: int, state: dict | None) -> "Exploration":
        out = cls(explore, groups)
        if state:
            graded, explored = np.asarray(state.get("graded", []), np.float64), np.asarray(state.get("explored", []))
            if graded.shape == (groups,) and explored.shape == (groups,) and np.isfinite(graded).all():
                out.graded, out.explored = np.maximum(graded, 0.0), np.maximum(explored.astype(np.float64), 0.0)
        return out


__all__ = ["Exploration"]
