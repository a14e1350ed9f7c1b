"""Which pool models a newcomer answers like: agreement on the questions it shares with each, and the probability of
each being the nearest under the spread of its embedding (the share of posterior draws whose nearest it is)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from locus_model.estimates.embedding import Posterior
from locus_model.infer import EvaluationSet


def answer_agreement(pool_scores: np.ndarray, evaluation_set: EvaluationSet) -> tuple[np.ndarray, np.ndarray]:
    """(share of the questions each pool model shares with the set where both were right or both wrong, NaN where it
    shares none; how many it shares): pool_scores (P, Q), NaN = not asked."""
    idx, s = evaluation_set
    cells = pool_scores[:, np.asarray(idx)]  # (P, n)
    asked = ~np.isnan(cells)
    shared = asked.sum(axis=1)
    same = (asked & (np.abs(np.nan_to_num(cells) - np.asarray(s)) < 0.5)).sum(axis=1)
    return np.where(shared > 0, same / np.maximum(shared, 1), np.nan), shared


def answer_likeness(
    sets: Sequence[EvaluationSet],
    pool_scores: np.ndarray,
    pool_embeddings: np.ndarray,
    posterior: Posterior,
    *,
    samples: int = 64,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Per model, the pool models ranked by how alike they answer, and a probability for each.

    Where the model shares questions with pool models (pool_scores (P, Q), NaN = not asked), the rank is the
    agreement rate on those shared questions, ties broken by embedding distance; the probability of each model being
    the nearest is the share of posterior draws of the embedding whose nearest pool model it is (the embedding's
    neighbours with their probability under the spread). Returns (order (M, P) nearest first, probability (M, P))."""
    pool = np.asarray(pool_embeddings, dtype=np.float64)
    draws = posterior.samples(samples, seed=seed)
    order = np.empty((len(sets), len(pool)), dtype=np.int64)
    prob = np.zeros((len(sets), len(pool)))
    for m, evaluation_set in enumerate(sets):
        dist = np.sqrt(((pool - posterior.mean[m]) ** 2).sum(axis=1))
        agree = np.nan_to_num(answer_agreement(pool_scores, evaluation_set)[0], nan=-1.0)  # none shared: last
        order[m] = np.lexsort((dist, -agree))
        nearest = ((draws[m][:, None, :] - pool[None]) ** 2).sum(axis=2).argmin(axis=1)  # (S,)
        prob[m] = np.bincount(nearest, minlength=len(pool)) / samples
    return order, prob


__all__ = ["answer_agreement", "answer_likeness"]
