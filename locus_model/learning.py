"""The router learns from graded outcomes: each graded answer is an evaluation of the model that gave it, on that query.

What the learner believes of model m on query group k is a :class:`~locus_model.estimates.CellPosterior` cell whose
prior is the router's own calibrated P(correct): its mean is the router's mean P over the queries graded in that cell
(before any, the model's group profile), its variance ``LearningConfig.prior_var``. A query q of group k then gets

    learned P(m, q) = sigmoid(logit P_router(m, q) + logit(posterior mean_mk) - logit(prior mean_mk)),

the router's per-query view shifted by what the outcomes say of the cell: no outcomes, no shift (a learning router
starts exactly where frozen LOCUS is); outcomes as the router predicted, no shift; a model that does worse than
predicted on a group moves down there, as far as the evidence allows (the posterior, not a running mean). Thompson
sampling draws the cell's rate instead of its mean (``draw``); how often a draw may change the choice is the caller's
budget (:class:`ExplorationBudget`). Evidence is discounted with a half-life (a model that changes behind the same
name is noticed), and no client's outcomes count for more than ``client_share`` of a cell's evidence.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from locus_model.estimates.posterior import CellPosterior

_CLIP = 1e-4


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), _CLIP, 1 - _CLIP)
    return np.log(p) - np.log1p(-p)


@dataclass(frozen=True)
class LearningConfig:
    """How the router learns from outcomes."""

    explore: float = 0.05  # share of requests whose choice may leave the best estimate (0: never explore)
    prior_var: float = 0.01  # tau^2: how wrong the router's mean P of a cell may be on a team's traffic (0.1 sd)
    half_life: float = 500.0  # graded answers of a cell after which older evidence counts half (inf: never forget)
    client_share: float = 1.0  # most of a cell's evidence one client's outcomes may hold (1: no bound)

    def __post_init__(self) -> None:
        for name, lo, hi in (("explore", 0.0, 1.0), ("prior_var", 1e-6, 0.25), ("client_share", 0.0, 1.0)):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
                raise ValueError(f"LearningConfig.{name} = {v!r}: give a number in [{lo}, {hi}]")
        if not (self.half_life > 0):
            raise ValueError(f"LearningConfig.half_life = {self.half_life!r}: give a positive number of answers (inf: "
                             "never forget)")

    @property
    def forget(self) -> float:
        return 1.0 if math.isinf(self.half_life) else 0.5 ** (1.0 / self.half_life)


@dataclass
class ExplorationBudget:
    """The share of requests that may leave the best estimate: a choice may explore only while the explored share
    stays within ``share``."""

    share: float
    requests: int = 0
    explored: int = 0

    def allows(self) -> bool:
        return self.share > 0 and self.explored + 1 <= self.share * (self.requests + 1)

    def record(self, explored: bool) -> None:
        self.requests += 1
        self.explored += int(explored)


@dataclass
class Learner:
    """The online posterior of M models over K query groups (``names``: the models, in the pool's order)."""

    names: tuple[str, ...]
    posterior: CellPosterior
    expected: np.ndarray  # (M, K) sum of the router's P over the graded answers (discounted like the evidence)
    start: np.ndarray  # (M, K) the prior mean before any outcome (the group profiles)
    config: LearningConfig = field(default_factory=LearningConfig)
    client_counts: dict = field(default_factory=dict)  # client -> (M, K) its share of the evidence
    _shift: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)  # shift()'s cache

    @classmethod
    def start_from(cls, names, profiles: np.ndarray, config: LearningConfig | None = None) -> "Learner":
        """No outcomes yet: each cell's prior mean is the model's group profile (M, K)."""
        config = config or LearningConfig()
        profiles = np.asarray(profiles, np.float64)
        post = CellPosterior.from_prior(profiles, config.prior_var)
        return cls(tuple(names), post, np.zeros_like(post.prior_mean), post.prior_mean.copy(), config)

    def _base(self, cells=slice(None)) -> np.ndarray:
        """The posterior mean each cell would have with no outcomes: the zero of the shift."""
        eps = self.posterior.robust
        return (1.0 - eps) * self.posterior.prior_mean[cells] + eps * 0.5

    def shift(self) -> np.ndarray:
        """(M, K) logit(posterior mean) - its value with no outcomes: what outcomes add to the router's logit.
        Computed once per change of the evidence (a request reads it)."""
        if self._shift is None:
            self._shift = _logit(self.posterior.mean()) - _logit(self._base())
        return self._shift

    def profiles(self) -> np.ndarray:
        """(M, K) the group profiles the outcomes taught: each model's starting profile shifted as its queries are
        (what the guard's standing reads in place of the trained profiles)."""
        return 1.0 / (1.0 + np.exp(-(_logit(self.start) + self.shift())))

    def proba(self, p: np.ndarray, groups: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """(M, Q) learned P(correct) from the router's P (M, Q) on queries of groups (Q,); ``rows``: p holds only
        these models' rows (R, Q)."""
        shift = self.shift() if rows is None else self.shift()[np.asarray(rows)]
        return 1.0 / (1.0 + np.exp(-(_logit(p) + shift[:, np.asarray(groups)])))

    def draw(self, p: np.ndarray, groups: np.ndarray, rng: np.random.Generator,
             rows: np.ndarray | None = None) -> np.ndarray:
        """(M, Q) one Thompson draw: each cell's rate drawn from its posterior in place of its mean (``rows``: as in
        :meth:`proba`; only those cells are drawn)."""
        rows = np.arange(len(self.names)) if rows is None else np.asarray(rows)
        cells = (rows[:, None], np.asarray(groups)[None, :])  # (R, Q)
        shift = _logit(self.posterior.sample(rng, cells)) - _logit(self._base(cells))
        return 1.0 / (1.0 + np.exp(-(_logit(p) + shift)))

    def observe(self, m: int, k: int, score: float, p_router: float, *, client: str | None = None) -> float:
        """One graded answer of model m on a query of group k that the router gave P ``p_router``; returns the weight
        it counted with (below 1 when its client already holds ``client_share`` of the cell's evidence)."""
        if not (0.0 <= score <= 1.0) or not (0.0 <= p_router <= 1.0):
            raise ValueError(f"Learner.observe: score {score!r} and P {p_router!r} must lie in [0, 1]")
        post, f = self.posterior, self.config.forget
        self._shift = None
        weight = 1.0
        if client is not None:
            mine = self.client_counts.setdefault(client, np.zeros_like(post.count))
            mine *= f
            total = post.count[m, k] * f + 1.0
            weight = float(np.clip((self.config.client_share * total - mine[m, k]) / max(1.0 - self.config.client_share, 1e-9), 0.0, 1.0)) \
                if post.count[m, k] >= 1.0 else 1.0
            mine[m, k] += weight
        post.right[m, k] *= f
        post.count[m, k] *= f
        self.expected[m, k] *= f
        post.right[m, k] += weight * score
        post.count[m, k] += weight
        self.expected[m, k] += weight * p_router
        # the cell's prior mean: the router's mean P on what was graded there, the start counting as one answer
        post.prior_mean[m, k] = np.clip((self.start[m, k] + self.expected[m, k]) / (1.0 + post.count[m, k]), 0.005, 0.995)
        return weight

    def reset(self, m: int) -> None:
        """Forget every outcome of model m (the per-model reset)."""
        post = self.posterior
        self._shift = None
        post.right[m], post.count[m], self.expected[m] = 0.0, 0.0, 0.0
        post.prior_mean[m] = self.start[m]
        for counts in self.client_counts.values():
            counts[m] = 0.0

    def remapped(self, names, profiles: np.ndarray, *, keep=None) -> "Learner":
        """This learner over another pool of the same query groups (profiles (M', K)): the models of ``keep``
        (default: every model in both) carry their evidence over, the others start from their profiles."""
        out = Learner.start_from(names, profiles, self.config)
        old = {n: i for i, n in enumerate(self.names)}
        keep = set(self.names) if keep is None else set(keep)
        pairs = [(j, old[n]) for j, n in enumerate(out.names) if n in old and n in keep]
        if pairs:
            new_rows, old_rows = map(list, zip(*pairs))
            post, was = out.posterior, self.posterior
            post.right[new_rows], post.count[new_rows] = was.right[old_rows], was.count[old_rows]
            out.expected[new_rows] = self.expected[old_rows]
            post.prior_mean[new_rows] = np.clip((out.start[new_rows] + out.expected[new_rows])
                                                / (1.0 + post.count[new_rows]), 0.005, 0.995)
            for client, counts in self.client_counts.items():
                mine = out.client_counts[client] = np.zeros_like(post.count)
                mine[new_rows] = counts[old_rows]
        return out

    def state_dict(self) -> dict:
        """Plain data (lists and floats) that :meth:`from_state` reads back: what survives a restart."""
        post = self.posterior
        return {"names": list(self.names), "config": asdict(self.config), "right": post.right.tolist(),
                "count": post.count.tolist(), "expected": self.expected.tolist(), "start": self.start.tolist(),
                "clients": {c: v.tolist() for c, v in self.client_counts.items()}}

    @classmethod
    def from_state(cls, state: dict) -> "Learner":
        config = LearningConfig(**state["config"])
        learner = cls.start_from(state["names"], np.asarray(state["start"]), config)
        post = learner.posterior
        post.right[:], post.count[:] = np.asarray(state["right"]), np.asarray(state["count"])
        learner.expected[:] = np.asarray(state["expected"])
        post.prior_mean[:] = np.clip((learner.start + learner.expected) / (1.0 + post.count), 0.005, 0.995)
        learner.client_counts = {c: np.asarray(v, np.float64) for c, v in state.get("clients", {}).items()}
        return learner


__all__ = ["ExplorationBudget", "Learner", "LearningConfig"]
