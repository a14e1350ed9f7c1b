"""Which questions to ask a newcomer next, and when its estimates are narrow enough to stop.

What the user asks for is the newcomer's accuracy on each benchmark (``capability.Capability``: an estimate with a
90% interval, from the estimator's benchmark posterior). The adaptive choice asks where those intervals narrow most:

1. **Which benchmark:** the one whose interval is widest now (its variance V_b = (width / (2 z))^2).
2. **Which question:** the one whose answer is expected to narrow that benchmark's estimate most. The estimate's
   prior is the pool's low-rank completion, P_q = mean_q + B_q w (``lowrank.LowRank``), w the newcomer's
   coordinates, known from its answers up to Sigma = v (B_S^T B_S + alpha I)^-1 (the ridge projection's posterior;
   B_S the asked queries' rows, v their mean P (1 - P)). An answer y_q = P_q + noise (variance v_q = P_q (1 - P_q))
   and the accuracy A_b = (answers' sum + sum over b's unasked queries of P) / N_b have

       Cov(y_q, A_b) = B_q Sigma (sum over b's unasked j of B_j) / N_b + [q in b] v_q / N_b

   (the first term: what the answer says of the newcomer through the pool's factors, so a question of another
   benchmark is asked where it tells more; the second: the answer then counts as itself), Var(y_q) = B_q Sigma B_q +
   v_q, and the linear (Bayes-linear) update narrows V_b by G_qb = Cov(y_q, A_b)^2 / Var(y_q) (``answer_gain``,
   from covariances ``factor_covariance``); the question with the largest G_qb is asked -- Fisher information of
   the factor model, weighted toward the interval the user sees.
3. **A batch of k:** greedily, k times: the widest benchmark by V (after the earlier picks), its best question, then
   V <- max(V - G_q, 0) for every benchmark (``choose_adaptive``).

``random`` is one seeded permutation of the questions (the same state gives the same questions: a resumed
onboarding asks what it would have asked). ``stop_reached`` is the stopping rule: every interval narrower than
``until`` (points). Measured against random: bench/README.md, "Adaptive onboarding".
"""

from __future__ import annotations

import numpy as np

from locus_model.estimates.capability import Capability
from locus_model.estimates.coding import LEVEL, z_of

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
    """G_qb from S draws of P(correct) (S, Q) on the pool's Q queries (any posterior that can be sampled): the
    covariances of step 2 estimated from the draws. seen (Q,): the queries already answered (gain 0); codes (Q,):
    each query's benchmark in 0..K-1."""
    p = np.asarray(proba_draws, dtype=np.float64)
    S, Q = p.shape
    codes = np.asarray(codes, dtype=np.int64)
    size = np.maximum(np.bincount(codes, minlength=K).astype(np.float64), 1)
    onehot = np.zeros((Q, K))
    onehot[np.arange(Q), codes] = 1.0
    unseen = ~np.asarray(seen, dtype=bool)
    acc = (p * unseen) @ onehot / size  # (S, K): the part of A_b that varies between draws
    cov = (p - p.mean(axis=0)).T @ (acc - acc.mean(axis=0)) / max(S - 1, 1)  # (Q, K)
    mean = p.mean(axis=0)
    return _gain(cov, mean * (1 - mean), (p * (1 - p)).mean(axis=0), codes, size, unseen)


def factor_gain(
    basis: np.ndarray, proba: np.ndarray, seen: np.ndarray, codes: np.ndarray, K: int, *, alpha: float = 1.0
) -> np.ndarray:  # (Q, K)
    """G_qb (module docstring, step 2) under the low-rank completion: basis (Q, r) its rows B_q, proba (Q,) the
    newcomer's completed P(correct), seen (Q,) the asked queries, codes (Q,) each query's benchmark."""
    B = np.asarray(basis, np.float64)
    p = np.clip(np.asarray(proba, np.float64), 0.005, 0.995)
    seen = np.asarray(seen, dtype=bool)
    codes = np.asarray(codes, dtype=np.int64)
    Q, r = B.shape
    size = np.maximum(np.bincount(codes, minlength=K).astype(np.float64), 1)
    v = p * (1 - p)
    vbar = float(v[seen].mean()) if seen.any() else 0.25
    sigma = vbar * np.linalg.inv(B[seen].T @ B[seen] + alpha * np.eye(r))  # (r, r)
    onehot = np.zeros((Q, K))
    onehot[np.arange(Q), codes] = 1.0
    unseen = ~seen
    loads = (onehot * unseen[:, None]).T @ B / size[:, None]  # (K, r): d A_b / d w
    bs = B @ sigma  # (Q, r)
    cov = bs @ loads.T  # (Q, K)
    return _gain(cov, (bs * B).sum(axis=1) + v, v, codes, size, unseen)


def _gain(
    cov: np.ndarray, var_y: np.ndarray, own: np.ndarray, codes: np.ndarray, size: np.ndarray, unseen: np.ndarray
) -> np.ndarray:
    cov = cov.copy()
    cov[np.arange(len(codes)), codes] += own / size[codes]  # the answer then counts as itself
    gain = cov**2 / np.maximum(var_y, _EPS)[:, None]
    gain[~unseen] = 0.0
    return gain


def choose_adaptive(
    gain: np.ndarray,
    widths: np.ndarray,
    candidates: np.ndarray,
    k: int,
    *,
    level: float = LEVEL,
    codes: np.ndarray | None = None,
    rank: np.ndarray | None = None,
) -> np.ndarray:
    """The next ``k`` questions (indices into gain's rows), by module docstring step 3: gain (Q, K) from
    ``answer_gain``, widths (K,) the intervals' widths now, candidates (Q,) bool: the questions one may ask. Ties go to
    the lower index (deterministic). Fewer than k when fewer candidates are left. With ``codes`` (Q,) and ``rank``
    (Q,) (a random order's positions): the widest benchmark's first question in that order instead of its most
    informative one (a trial: only the allocation between benchmarks adapts)."""
    var = (np.asarray(widths, dtype=np.float64) / (2 * z_of(level))) ** 2
    left = np.asarray(candidates, dtype=bool).copy()
    picks: list[int] = []
    while len(picks) < k and left.any():
        if rank is None:
            useful = (gain[left] > 0).any(axis=0)  # benchmarks some question left can still narrow
        else:
            assert codes is not None  # given with rank (the docstring)
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


def stop_reached(capability: Capability, until: float | None, row: int = 0) -> bool:
    """The stopping rule: every benchmark's interval narrower than ``until`` points (None: never)."""
    return until is not None and bool(((capability.hi[row] - capability.lo[row]) * 100 < until).all())


__all__ = ["CHOICES", "DEFAULT_CHOICE", "random_order", "answer_gain", "factor_gain", "choose_adaptive", "stop_reached"]
