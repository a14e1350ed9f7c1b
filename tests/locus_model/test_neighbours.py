"""Exact nearest neighbours in blocks: the same indices (ties: lower index) and distances as the full distance
matrix."""

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from locus_model.neighbours import nearest_neighbours


def _full(z: np.ndarray, metric: str) -> np.ndarray:
    full = np.nan_to_num(cdist(z.astype(np.float64), z.astype(np.float64), metric=metric), nan=1.0)
    np.fill_diagonal(full, np.inf)
    return full


def _pools():
    rng = np.random.default_rng(0)
    spread = rng.normal(size=(300, 16)).astype(np.float32)
    spread[5] = spread[9] = spread[7]  # exact duplicates
    spread[11] = 0  # a zero vector (cosine: orthogonal to all)
    grid = rng.integers(-2, 3, size=(200, 3)).astype(np.float32)  # many exact ties at every distance
    near = (1 + 1e-6 * rng.normal(size=(120, 32))).astype(np.float32)  # distances far below the rounding of ||b||^2
    return {"spread": spread, "grid": grid, "near": near}


# (cosine distances of 1e-12 between the "near" rows are below what 1 - cos in float64 can order: scipy's and ours
# differ there in the last bits, so the near pool is checked in Euclidean distance only)
@pytest.mark.parametrize(
    ("pool", "metric"),
    [("spread", "euclidean"), ("spread", "cosine"), ("grid", "euclidean"), ("grid", "cosine"), ("near", "euclidean")],
)
def test_blockwise_neighbours_equal_the_full_distance_matrix(pool, metric):
    z = _pools()[pool]
    full = _full(z, metric)
    expected = np.argsort(full, axis=1, kind="stable")[:, :10]
    idx, dist = nearest_neighbours(z, 10, metric=metric, block_rows=37)
    np.testing.assert_array_equal(idx, expected)
    np.testing.assert_allclose(dist, np.take_along_axis(full, expected, axis=1), rtol=1e-12, atol=1e-12)


def test_neighbours_of_some_rows_among_some_candidates():
    z = _pools()["grid"]
    among = np.arange(0, 200, 3)
    idx, dist = nearest_neighbours(z, 4, rows=np.array([3, 4]), among=among)
    full = _full(z, "euclidean")
    outside = np.setdiff1d(np.arange(200), among)
    full[:, outside] = np.inf
    np.testing.assert_array_equal(idx, np.argsort(full[[3, 4]], axis=1, kind="stable")[:, :4])
    assert 3 not in idx[0] and set(idx.ravel()) <= set(among)


def test_asking_for_more_neighbours_than_candidates_says_so():
    z = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError, match="k=3 neighbours asked, but a row has only 2 other candidates"):
        nearest_neighbours(z, 3, among=[0, 1, 2])


def test_every_bound_on_the_kth_distance_gives_the_same_neighbours(monkeypatch):
    """The sampled bound, the whole row's k-th (a sample without k candidates, or too loose a bound) agree."""
    import locus_model.neighbours as nb

    z = _pools()["spread"]
    expected = nearest_neighbours(z, 5)
    few = np.array([2, 40, 77, 150, 299, 3])  # every 8th column holds fewer than 5 of them
    idx, _ = nearest_neighbours(z, 5, among=few)
    full = _full(z, "euclidean")
    full[:, np.setdiff1d(np.arange(len(z)), few)] = np.inf
    np.testing.assert_array_equal(idx, np.argsort(full, axis=1, kind="stable")[:, :5])
    monkeypatch.setattr(nb, "SCREEN_SURPLUS", 0)  # every sampled bound counts as too loose
    for got, want in zip(nearest_neighbours(z, 5), expected):
        np.testing.assert_array_equal(got, want)
