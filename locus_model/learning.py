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
name is noticed).

Clients (tokens, judges) are bounded by agreement, not by volume: each client's outcomes are kept apart per cell, and
a cell's evidence is their weighted sum. A client's weight in a cell is 1 while its outcomes agree with the cell's
consensus -- the residual (score - the router's P) of the client holding the median of the cell's evidence -- and
falls as (client_z / |z|)^2 once they disagree by more than ``client_z`` standard errors; a sole client has no one
to disagree with, so a single honest judge teaches at full weight. A client n of whose reports stray by d from the
consensus has z ~ d sqrt(4 n) and weight z0^2 / (4 n d^2): its whole influence on a cell is about client_z^2 / (4 d^2)
answers however many it sends (2.25 / d^2 at client_z 3: 6 answers for a poisoner 0.6 off), applied retroactively
(the weights are recomputed from the kept per-client sums). ``client_share``
additionally caps one client's share of a cell's evidence where other clients grade it too (1: no cap).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from locus_model.estimates.posterior import ROBUST_WEIGHT, CellPosterior

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
    client_share: float = 1.0  # most of a cell's evidence one client may hold where others grade it too (1: no cap)
    client_z: float = 3.0  # standard errors a client's residual may stray from the cell's consensus at full weight (inf: no bound)
    robust: float = ROBUST_WEIGHT  # the cell posterior's flat component: outcomes that contradict the prior win

    def __post_init__(self) -> None:
        for name, lo, hi in (("explore", 0.0, 1.0), ("prior_var", 1e-6, 0.25), ("client_share", 0.0, 1.0),
                             ("client_z", 0.0, math.inf), ("robust", 0.0, 0.999)):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and (math.isfinite(v) or name == "client_z") and lo <= v <= hi):
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
    clients: dict = field(default_factory=dict)  # client -> (3, M, K) its own (right, count, expected), unweighted

    @classmethod
    def start_from(cls, names, profiles: np.ndarray, config: LearningConfig | None = None, *,
                   prior_var: np.ndarray | None = None) -> "Learner":
        """No outcomes yet: each cell's prior mean is the model's group profile (M, K); its variance
        ``config.prior_var``, or ``prior_var`` (M, K) where given (e.g. a newcomer's: the pool's spread)."""
        config = config or LearningConfig()
        profiles = np.asarray(profiles, np.float64)
        var = config.prior_var if prior_var is None else np.asarray(prior_var, np.float64)
        post = CellPosterior.from_prior(profiles, var, robust=config.robust)
        return cls(tuple(names), post, np.zeros_like(post.prior_mean), post.prior_mean.copy(), config)

    def _base(self) -> np.ndarray:
        """(M, K) the posterior mean each cell would have with no outcomes: the zero of the shift."""
        eps = self.posterior.robust
        return (1.0 - eps) * self.posterior.prior_mean + eps * 0.5

    def shift(self) -> np.ndarray:
        """(M, K) logit(posterior mean) - its value with no outcomes: what outcomes add to the router's logit."""
        return _logit(self.posterior.mean()) - _logit(self._base())

    def proba(self, p: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """(M, Q) learned P(correct) from the router's P (M, Q) on queries of groups (Q,)."""
        return 1.0 / (1.0 + np.exp(-(_logit(p) + self.shift()[:, np.asarray(groups)])))

    def draw(self, p: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """(M, Q) one Thompson draw: each cell's rate drawn from its posterior in place of its mean."""
        shift = _logit(self.posterior.sample(rng)) - _logit(self._base())
        return 1.0 / (1.0 + np.exp(-(_logit(p) + shift[:, np.asarray(groups)])))

    def observe(self, m: int, k: int, score: float, p_router: float, *, client: str | None = None) -> float:
        """One graded answer of model m on a query of group k that the router gave P ``p_router``, from ``client``
        (None: the anonymous client); returns the weight the client's outcomes now count with in that cell."""
        if not (0.0 <= score <= 1.0) or not (0.0 <= p_router <= 1.0):
            raise ValueError(f"Learner.observe: score {score!r} and P {p_router!r} must lie in [0, 1]")
        key = "" if client is None else str(client)
        mine = self.clients.get(key)
        if mine is None:
            mine = self.clients[key] = np.zeros((3, *self.posterior.count.shape))
        f = self.config.forget
        for sums in self.clients.values():  # the cell's evidence ages by one answer, every client's alike
            sums[:, m, k] *= f
        mine[:, m, k] += (score, 1.0, p_router)
        weights = self._combine(m, k)
        return weights.get(key, 1.0)

    def _combine(self, m: int, k: int) -> dict:
        """Recompute cell (m, k) from the clients' sums and their agreement weights; {client: weight}."""
        keys = [c for c, sums in self.clients.items() if sums[1, m, k] > 1e-9]
        sums = np.stack([self.clients[c][:, m, k] for c in keys]) if keys else np.zeros((0, 3))  # (C, 3)
        w = np.ones(len(keys))
        if len(keys) > 1:
            n = sums[:, 1]
            resid = (sums[:, 0] - sums[:, 2]) / n  # (C,) each client's mean score less the router's mean P
            order = np.argsort(resid)
            centre = resid[order][np.searchsorted(np.cumsum(n[order]), n.sum() / 2)]  # the evidence's median client
            z = np.abs(resid - centre) / np.sqrt(0.25 / n + 0.25 / n.sum())
            z0 = self.config.client_z
            w = np.where(z <= z0, 1.0, (z0 / np.maximum(z, 1e-12)) ** 2)
            share = self.config.client_share
            if share < 1.0:  # no client's weighted evidence above ``share`` of the cell's
                for i in range(len(keys)):
                    others = (w * n).sum() - w[i] * n[i]
                    w[i] = min(w[i], share / (1.0 - share) * others / n[i]) if others > 0 else w[i]
        right, count, expected = (w[:, None] * sums).sum(axis=0) if len(keys) else (0.0, 0.0, 0.0)
        post = self.posterior
        post.right[m, k], post.count[m, k], self.expected[m, k] = right, count, expected
        # the cell's prior mean: the router's mean P on what was graded there, the start counting as one answer
        post.prior_mean[m, k] = np.clip((self.start[m, k] + expected) / (1.0 + count), 0.005, 0.995)
        return dict(zip(keys, w.tolist()))

    def reset(self, m: int) -> None:
        """Forget every outcome of model m (the per-model reset)."""
        post = self.posterior
        post.right[m], post.count[m], self.expected[m] = 0.0, 0.0, 0.0
        post.prior_mean[m] = self.start[m]
        for sums in self.clients.values():
            sums[:, m] = 0.0

    def state_dict(self) -> dict:
        """Plain data (lists and floats) that :meth:`from_state` reads back: what survives a restart."""
        config = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self.config).items()}
        return {"names": list(self.names), "config": config, "start": self.start.tolist(),
                "prior_var": self.posterior.prior_var.tolist(),
                "clients": {c: v.tolist() for c, v in self.clients.items()}}

    @classmethod
    def from_state(cls, state: dict) -> "Learner":
        config = {k: (math.inf if k in ("half_life", "client_z") and v is None else v) for k, v in state["config"].items()}
        learner = cls.start_from(state["names"], np.asarray(state["start"]), LearningConfig(**config),
                                 prior_var=np.asarray(state["prior_var"]) if "prior_var" in state else None)
        learner.clients = {c: np.asarray(v, np.float64) for c, v in state.get("clients", {}).items()}
        cells = np.zeros(learner.start.shape, bool)
        for sums in learner.clients.values():
            cells |= sums[1] > 1e-9
        for m, k in zip(*np.nonzero(cells)):
            learner._combine(int(m), int(k))
        return learner


__all__ = ["ExplorationBudget", "Learner", "LearningConfig"]
