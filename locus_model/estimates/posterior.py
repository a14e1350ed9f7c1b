"""The posterior of a model's rates, per cell: the one object an estimate, a question choice and an online update read.

A cell is a (model, benchmark) or a (model, query group). Its rate theta (the chance the model answers a query of the
cell right) has a prior from what the pool already says of the model -- a mean mu (the low-rank completion's, the
router's calibrated P(correct)) and how wrong that mean is measured to be, tau^2 -- and the model's own graded answers
(sum of scores r, count c) are its likelihood. The prior is a robust mixture:

    theta ~ (1 - eps) Beta(mu s, (1 - mu) s) + eps Beta(1, 1),     s = mu (1 - mu) / tau^2 - 1

(with ``centred``, the second part Beta(2 mu, 2 (1 - mu)) instead: as wide as a uniform but centred on the same
mean, so that before any answer the posterior mean is mu and a cell nobody answered is not pulled toward 0.5 -- the
estimates' choice), so that when the answers contradict the pool's view (128 of 128 right where the prior says 0.5)
the flat part takes over and the posterior follows the answers instead of excluding them; where they agree the
informed part carries almost all the weight. The posterior is the same mixture with each component updated by
(r, c - r) and the weights multiplied by each component's marginal likelihood B(a + r, b + c - r) / B(a, b)
(fractional scores included). Both depend on the answers only through (r, c): one more graded answer is two
additions (``observe``, weighted: ``weight`` answers), microseconds; ``assign`` sets a cell's sums to a combination
of others' (the online learner's clients).

``forget`` (< 1) discounts the evidence already held before each new answer (exponential forgetting, half-life
log(0.5) / log(forget) answers): an online learner that must notice a model that changed uses it; estimates of a
fixed model keep 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats

ROBUST_WEIGHT = 0.05  # eps: the flat component's prior weight
WIDE_STRENGTH = 2.0  # a + b of the flat component: a uniform's
MIN_VAR = 1e-4  # tau^2 floor: a prior is never trusted beyond 1 point of standard deviation
MIN_STRENGTH = 1.0  # a + b of the informed part at least: a prior as wide as Jeffreys' (tau^2 = 0.25: not U-shaped)
_CLIP = 0.005


@dataclass
class CellPosterior:
    """Robust Beta posteriors of M models' rates on K cells; arrays (M, K). Mutable: ``observe`` adds an answer in
    place (the online learner's and the onboarding rounds' update)."""

    prior_mean: np.ndarray  # (M, K) mu
    prior_var: np.ndarray  # (M, K) tau^2, the prior mean's measured error
    right: np.ndarray  # (M, K) r: sum of the graded scores in [0, 1]
    count: np.ndarray  # (M, K) c: graded answers
    robust: float = ROBUST_WEIGHT
    centred: bool = False  # the flat part centred on mu (Beta(2 mu, 2 (1 - mu))) instead of Beta(1, 1)

    @classmethod
    def from_prior(
        cls, mean: np.ndarray, var: np.ndarray | float, *, robust: float = ROBUST_WEIGHT, centred: bool = False
    ) -> "CellPosterior":
        """No answers yet: the prior (mean (M, K), var broadcast to it)."""
        mu = np.clip(np.asarray(mean, np.float64), _CLIP, 1 - _CLIP)
        tau2 = np.maximum(np.broadcast_to(np.asarray(var, np.float64), mu.shape), MIN_VAR).copy()
        if not 0.0 <= robust < 1.0:
            raise ValueError(f"CellPosterior: robust weight {robust!r} must be in [0, 1)")
        return cls(
            prior_mean=mu.copy(),
            prior_var=tau2,
            right=np.zeros_like(mu),
            count=np.zeros_like(mu),
            robust=float(robust),
            centred=bool(centred),
        )

    # ------------------------------------------------------------------------------------------------ the update
    def observe(self, m: int, k: int, score: float, *, forget: float = 1.0, weight: float = 1.0) -> None:
        """One graded answer (score in [0, 1]) of model m on cell k, counted as ``weight`` answers; ``forget`` < 1
        discounts the evidence held."""
        if not (0.0 <= score <= 1.0 and weight >= 0.0 and 0.0 < forget <= 1.0):
            raise ValueError(
                f"CellPosterior.observe: score {score!r} must be in [0, 1], weight {weight!r} >= 0, forget "
                f"{forget!r} in (0, 1]"
            )
        if forget != 1.0:
            self.right[m, k] *= forget
            self.count[m, k] *= forget
        self.right[m, k] += weight * score
        self.count[m, k] += weight

    def assign(self, cells, right, count) -> None:
        """The evidence of the cells ``cells`` (any numpy index) set to a combination of others' (the online
        learner's clients, combined by agreement): sums r <= c, both >= 0."""
        right, count = np.asarray(right, np.float64), np.asarray(count, np.float64)
        if (count < 0).any() or (right < -1e-9).any() or (right > count + 1e-9).any():
            raise ValueError("CellPosterior.assign: the evidence must satisfy 0 <= right <= count")
        self.right[cells] = np.clip(right, 0.0, count)
        self.count[cells] = count

    def observe_many(self, m: np.ndarray, k: np.ndarray, score: np.ndarray) -> None:
        """Many graded answers at once (no forgetting): the same posterior as observing them one by one."""
        np.add.at(self.right, (np.asarray(m), np.asarray(k)), np.asarray(score, np.float64))
        np.add.at(self.count, (np.asarray(m), np.asarray(k)), 1.0)

    def copy(self) -> "CellPosterior":
        return CellPosterior(
            self.prior_mean.copy(),
            self.prior_var.copy(),
            self.right.copy(),
            self.count.copy(),
            self.robust,
            self.centred,
        )

    # ------------------------------------------------------------------------------------------------ reading it
    def components(self, rows=slice(None)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(weights, a, b), each (..., 2): the posterior's two Beta components (informed, flat) of the cells ``rows``
        (any numpy index into the (M, K) arrays)."""
        mu, tau2 = self.prior_mean[rows], self.prior_var[rows]
        r, c = self.right[rows], self.count[rows]
        s = np.maximum(mu * (1 - mu) / tau2 - 1.0, MIN_STRENGTH)
        flat = mu if self.centred else np.full_like(mu, 0.5)
        a0 = np.stack([mu * s, WIDE_STRENGTH * flat], axis=-1)
        b0 = np.stack([(1 - mu) * s, WIDE_STRENGTH * (1 - flat)], axis=-1)
        a, b = a0 + r[..., None], b0 + (c - r)[..., None]
        log_w = np.log([1.0 - self.robust, self.robust]) if self.robust > 0 else np.array([0.0, -np.inf])
        log_w = log_w + special.betaln(a, b) - special.betaln(a0, b0)
        log_w -= log_w.max(axis=-1, keepdims=True)
        w = np.exp(log_w)
        return w / w.sum(axis=-1, keepdims=True), a, b

    def unanswered_mean(self, rows=slice(None)) -> np.ndarray:
        """The posterior mean the cells ``rows`` have with no answers: the mixture's prior mean (the informed part's
        mu, the flat part's 0.5, or mu when ``centred``)."""
        mu = self.prior_mean[rows]
        flat = mu if self.centred else 0.5
        return (1.0 - self.robust) * mu + self.robust * flat

    def mean(self, rows=slice(None)) -> np.ndarray:
        """Posterior mean of the rate of the cells ``rows``."""
        w, a, b = self.components(rows)
        return (w * a / (a + b)).sum(axis=-1)

    def var(self, rows=slice(None)) -> np.ndarray:
        """Posterior variance of the rate of the cells ``rows`` (the mixture's)."""
        return self.moments(rows)[1]

    def moments(self, rows=slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """(posterior mean, posterior variance) of the rate of the cells ``rows``, from one reading of the mixture."""
        w, a, b = self.components(rows)
        m = a / (a + b)
        second = m * m + a * b / ((a + b) ** 2 * (a + b + 1.0))
        mean = (w * m).sum(axis=-1)
        return mean, np.maximum((w * second).sum(axis=-1) - mean**2, 0.0)

    def sample(self, rng: np.random.Generator, rows=slice(None)) -> np.ndarray:
        """One draw of each cell's rate (Thompson sampling): a component by its weight, then its Beta."""
        w, a, b = self.components(rows)
        pick = (rng.random(w.shape[:-1]) < w[..., 1]).astype(np.int64)[..., None]
        return rng.beta(np.take_along_axis(a, pick, -1)[..., 0], np.take_along_axis(b, pick, -1)[..., 0])

    def interval(self, level: float, rows=slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi): the central ``level`` interval of each cell's rate (the mixture's quantiles by bisection)."""
        w, a, b = self.components(rows)
        tail = (1 - level) / 2
        return _mixture_quantile(w, a, b, tail), _mixture_quantile(w, a, b, 1 - tail)


def _mixture_quantile(w: np.ndarray, a: np.ndarray, b: np.ndarray, q: float, iters: int = 40) -> np.ndarray:
    lo, hi = np.zeros(w.shape[:-1]), np.ones(w.shape[:-1])
    for _ in range(iters):  # 2^-40: exact to float precision
        mid = (lo + hi) / 2
        below = (w * stats.beta.cdf(mid[..., None], a, b)).sum(axis=-1) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


__all__ = ["ROBUST_WEIGHT", "MIN_VAR", "CellPosterior"]
