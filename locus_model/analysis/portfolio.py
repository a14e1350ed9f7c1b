"""Portfolio selection from model embeddings: which few models to keep serving.

Paper (arXiv 2601.21082): a 15-model k-center portfolio matches the routing accuracy of all 112 EmbedLLM models;
coverage-greedy under a parameter budget gets near full accuracy with ~150B of the pool's 1,930B parameters.

Selectors (all deterministic, ties broken by the lowest model index):
- k_center: greedy farthest-point (min over portfolios of the max distance to the nearest member; 2-approximate).
- k_medoids: PAM (greedy BUILD, then best-improvement SWAP) minimising the mean distance to the nearest member.
- coverage_greedy: facility-location coverage gain per billion parameters, under a total-parameter budget.
A portfolio is evaluated by routing among its members only, with the correctness predictor's probabilities
(portfolio_curves.portfolio_curve).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from locus_model.analysis._common import check_embeddings, check_metric, pairwise_distances

# ----------------------------------------------------------------------------- selectors


def _argmin(x: np.ndarray) -> int:
    """Lowest index whose value is within float rounding (1e-9 relative) of the minimum: ties are stable."""
    m = np.min(x)
    return int(np.flatnonzero(x <= m + 1e-9 * max(1.0, abs(m)))[0])


def _argmax(x: np.ndarray) -> int:
    return _argmin(-x)


def _first_medoid(d: np.ndarray) -> int:
    return _argmin(d.sum(axis=1))


ROW_BLOCK = 1024  # rows of distances computed at a time where only rows are needed (k_center: O(M) memory)


def _distance_row_sums(z: np.ndarray, metric: str) -> np.ndarray:
    """(M,) total distance of each model to all others, ROW_BLOCK rows at a time (the same values as
    pairwise_distances(z).sum(axis=1), without the (M, M) matrix)."""
    return np.concatenate(
        [pairwise_distances(z[i : i + ROW_BLOCK], z, metric=metric).sum(axis=1) for i in range(0, len(z), ROW_BLOCK)]
    )


def k_center(embeddings: np.ndarray, k: int, *, metric: str = "euclidean") -> list[int]:
    """Greedy farthest-point k-center: indices of k models, in the order chosen (prefixes are k'-portfolios).

    Start: the medoid (the model with the smallest total distance to all others), so the result does not
    depend on model order or a seed. Then repeatedly add the model farthest from its nearest chosen model.
    Euclidean by default: the 2-approximation guarantee needs a metric (cosine distance is not one).
    Cost: O(M^2 d) time, O(M) memory: distances are computed one row (one chosen model) at a time.
    """
    z = check_embeddings(embeddings, where="k_center")
    check_metric(metric, where="k_center")
    k = check_k(k, len(z), where="k_center")
    chosen = [_argmin(_distance_row_sums(z, metric))]

    def row(i: int) -> np.ndarray:  # (M,) distances of model i to all
        return pairwise_distances(z[i : i + 1], z, metric=metric)[0]

    nearest = row(chosen[0])  # (M,) distance to the nearest chosen model
    while len(chosen) < k:
        nearest[chosen] = -1.0  # never re-pick (matters when points coincide)
        nxt = _argmax(nearest)
        chosen.append(nxt)
        nearest = np.minimum(nearest, row(nxt))
    return chosen


def k_medoids(embeddings: np.ndarray, k: int, *, metric: str = "euclidean", max_iter: int = 100) -> list[int]:
    """PAM k-medoids: indices of k models (sorted) minimising the summed distance to the nearest medoid.

    BUILD: start at the medoid, then add the model that lowers the total cost most. SWAP: apply the best
    improving (medoid, non-medoid) exchange until none improves (or max_iter swaps). Fully deterministic
    (ties: the lowest medoid position, then the lowest candidate index, within 1e-9 relative).
    Memory: O(M^2), said here as the rule asks: the (M, M) distance matrix and two (M, M) temporaries per
    swap (32 MB each at M = 2,001). Time: the cost of every (medoid, candidate) exchange at once per swap,
    as in FastPAM1 (Schubert & Rousseeuw 2019): O(M^2) array work and one (M, M) x (M, k) product, no loop
    over medoids.
    """
    z = check_embeddings(embeddings, where="k_medoids")
    check_metric(metric, where="k_medoids")
    k = check_k(k, len(z), where="k_medoids")
    d = pairwise_distances(z, metric=metric)  # (M, M)
    return pam_swap(d, pam_build(d, k), max_iter=max_iter)


def pam_build(d: np.ndarray, k: int) -> list[int]:
    """PAM's greedy BUILD on an (M, M) distance matrix: the medoid, then the model lowering the total cost most
    (the k-prefix of BUILD to k' > k is BUILD to k, so one run serves a whole curve)."""
    chosen = [_first_medoid(d)]
    nearest = d[chosen[0]].copy()
    while len(chosen) < k:
        cost = np.minimum(nearest[None, :], d).sum(axis=1)  # (M,) total cost if each candidate were added
        cost[chosen] = np.inf
        nxt = _argmin(cost)
        chosen.append(nxt)
        nearest = np.minimum(nearest, d[nxt])
    return chosen


def pam_swap(d: np.ndarray, start: Sequence[int], *, max_iter: int = 100) -> list[int]:
    """PAM's SWAP from the medoids `start` (sorted result)."""
    m, k = len(d), len(start)
    chosen = list(start)
    current = d[chosen].min(axis=0).sum()
    for _ in range(max_iter):
        dm = d[chosen]  # (k, M)
        order = np.argsort(dm, axis=0, kind="stable")
        first = order[0]  # (M,) position of each model's nearest medoid
        d1 = dm[first, np.arange(m)]  # (M,) distance to it
        d2 = dm[order[1], np.arange(m)] if k > 1 else np.full(m, np.inf)  # (M,) to the second nearest
        near1 = np.minimum(d1[None, :], d)  # (M cand, M) with candidate h added
        # removing medoid p moves the models it served from d1 to d2: cost(h, p) = sum_o min(without_p(o), d(h, o))
        fix = (np.minimum(d2[None, :], d) - near1) @ np.eye(k)[first]  # (M, k)
        cost = near1.sum(axis=1)[:, None] + fix  # (M, k) cost after swapping chosen[p] for h
        cost[chosen] = np.inf
        # each medoid's best candidate, its cost summed again directly (as one sum over models) so that
        # exchanges of equal cost compare as equal and the first medoid position wins, whatever the rounding above
        best_cost = current - 1e-12 * max(current, 1.0)
        best_pos: int | None = None
        best_h: int | None = None
        for pos in range(k):
            h = _argmin(cost[:, pos])
            if not np.isfinite(cost[h, pos]):
                continue
            others = np.delete(dm, pos, axis=0)
            without = others.min(axis=0) if len(others) else np.full(m, np.inf)  # (M,)
            exact = np.minimum(without, d[h]).sum()
            if exact < best_cost:
                best_cost, best_pos, best_h = exact, pos, h
        if best_pos is None or best_h is None:  # set together: no exchange lowers the cost
            break
        chosen[best_pos] = best_h
        current = best_cost
    return sorted(chosen)


def coverage_similarity(embeddings: np.ndarray, *, bandwidth: float | None = None) -> np.ndarray:
    """(M, M) similarity s(i, j) = exp(-|z_i - z_j|^2 / (2 h^2)), h = median pairwise distance by default."""
    z = check_embeddings(embeddings, where="coverage_similarity")
    d = pairwise_distances(z, metric="euclidean")
    if bandwidth is None:
        off = d[np.triu_indices(len(z), k=1)]
        bandwidth = float(np.median(off)) if len(off) and np.median(off) > 0 else 1.0
    if not bandwidth > 0:
        raise ValueError(
            f"coverage_similarity: bandwidth must be > 0, got {bandwidth}. "
            "How to fix: pass a positive bandwidth or None for the median distance."
        )
    return np.exp(-(d**2) / (2.0 * bandwidth**2))


def coverage(similarity: np.ndarray, chosen: Sequence[int]) -> float:
    """Facility-location coverage of a portfolio, in [0, 1]: mean over all models of max_{j in S} s(i, j)."""
    if len(chosen) == 0:
        return 0.0
    return float(similarity[:, list(chosen)].max(axis=1).mean())


def coverage_greedy(
    embeddings: np.ndarray, params_b: np.ndarray, budget_b: float, *, bandwidth: float | None = None
) -> list[int]:
    """Greedy coverage per parameter under a total-parameter budget: indices of the models, in the order chosen.

    Coverage F(S) = mean_i max_{j in S} s(i, j) with the Gaussian similarity of `coverage_similarity`
    (monotone submodular: each model is "served" by its most similar portfolio member). Each step adds the
    affordable model with the largest gain F(S + j) - F(S) per billion parameters; it stops when no
    affordable model adds coverage. As in cost-benefit greedy (Khuller et al. 1999), the answer is the better
    of that set and the single affordable model with the highest coverage. Models with unknown (NaN)
    parameter counts cannot be budgeted and are never chosen.
    Lazy evaluation (Minoux 1978): a model's gain only shrinks as the portfolio grows, so each step recomputes
    the gains of the models whose last ratio could still be the best, in batches, and picks the same model as
    recomputing every gain would (ties: lowest index). Memory: O(M^2), said here as the rule asks: the (M, M)
    similarity (32 MB at M = 2,001) and a (batch, M) temporary.
    """
    z = check_embeddings(embeddings, where="coverage_greedy")
    p = np.asarray(params_b, dtype=np.float64)
    if p.shape != (len(z),):
        raise ValueError(
            f"coverage_greedy: params_b has shape {p.shape}, expected ({len(z)},). "
            "How to fix: pass one parameter count (billions) per model, e.g. params_for_models(names)."
        )
    if np.any(p[~np.isnan(p)] <= 0):
        raise ValueError(
            f"coverage_greedy: parameter counts must be > 0, got {p[p <= 0][:5].tolist()}. "
            "How to fix: use NaN for unknown sizes, never 0."
        )
    s = coverage_similarity(z, bandwidth=bandwidth)  # (M, M), symmetric: row j = column j
    affordable = ~np.isnan(p) & (p <= budget_b)
    cost = np.nan_to_num(p, nan=np.inf)
    chosen: list[int] = []
    best_cover = np.zeros(len(z))  # (M,) max similarity to the portfolio so far
    spent = 0.0
    upper = np.where(affordable, np.inf, -np.inf)  # (M,) each model's last gain per billion (an upper bound)

    def ratios(js: np.ndarray) -> np.ndarray:  # gain per billion of adding each of js, now
        gain = np.maximum(s[js], best_cover[None, :]).mean(axis=1) - best_cover.mean()  # (len(js),) row sums
        return np.where(gain > 1e-12, gain / cost[js], -np.inf)

    while True:
        cand = np.flatnonzero((upper > -np.inf) & (spent + cost <= budget_b + 1e-9))
        if not len(cand):
            break
        cand = cand[np.lexsort((cand, -upper[cand]))]  # highest bound first
        best, done, batch = -np.inf, 0, 64
        while done < len(cand):
            js = cand[done : done + batch]
            upper[js] = ratios(js)
            best = max(best, float(upper[js].max()))
            done, batch = done + len(js), 2 * batch
            # the rest cannot beat `best` (slack: their bounds are exact up to float rounding)
            if done < len(cand) and upper[cand[done]] < best - 1e-12 - 1e-9 * abs(best):
                break
        if best == -np.inf:
            break
        j = int(cand[:done][upper[cand[:done]] == best].min())
        chosen.append(j)
        spent += p[j]
        upper[j] = -np.inf
        best_cover = np.maximum(best_cover, s[j])
    if affordable.any():
        single = int(np.argmax(np.where(affordable, s.mean(axis=1), -np.inf)))
        if coverage(s, [single]) > coverage(s, chosen) + 1e-12:
            return [single]
    return chosen


def check_k(k: int, m: int, *, where: str) -> int:
    if not 1 <= int(k) <= m:
        raise ValueError(
            f"{where}: k must be between 1 and the pool size {m}, got {k}. How to fix: choose a smaller portfolio size."
        )
    return int(k)
