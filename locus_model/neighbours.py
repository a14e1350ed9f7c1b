"""Exact k nearest neighbours in model-embedding space, in blocks: the atlas's neighbour lists, routing's fallback
chains and the 100,000-model figures of bench/bench_scale_pool.py.

Each block of rows is screened against the whole pool by one float32 product (a BLAS call), with a bound on its
rounding; only the few candidates the bound cannot rule out are measured exactly, in float64, by ``paired_distances``
(cosine = 1 - cos, zero vectors orthogonal to all, as the analyses measure them). The
result is exact (ties: lower index) and memory stays at ``block_rows x M`` distances, never the (M, M) matrix.
"""

from __future__ import annotations

import numpy as np

NEIGHBOUR_TILE = 2**24  # distances held at a time (64 MiB of float32): the block's rows are NEIGHBOUR_TILE // M
EPS32 = float(np.finfo(np.float32).eps)
SCREEN_STRIDE = 8  # the first bound on a row's k-th distance comes from every 8th column: about 8 k candidates
SCREEN_SURPLUS = 64  # more candidates than 64 k a row (a pool ordered by distance): the row's exact k-th instead


def paired_distances(a: np.ndarray, b: np.ndarray, *, metric: str = "euclidean") -> np.ndarray:
    """(P,) distance between a[i] and b[i] for every row i, in float64 (cosine = 1 - cos, zero vectors orthogonal
    to all, as analysis pairwise_distances): O(P d), for a list of pairs without the (M, M) matrix."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if metric == "euclidean":
        return np.sqrt(((a - b) ** 2).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return np.maximum(1.0 - np.nan_to_num(cos, nan=0.0), 0.0)


def _kth_upper_bound(s: np.ndarray, k: int) -> np.ndarray:  # (b, M) -> (b,) float64
    """Per row, a value at least the k-th smallest: the k-th smallest of every SCREEN_STRIDE-th column (a partition
    of 1 / SCREEN_STRIDE of the row), or of the whole row where that sample holds fewer than k finite values."""
    sample = np.partition(s[:, ::SCREEN_STRIDE], k - 1, axis=1)[:, k - 1] if s.shape[1] >= SCREEN_STRIDE * k else None
    if sample is None or not np.isfinite(sample).all():
        return np.partition(s, k - 1, axis=1)[:, k - 1].astype(np.float64)
    return sample.astype(np.float64)


def nearest_neighbours(
    embeddings: np.ndarray,  # (M, d)
    k: int,
    *,
    rows: np.ndarray | None = None,  # (R,) the rows whose neighbours are wanted; None = every row
    among: np.ndarray | None = None,  # the rows that may be neighbours; None = every row
    metric: str = "euclidean",
    block_rows: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # (R, k) indices into embeddings, (R, k) float64 distances, nearest first
    """The k nearest rows of ``among`` (never the row itself) to each row of ``rows``, exact, nearest first, ties
    broken by the lower index; ``block_rows`` rows at a time (None = NEIGHBOUR_TILE // M)."""
    if metric not in ("euclidean", "cosine"):
        raise ValueError(f"nearest_neighbours: unknown metric {metric!r}. How to fix: use 'euclidean' or 'cosine'.")
    z = np.asarray(embeddings)  # no float64 copy of the pool: only the candidates are measured in float64
    if z.ndim != 2 or not np.issubdtype(z.dtype, np.floating):
        raise ValueError(f"nearest_neighbours: embeddings must be a float (M, d) array, got {z.dtype} {z.shape}.")
    M, d = z.shape
    rows = np.arange(M) if rows is None else np.asarray(rows, dtype=np.int64)
    allowed = np.ones(M, dtype=bool)
    if among is not None:
        allowed[:] = False
        allowed[np.asarray(among, dtype=np.int64)] = True
    eligible = int(allowed.sum()) - allowed[rows].astype(int)  # (R,) candidates of each row
    if k < 1 or (len(rows) and int(eligible.min()) < k):
        raise ValueError(
            f"nearest_neighbours: k={k} neighbours asked, but a row has only "
            f"{int(eligible.min()) if len(rows) else 0} other candidates. How to fix: ask for fewer."
        )
    if metric == "cosine":
        z64 = z.astype(np.float64)
        norms = np.linalg.norm(z64, axis=1, keepdims=True)
        unit = np.divide(z64, norms, out=np.zeros_like(z64), where=norms > 0)
        x, sq = unit.astype(np.float32), None
        tol = np.full(len(rows), (d + 16) * EPS32)  # |unit| <= 1: the float32 product's rounding, and the cast's
    else:
        x = z.astype(np.float32, copy=False)
        sq = np.einsum("ij,ij->i", x, x)  # (M,) float32
        # screening value ||b||^2 - 2 a.b (||a||^2 is the same for the whole row); its float32 rounding, the squared
        # norms' included, is at most about (2 d + 4) u (||a||^2 + ||b||^2) (u = EPS32 / 2): a margin of 2x and more
        tol = (d + 16) * EPS32 * (sq[rows].astype(np.float64) + float(sq.max()))
    block = block_rows or max(1, NEIGHBOUR_TILE // M)
    idx = np.empty((len(rows), k), dtype=np.int64)
    dist = np.empty((len(rows), k))
    for start in range(0, len(rows), block):
        part = rows[start : start + block]
        s = (x[part] * (-1 if sq is None else -2)) @ x.T  # (b, M): -a.b, or -2 a.b (doubling is exact)
        if sq is not None:
            s += sq
        if among is not None:
            s[:, ~allowed] = np.inf
        s[np.arange(len(part)), part] = np.inf  # not itself
        # a candidate can be among the k nearest only if its value, less its rounding, is within the k-th's plus its
        bound = (_kth_upper_bound(s, k) + 2 * tol[start : start + block]).astype(np.float32)
        r, c = np.nonzero(s <= np.nextafter(bound, np.float32(np.inf))[:, None])
        if len(r) > SCREEN_SURPLUS * k * len(part):  # a loose bound (a pool ordered by distance): the exact k-th
            bound = (np.partition(s, k - 1, axis=1)[:, k - 1] + 2 * tol[start : start + block]).astype(np.float32)
            r, c = np.nonzero(s <= np.nextafter(bound, np.float32(np.inf))[:, None])
        # the candidates' own k-th (row-major from nonzero: each row's values are one run) leaves about k of them
        vals = s[r, c]
        by_row = np.lexsort((vals, r))
        kth = vals[by_row][np.searchsorted(r, np.arange(len(part))) + k - 1]  # (b,)
        bound = (kth.astype(np.float64) + 2 * tol[start : start + block]).astype(np.float32)
        keep = vals <= np.nextafter(bound, np.float32(np.inf))[r]
        r, c = r[keep], c[keep]
        exact = paired_distances(z[part[r]], z[c], metric=metric)
        order = np.lexsort((c, exact, r))
        r, c, exact = r[order], c[order], exact[order]
        take = np.searchsorted(r, np.arange(len(part)))[:, None] + np.arange(k)  # each row has >= k candidates
        idx[start : start + block] = c[take]
        dist[start : start + block] = exact[take]
    return idx, dist


__all__ = ["NEIGHBOUR_TILE", "paired_distances", "nearest_neighbours"]
