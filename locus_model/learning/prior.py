"""What the estimator knows of each (model, query group) cell before any outcome: the learner's prior.

A model's group profile is the router's calibrated P(correct) on the group, read from its evaluations; how far it may
be off on a team's traffic is the router's own error (``LearningConfig.prior_var``, measured on the replay) plus the
binomial width of a profile read from the answers the model has in the group (its evaluations x the group's share):
wide for a model onboarded from 32 answers, narrow from 512, the router's error alone for a trained model. A model
with no evaluations (listed in the models config, not in the pool) starts at the pool's prior: the mean of the
evaluated models' profiles, as wide as their spread. One rule, read by the gateway (a snapshot's rows) and the
replay (its streams), and :func:`embed_graded`, the one forward pass that turns a model's graded answers into its
pool row, by the pipeline's relearning (traffic_model_embedding) and the replay.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

EMBED_EVERY = 50  # new graded answers of a model after which it is embedded again (the traffic sensor's condition)


def prior_variance(
    profiles: np.ndarray, n_evaluations: np.ndarray, shares: np.ndarray, *, router_var: float
) -> np.ndarray:
    """(M, G) each cell's prior variance: ``router_var`` + mu (1 - mu) / (1 + n_m x share_g) for a model with n_m
    evaluations; a model with none: the spread of the evaluated models' profiles per group plus their mean variance
    (a model drawn from the pool, known as well as they are). Never wider than a Beta of strength 1 allows
    (mu (1 - mu) / 2)."""
    mu = np.clip(np.asarray(profiles, np.float64), 0.005, 0.995)
    n = np.asarray(n_evaluations, np.float64).reshape(-1)
    shares = np.asarray(shares, np.float64).reshape(-1)
    if mu.shape != (len(n), len(shares)):
        raise ValueError(
            f"prior_variance: profiles {mu.shape} must be (models, groups) = ({len(n)}, {len(shares)}): one "
            "evaluation count per model and one share per group"
        )
    var = router_var + mu * (1 - mu) / (1.0 + n[:, None] * shares[None, :])
    none, known = n <= 0, n > 0
    if none.any():  # how far a model drawn from the pool is from the pool's mean, and how well each is known
        spread = mu[known].var(axis=0) + var[known].mean(axis=0) if known.sum() >= 2 else np.full(mu.shape[1], 0.25)
        var[none] = spread[None, :]
    return np.minimum(var, mu * (1 - mu) / 2.0)


def pool_prior(profiles: np.ndarray, embeddings: np.ndarray, evaluated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(embedding (d,), group profile (G,)) of a model with no evaluations: the evaluated models' means."""
    known = np.asarray(evaluated, bool)
    return np.asarray(embeddings)[known].mean(axis=0), np.asarray(profiles)[known].mean(axis=0)


class PoolRows(Protocol):
    """What :func:`embed_graded` needs of a trained router (locus_model.router.Router has it)."""

    def pool_rows(
        self, encodings: np.ndarray, scores: np.ndarray, labels: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...


def embed_graded(
    router: PoolRows, encodings: np.ndarray, scores: np.ndarray, labels: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(embedding (d,), group profile (G,)) of one model from its graded answers: the scores (Q,) in [0, 1] (NaN:
    not graded) of queries with these encodings (Q, D) and benchmark labels (Q,) where known. One forward pass of
    the trained ``router`` (Router.pool_rows), no fit."""
    scores = np.asarray(scores, np.float64).reshape(1, -1)
    if scores.shape[1] != len(encodings):
        raise ValueError(f"embed_graded: {scores.shape[1]} scores for {len(encodings)} query encodings")
    if not np.isfinite(scores).any():
        raise ValueError("embed_graded: the model has no graded answer: grade some of its answers first")
    embeddings, profiles = router.pool_rows(np.asarray(encodings), scores, labels)
    return embeddings[0], profiles[0]


__all__ = ["EMBED_EVERY", "embed_graded", "pool_prior", "prior_variance"]
