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

Clients (tokens, judges) are bounded by agreement, not by volume: each client's outcomes are kept apart, and a cell's
evidence is their weighted sum. Where a cell is graded by several clients, its consensus is the residual (score - the
router's P) of the client holding the median of its evidence, and each client's reports there are tested against the
rate that consensus implies for its queries (the likelihood-ratio statistic G = 2 n KL, ~ z^2 for an honest client).
A client's weight is exp(-excess / 2), the excess summed over its cells of G - ``client_z``^2: an honest client keeps
~1, a client that reports 0 where the others see a model right 85% of the time is at 1% within five reports, in every
cell it grades and retroactively (the weights are recomputed from the kept per-client sums). A sole client has no one
to disagree with: a single honest judge teaches at full weight. ``client_share`` additionally caps one client's share
of a cell's evidence where others grade it too (1: no cap).
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
    """How the router learns from outcomes. The defaults, and why (then checked on the replay, bench/README.md):
    ``prior_var`` 0.01: a cell's prior is the router's calibrated P, wrong on a team's traffic by about 0.1 (~10
    pseudo-answers of prior); ``half_life`` 200: a cell rests on at most ~290 answers (sd >= 3 points, about the guard's
    2-point margin) and a model that changes behind its name is outvoted within ~200 of its answers there; ``robust``
    0.01 (the estimates' is 0.05): the learner acts on every answer, and one wrong answer on a cell at 0.88 moves it 8
    points at 0.01 but 18 at 0.05 (the replay's poisoned and stationary streams flipped on such single answers); a run
    of them still wins; ``client_z`` 3: an honest client's G passes 9 in 0.27% of its cells; ``explore`` 0.05: the
    budget of requests a Thompson draw may send elsewhere (the newcomer's and drift's way in, stationary traffic's
    cost)."""

    explore: float = 0.05  # share of requests whose choice may leave the best estimate (0: never explore)
    prior_var: float = 0.01  # tau^2: how wrong the router's mean P of a cell may be on a team's traffic (0.1 sd)
    half_life: float = 200.0  # graded answers of a cell after which older evidence counts half (inf: never forget)
    client_share: float = 1.0  # most of a cell's evidence one client may hold where others grade it too (1: no cap)
    client_z: float = 3.0  # sqrt of the G a client's cell may reach against the consensus at no cost (inf: no bound)
    robust: float = 0.01  # the cell posterior's flat component: a run of outcomes that contradicts the prior wins

    def __post_init__(self) -> None:
        for name, lo, hi in (
            ("explore", 0.0, 1.0),
            ("prior_var", 1e-6, 0.25),
            ("client_share", 0.0, 1.0),
            ("client_z", 0.0, math.inf),
            ("robust", 0.0, 0.999),
        ):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and (math.isfinite(v) or name == "client_z") and lo <= v <= hi):
                raise ValueError(f"LearningConfig.{name} = {v!r}: give a number in [{lo}, {hi}]")
        if not (self.half_life > 0):
            raise ValueError(
                f"LearningConfig.half_life = {self.half_life!r}: give a positive number of answers (inf: never forget)"
            )

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
    _shift: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)  # shift()'s cache

    @classmethod
    def start_from(
        cls, names, profiles: np.ndarray, config: LearningConfig | None = None, *, prior_var: np.ndarray | None = None
    ) -> "Learner":
        """No outcomes yet: each cell's prior mean is the model's group profile (M, K); its variance
        ``config.prior_var``, or ``prior_var`` (M, K) where given (e.g. a newcomer's: the pool's spread)."""
        config = config or LearningConfig()
        profiles = np.asarray(profiles, np.float64)
        var = config.prior_var if prior_var is None else np.asarray(prior_var, np.float64)
        post = CellPosterior.from_prior(profiles, var, robust=config.robust)
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

    def draw(
        self, p: np.ndarray, groups: np.ndarray, rng: np.random.Generator, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """(M, Q) one Thompson draw: each cell's rate drawn from its posterior in place of its mean (``rows``: as in
        :meth:`proba`; only those cells are drawn)."""
        rows = np.arange(len(self.names)) if rows is None else np.asarray(rows)
        cells = (rows[:, None], np.asarray(groups)[None, :])  # (R, Q)
        shift = _logit(self.posterior.sample(rng, cells)) - _logit(self._base(cells))
        return 1.0 / (1.0 + np.exp(-(_logit(p) + shift)))

    def observe(self, m: int, k: int, score: float, p_router: float, *, client: str | None = None) -> float:
        """One graded answer of model m on a query of group k that the router gave P ``p_router``, from ``client``
        (None: the anonymous client); returns the weight the client's outcomes now count with."""
        if not (0.0 <= score <= 1.0) or not (0.0 <= p_router <= 1.0):
            raise ValueError(f"Learner.observe: score {score!r} and P {p_router!r} must lie in [0, 1]")
        self._shift = None
        key = "" if client is None else str(client)
        mine = self.clients.get(key)
        if mine is None:
            mine = self.clients[key] = np.zeros((3, *self.posterior.count.shape))
        f = self.config.forget
        for sums in self.clients.values():  # the cell's evidence ages by one answer, every client's alike
            sums[:, m, k] *= f
        mine[:, m, k] += (score, 1.0, p_router)
        return self._combine().get(key, 1.0)

    def client_weights(self) -> dict:
        """{client: weight}: exp(-excess / 2), the excess summed over the cells it grades beside others of
        G - client_z^2, G = 2 n KL(its rate || the rate the cell's consensus implies for its queries) (the likelihood
        ratio statistic, ~ z^2 for an honest client)."""
        keys = list(self.clients)
        if len(keys) < 2 or math.isinf(self.config.client_z):
            return dict.fromkeys(keys, 1.0)
        sums = np.stack([self.clients[c] for c in keys])  # (C, 3, M, K)
        right, n, expected = sums[:, 0], sums[:, 1], sums[:, 2]
        graded = n > 1e-9
        resid = np.where(graded, (right - expected) / np.maximum(n, 1e-9), np.nan)  # (C, M, K)
        # the consensus of a cell: the residual of the client holding the median of its evidence
        order = np.argsort(np.where(graded, resid, np.inf), axis=0)
        n_sorted = np.take_along_axis(n * graded, order, axis=0)
        median_at = (np.cumsum(n_sorted, axis=0) >= n_sorted.sum(axis=0) / 2).argmax(axis=0)  # (M, K)
        centre = np.take_along_axis(np.take_along_axis(resid, order, axis=0), median_at[None], axis=0)[0]
        shared = graded & (graded.sum(axis=0) >= 2)[None]  # cells others grade too
        rate = np.clip(right / np.maximum(n, 1e-9), 1e-6, 1 - 1e-6)
        implied = np.clip(expected / np.maximum(n, 1e-9) + centre[None], 0.02, 0.98)
        kl = rate * np.log(rate / implied) + (1 - rate) * np.log((1 - rate) / (1 - implied))
        g = np.where(shared, 2.0 * n * kl, 0.0)
        excess = np.maximum(g - self.config.client_z**2, 0.0).sum(axis=(1, 2))  # (C,)
        return dict(zip(keys, np.exp(-excess / 2.0).tolist()))

    def _combine(self) -> dict:
        """The cells' evidence: the clients' sums, each client weighted (client_weights, then the client_share cap
        where others grade the cell too); {client: weight}."""
        self._shift = None
        weights = self.client_weights()
        post = self.posterior
        if not weights:
            return weights
        sums = np.stack([self.clients[c] for c in weights])  # (C, 3, M, K)
        w = np.broadcast_to(np.asarray(list(weights.values()))[:, None, None], sums[:, 1].shape).copy()  # (C, M, K)
        share = self.config.client_share
        if share < 1.0 and len(weights) > 1:  # no client's weighted evidence above ``share`` of a cell's
            held = w * sums[:, 1]
            others = held.sum(axis=0, keepdims=True) - held
            cap = np.where(others > 0, share / (1.0 - share) * others / np.maximum(sums[:, 1], 1e-9), np.inf)
            w = np.minimum(w, cap)
        right, count, expected = (w[:, None] * sums).sum(axis=0)
        post.right[:], post.count[:], self.expected[:] = right, count, expected
        # the cell's prior mean: the router's mean P on what was graded there, the start counting as one answer
        post.prior_mean[:] = np.clip((self.start + expected) / (1.0 + count), 0.005, 0.995)
        return weights

    def reset(self, m: int) -> None:
        """Forget every outcome of model m (the per-model reset)."""
        post = self.posterior
        self._shift = None
        post.right[m], post.count[m], self.expected[m] = 0.0, 0.0, 0.0
        post.prior_mean[m] = self.start[m]
        for sums in self.clients.values():
            sums[:, m] = 0.0

    def remapped(self, names, profiles: np.ndarray, *, keep=None) -> "Learner":
        """This learner over another pool of the same query groups (profiles (M', K)): the models of ``keep``
        (default: every model in both) carry their evidence over, the others start from their profiles."""
        out = Learner.start_from(names, profiles, self.config)
        old = {n: i for i, n in enumerate(self.names)}
        keep = set(self.names) if keep is None else set(keep)
        pairs = [(j, old[n]) for j, n in enumerate(out.names) if n in old and n in keep]
        if pairs:
            new_rows, old_rows = map(list, zip(*pairs))
            for client, sums in self.clients.items():  # each client's own sums carry over; the cells are recombined
                mine = out.clients[client] = np.zeros((3, *out.posterior.count.shape))
                mine[:, new_rows] = sums[:, old_rows]
            out._combine()
        return out

    def state_dict(self) -> dict:
        """Plain data (lists and floats) that :meth:`from_state` reads back: what survives a restart."""
        config = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self.config).items()}
        return {
            "names": list(self.names),
            "config": config,
            "start": self.start.tolist(),
            "prior_var": self.posterior.prior_var.tolist(),
            "clients": {c: v.tolist() for c, v in self.clients.items()},
        }

    @classmethod
    def from_state(cls, state: dict) -> "Learner":
        config = {
            k: (math.inf if k in ("half_life", "client_z") and v is None else v) for k, v in state["config"].items()
        }
        learner = cls.start_from(
            state["names"],
            np.asarray(state["start"]),
            LearningConfig(**config),
            prior_var=np.asarray(state["prior_var"]) if "prior_var" in state else None,
        )
        if "right" in state:  # a state written before the per-client sums: its evidence as one anonymous client's
            learner.clients = {"": np.stack([np.asarray(state[k], np.float64) for k in ("right", "count", "expected")])}
        else:
            learner.clients = {c: np.asarray(v, np.float64) for c, v in state.get("clients", {}).items()}
        learner._combine()
        return learner


__all__ = ["ExplorationBudget", "Learner", "LearningConfig"]
