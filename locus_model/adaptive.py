"""Which questions to ask a new model next, and when its estimates are narrow enough to stop (issue 56, item 3).

What the user asks for is the model's accuracy on each benchmark (``estimates.Capability``: an estimate with a 90%
interval). The adaptive choice asks where those intervals narrow most:

1. **Which benchmark:** the one whose interval is widest now (its variance V_b = (width / (2 z))^2, z the normal
   quantile of the interval's level).
2. **Which question in it:** the one whose answer is expected to narrow that benchmark's estimate most. With S
   posterior draws p_sq of P(correct) (the model's embedding drawn from its posterior), the accuracy of benchmark b
   in draw s is A_sb = (the observed answers' sum + sum over b's unasked queries of p_sq) / N_b. An answer y_q is
   Bernoulli(p_q) with p_q uncertain: Var(y_q) = pbar_q (1 - pbar_q), and

       Cov(y_q, A_b) = Cov_s(p_q, A_b) + [q in b] * mean_s p_q (1 - p_q) / N_b

   (the first term: what the answer says of the model, through the embedding; the second: the answer then counts as
   itself, its own binomial variance leaves the estimate). The linear (Bayes-linear, Gaussian) update after seeing
   y_q narrows V_b by G_qb = Cov(y_q, A_b)^2 / Var(y_q); the question with the largest G_qb is asked. A question of
   another benchmark is asked when it tells more about b than b's own (the draws correlate benchmarks).
3. **A batch of k:** greedily, k times: the widest benchmark by V (after the earlier picks), its best question, then
   V <- max(V - G_q, 0) for every benchmark (the picks of one batch are not discounted for each other: a batch is
   small, and the next round re-estimates from the answers).

``random`` is one seeded permutation of the questions (the same state gives the same questions: a resumed
onboarding asks what it would have asked). ``stop_reached`` is the stopping rule: every interval narrower than
``until`` (points). Measured against random: bench/README.md, "Adaptive onboarding".
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Sequence

import numpy as np

from locus_model.benchmark_bayes import LowRankPrior
from locus_model.estimates import (LEVEL, Capability, Posterior, capability_estimates, encoder_spread,
                                   refine_embeddings)
from locus_model.infer import EvaluationSet, predict_proba

CHOICES = ("random", "adaptive")
DEFAULT_CHOICE = "random"  # adaptive did not beat random in the bench (bench/README.md, "Adaptive onboarding")
_EPS = 1e-9


def random_order(n_questions: int, asked: np.ndarray, skip: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """The next ``k`` of ``n_questions`` in one seeded random order, the asked and the ``skip``ped ones left out."""
    order = np.random.default_rng(seed).permutation(n_questions)
    left = np.ones(n_questions, dtype=bool)
    left[np.asarray(asked, dtype=np.int64)] = False
    left[np.asarray(skip, dtype=np.int64)] = False
    return order[left[order]][:k]


def answer_gain(proba_draws: np.ndarray, seen: np.ndarray, codes: np.ndarray, K: int) -> np.ndarray:  # (Q, K)
    """G_qb (module docstring, step 2): how much an answer to query q is expected to shrink the variance of the
    accuracy estimate of benchmark b. proba_draws (S, Q): posterior draws of P(correct) on the pool's Q queries;
    seen (Q,): the queries already answered (gain 0); codes (Q,): each query's benchmark in 0..K-1."""
    p = np.asarray(proba_draws, dtype=np.float64)
    S, Q = p.shape
    codes = np.asarray(codes, dtype=np.int64)
    size = np.bincount(codes, minlength=K).astype(np.float64)
    onehot = np.zeros((Q, K))
    onehot[np.arange(Q), codes] = 1.0
    unseen = ~np.asarray(seen, dtype=bool)
    acc = (p * unseen) @ onehot / np.maximum(size, 1)  # (S, K): the part of A_b that varies between draws
    cov = (p - p.mean(axis=0)).T @ (acc - acc.mean(axis=0)) / max(S - 1, 1)  # (Q, K)
    cov[np.arange(Q), codes] += (p * (1 - p)).mean(axis=0) / np.maximum(size[codes], 1)
    mean = p.mean(axis=0)
    gain = cov**2 / np.maximum(mean * (1 - mean), _EPS)[:, None]
    gain[~unseen] = 0.0
    return gain


def half_width_z(level: float = LEVEL) -> float:
    """Standard deviations in half an interval of that level (1.645 at 90%)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


def choose_adaptive(gain: np.ndarray, widths: np.ndarray, candidates: np.ndarray, k: int, *,
                    level: float = LEVEL, codes: np.ndarray | None = None,
                    rank: np.ndarray | None = None) -> np.ndarray:
    """The next ``k`` questions (indices into gain's rows), by module docstring step 3: gain (Q, K) from
    ``answer_gain``, widths (K,) the intervals' widths now, candidates (Q,) bool: the questions one may ask. Ties go to
    the lower index (deterministic). Fewer than k when fewer candidates are left. With ``codes`` (Q,) and ``rank``
    (Q,) (a random order's positions): the widest benchmark's first question in that order instead of its most
    informative one (a trial: only the allocation between benchmarks adapts)."""
    var = (np.asarray(widths, dtype=np.float64) / (2 * half_width_z(level))) ** 2
    left = np.asarray(candidates, dtype=bool).copy()
    picks: list[int] = []
    while len(picks) < k and left.any():
        if rank is None:
            useful = (gain[left] > 0).any(axis=0)  # benchmarks some question left can still narrow
        else:
            useful = np.bincount(codes[left], minlength=gain.shape[1]) > 0
        order = [b for b in np.argsort(-var, kind="stable") if useful[b]]
        if not order:  # nothing narrows anything: the lowest candidates, in order
            picks += np.flatnonzero(left)[: k - len(picks)].tolist()
            break
        if rank is None:
            q = int(np.argmax(np.where(left, gain[:, order[0]], -np.inf)))
        else:
            q = int(np.argmin(np.where(left & (codes == order[0]), rank, np.inf)))
        picks.append(q)
        left[q] = False
        var = np.maximum(var - gain[q], 0.0)
    return np.asarray(picks, dtype=np.int64)


def estimate_newcomer(model, encodings: np.ndarray, benchmarks: np.ndarray, evaluation_set: EvaluationSet,
                      training_sets: Sequence[EvaluationSet], *, pool_scores: np.ndarray | None = None,
                      pool_prior: LowRankPrior | None = None, samples: int = 64,
                      seed: int = 0) -> tuple[Posterior, Capability]:
    """One new model's posterior embedding and capability estimates over the pool's queries (encodings, benchmarks)
    from its answers (evaluation_set: query indices, scores), the prior's scale the encoder's error at this set size
    on the ``training_sets`` (estimates.encoder_spread). With the pool's low-rank prior (``pool_prior``, fitted once
    for many models; else fitted here from the pool's answers pool_scores (P, Q), NaN = not asked) the estimates are
    its LowRankPrior.capability (benchmark_bayes; measured best: docs/estimates.md); without either, the refined
    embedding's."""
    if pool_prior is not None and not np.array_equal(pool_prior.benchmarks, np.asarray(benchmarks)):
        raise ValueError(f"the pool's prior was fitted on another query set ({len(pool_prior.benchmarks)} queries) "
                         f"than these {len(benchmarks)}. How to fix: fit the LowRankPrior on the pool's answers over "
                         "the same queries, in the same order.")
    scale = encoder_spread(model, encodings, training_sets, len(evaluation_set[0]), seed=seed)
    posterior = refine_embeddings(model, encodings, [evaluation_set], scale)
    if pool_prior is None and pool_scores is not None:
        pool_prior = LowRankPrior.fit(pool_scores, benchmarks, seed=seed)
    if pool_prior is not None:
        return posterior, pool_prior.capability([evaluation_set], samples=samples, seed=seed)
    return posterior, capability_estimates(model, encodings, benchmarks, posterior, [evaluation_set], samples=samples,
                                           seed=seed)


def next_adaptive(model, encodings: np.ndarray, benchmarks: np.ndarray, evaluation_set: EvaluationSet,
                  posterior: Posterior, capability: Capability, candidates: np.ndarray, k: int, *,
                  samples: int = 64, seed: int = 0, within: str = "gain") -> np.ndarray:
    """The adaptive choice of the next ``k`` of the pool's queries (indices into encodings) among ``candidates``
    (Q,) bool, for the model of ``posterior`` / ``capability`` (row 0: ``estimate_newcomer``'s). ``within``: gain
    (the module docstring's rule) or random (the widest benchmark's next question in a seeded random order)."""
    z = posterior.samples(samples, seed=seed + 1)[0]  # (S, d)
    proba = predict_proba(model, z, np.asarray(encodings, dtype=np.float32))  # (S, Q)
    names, codes = np.unique(np.asarray(benchmarks).astype(str), return_inverse=True)
    seen = np.zeros(len(codes), dtype=bool)
    seen[np.asarray(evaluation_set[0], dtype=np.int64)] = True
    gain = answer_gain(proba, seen, codes, len(names))
    shown = dict(zip(capability.benchmarks, capability.hi[0] - capability.lo[0]))
    widths = np.array([shown.get(b, 0.0) for b in names])
    rank = np.argsort(np.random.default_rng(seed).permutation(len(codes))) if within == "random" else None
    return choose_adaptive(gain, widths, np.asarray(candidates, dtype=bool) & ~seen, k, codes=codes, rank=rank)


def stop_reached(capability: Capability, until: float | None, row: int = 0) -> bool:
    """The stopping rule: every benchmark's interval narrower than ``until`` points (None: never)."""
    return until is not None and bool(((capability.hi[row] - capability.lo[row]) * 100 < until).all())


def widest(capability: Capability, row: int = 0) -> tuple[str, float]:
    """(the benchmark with the widest interval, its width in points)."""
    width = (capability.hi[row] - capability.lo[row]) * 100
    b = int(np.argmax(width))
    return capability.benchmarks[b], float(width[b])


__all__ = ["CHOICES", "DEFAULT_CHOICE", "random_order", "answer_gain", "half_width_z", "choose_adaptive",
           "estimate_newcomer", "next_adaptive", "stop_reached", "widest"]
