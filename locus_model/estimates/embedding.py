"""What a model can do, from any evaluation set: an embedding the question choice does not bias (with its spread),
per-benchmark accuracy estimates with 90% intervals, reference-score estimates, and the models it answers like.

The set encoder's embedding z0 of a model is an amortised guess, trained on random sets. Given the model's observed
answers y_i to queries phi_i, the correctness predictor G defines a likelihood, so the embedding is refined as IRT
estimates ability (issue 56, item 2):

    z* = argmin_z  sum_i BCE(G(z, phi_i), y_i) + 1/2 sum_k ((z_k - z0_k) / s_k)^2

with s the encoder's own error at that set size on the training pool (``encoder_spread``: the RMS difference between
a training model's embedding from n of its evaluations and from all of them). The spread is the Laplace approximation:
cov = H^-1, H = J^T diag(p (1 - p)) J + diag(1 / s^2) (the Gauss-Newton Hessian in d = 128; J = d logit / dz on the
observed queries), and posterior samples z* + chol(cov) eps carry it to every estimate.

Accuracy of a model on benchmark b over all of b's queries in the pool's data (observed answers count as themselves):
    acc_b = (sum_{observed in b} y + sum_{unobserved in b} P(correct)) / N_b,
with an interval from the posterior samples plus the binomial sampling of the unobserved queries. Its spread is the
embedding's, not the predictor's error (it covered 14-28% of 90% intervals); where the pool's answers are at hand the
per-benchmark estimate is benchmark_bayes's empirical Bayes on the low-rank prior (``estimate_capability``'s
``pool_scores``), which the bench measures better and calibrated (docs/estimates.md).

The predictor is reached through two adapter functions, ``_pair_logits`` and ``_all_pair_proba`` (the model's
current API); nothing here trains or changes the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch.func import jacrev, vmap

from locus_model.benchmark_bayes import LEVEL, Capability, observed_counts
from locus_model.infer import EvaluationSet, embed_evaluation_sets, predict_proba

BINOMIAL_DRAWS = 64  # draws of the binomial part for a method without a spread of its own


# ---------------------------------------------------------------------------------------------- predictor adapter
# The only two places that touch the model: re-point them when the router/model API changes.


def _pair_logits(model, z: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:  # (B, d), (B, T, D) -> (B, T)
    """Logits of P(correct) of each model on its own queries (autograd flows to z)."""
    return model.pair_logits(z, model.query_projection(phi))


def _all_pair_proba(model, z: np.ndarray, encodings: np.ndarray) -> np.ndarray:  # (M, d), (Q, D) -> (M, Q)
    return predict_proba(model, z, encodings)


# ---------------------------------------------------------------------------------------------- the embedding


@dataclass(frozen=True)
class Posterior:
    """Refined model embeddings and their Laplace spread."""

    mean: np.ndarray  # (M, d) the MAP embeddings z*
    prior: np.ndarray  # (M, d) the encoder's embeddings z0 the prior is centred on
    chol: np.ndarray  # (M, d, d) lower Cholesky factors of the posterior covariances
    log_lik: np.ndarray  # (M,) log-likelihood of the observed answers at z* (at z0: log_lik_prior)
    log_lik_prior: np.ndarray  # (M,)

    def samples(self, n: int, *, seed: int = 0) -> np.ndarray:  # (M, n, d)
        """n posterior draws per model, seeded (the same seed gives the same draws)."""
        eps = np.random.default_rng(seed).standard_normal((self.mean.shape[0], n, self.mean.shape[1]))
        return (self.mean[:, None, :] + np.einsum("mij,msj->msi", self.chol, eps)).astype(np.float32)

    def std(self) -> np.ndarray:  # (M, d) marginal posterior standard deviations
        return np.sqrt((self.chol**2).sum(axis=2))


def _padded(encodings: np.ndarray, sets: Sequence[EvaluationSet]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = max(len(i) for i, _ in sets)
    phi = np.zeros((len(sets), n, encodings.shape[1]), dtype=np.float32)
    y = np.zeros((len(sets), n), dtype=np.float32)
    mask = np.zeros((len(sets), n), dtype=bool)
    for m, (idx, s) in enumerate(sets):
        phi[m, : len(idx)], y[m, : len(idx)], mask[m, : len(idx)] = encodings[np.asarray(idx)], s, True
    return torch.from_numpy(phi), torch.from_numpy(y), torch.from_numpy(mask)


def _log_lik(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # -> (B,)
    ll = -torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")
    return (ll * mask).sum(dim=1)


def encoder_spread(model, encodings: np.ndarray, sets: Sequence[EvaluationSet], n: int, *, seed: int = 0,
                   floor: float = 1e-3) -> np.ndarray:  # (d,)
    """The encoder's error per dimension at set size n: RMS over the given (training) models of z(n random of its
    evaluations) - z(all of them). The refinement's prior scale at that n."""
    rng = np.random.default_rng(seed)
    full = embed_evaluation_sets(model, encodings, sets)
    small = []
    for idx, s in sets:
        take = rng.choice(len(idx), size=min(n, len(idx)), replace=False)
        small.append((np.asarray(idx)[take], np.asarray(s)[take]))
    diff = embed_evaluation_sets(model, encodings, small) - full
    return np.maximum(np.sqrt((diff**2).mean(axis=0)), floor).astype(np.float32)


def refine_embeddings(model, encodings: np.ndarray, sets: Sequence[EvaluationSet], prior_scale: np.ndarray, *,
                      z0: np.ndarray | None = None, steps: int = 50) -> Posterior:
    """MAP embeddings under the predictor's likelihood of each model's observed answers and a Gaussian prior
    N(z0, diag(prior_scale^2)) (z0 = the encoder's embeddings), with their Laplace posterior. All models at once
    (the objective is a sum of independent ones; L-BFGS, deterministic).

    Args:
        encodings: (Q, D) query encodings; sets: per model (query indices, scores in [0, 1]).
        prior_scale: (d,) or scalar prior std (encoder_spread at the sets' size).
        z0: (M, d) prior centres; None = embed_evaluation_sets(model, encodings, sets).
        steps: L-BFGS iterations.
    """
    enc = np.asarray(encodings, dtype=np.float32)
    if not sets:
        raise ValueError("refine_embeddings: no evaluation sets given. How to fix: give each model's (indices, scores).")
    if any(len(i) == 0 for i, _ in sets):
        raise ValueError("refine_embeddings: an evaluation set is empty. How to fix: give every model an evaluation.")
    z0 = embed_evaluation_sets(model, enc, sets) if z0 is None else np.asarray(z0, dtype=np.float32)
    model.eval()
    phi, y, mask = _padded(enc, sets)
    prior = torch.from_numpy(z0)
    inv_var = torch.as_tensor(1.0 / np.asarray(prior_scale, dtype=np.float32) ** 2).expand_as(prior)
    z = prior.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([z], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = -_log_lik(_pair_logits(model, z, phi), y, mask).sum() + 0.5 * (((z - prior) ** 2) * inv_var).sum()
        loss.backward(inputs=[z])
        return loss

    opt.step(closure)
    z_map = z.detach()
    with torch.no_grad():
        ll = _log_lik(_pair_logits(model, z_map, phi), y, mask)
        ll0 = _log_lik(_pair_logits(model, prior, phi), y, mask)
    hess = _gauss_newton(model, z_map, phi, mask) + torch.diag_embed(inv_var)  # (M, d, d)
    cov = torch.linalg.inv(hess)
    chol = torch.linalg.cholesky(0.5 * (cov + cov.transpose(1, 2)))
    return Posterior(mean=z_map.numpy(), prior=z0, chol=chol.numpy(), log_lik=ll.numpy(), log_lik_prior=ll0.numpy())


def _gauss_newton(model, z: torch.Tensor, phi: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # (M, d, d)
    """J^T diag(p (1 - p)) J per model, J = d logit / d z on its observed queries."""
    def one(zm: torch.Tensor, phim: torch.Tensor) -> torch.Tensor:  # (d,), (T, D) -> (T,)
        return _pair_logits(model, zm[None], phim[None])[0]

    with torch.no_grad():
        p = torch.sigmoid(_pair_logits(model, z, phi))
    jac = vmap(jacrev(one))(z, phi)  # (M, T, d)
    w = (p * (1 - p) * mask).unsqueeze(-1)  # (M, T, 1)
    return torch.einsum("mti,mtj->mij", jac * w, jac).detach()


# ---------------------------------------------------------------------------------------------- capability estimates


def accuracy_from_proba(proba_draws: np.ndarray, sets: Sequence[EvaluationSet], benchmarks: np.ndarray, *,
                        seed: int = 0) -> Capability:
    """Capability from P(correct) draws (M, S, Q) over every pool query: observed answers count as themselves, the
    unobserved queries add their binomial sampling; the interval is the draws' central LEVEL share. Any method that
    gives P(correct) (with S = 1 where it has no spread: then BINOMIAL_DRAWS of the binomial part) is scored so."""
    names, codes = np.unique(np.asarray(benchmarks).astype(str), return_inverse=True)
    if proba_draws.shape[1] == 1:  # no spread of its own: draws of the binomial part alone
        proba_draws = np.repeat(proba_draws, BINOMIAL_DRAWS, axis=1)
    M, S, Q = proba_draws.shape
    K = len(names)
    seen, total, count = observed_counts(sets, codes, K, Q)
    size = np.bincount(codes, minlength=K).astype(np.float64)  # N_b
    onehot = np.zeros((Q, K))
    onehot[np.arange(Q), codes] = 1.0
    unseen = (~seen)[:, None, :]  # (M, 1, Q)
    p = proba_draws.astype(np.float64) * unseen
    mean_part = p @ onehot  # (M, S, K): sum of P over unobserved
    var_part = (p * (1 - p)) @ onehot  # binomial variance of the unobserved answers' sum
    rng = np.random.default_rng(seed)
    draws = (total[:, None, :] + mean_part + np.sqrt(var_part) * rng.standard_normal(mean_part.shape)) / size
    point = (total + mean_part.mean(axis=1)) / size
    tail = (1 - LEVEL) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return Capability(benchmarks=tuple(names), estimate=point, lo=np.quantile(draws, tail, axis=1),
                      hi=np.quantile(draws, 1 - tail, axis=1), observed=observed, n=count, draws=draws)


def capability_estimates(model, encodings: np.ndarray, benchmarks: np.ndarray, posterior: Posterior,
                         sets: Sequence[EvaluationSet], *, samples: int = 64, seed: int = 0) -> Capability:
    """Each model's accuracy on each benchmark over all of that benchmark's queries (encodings, benchmarks: the
    pool's Q queries), with LEVEL intervals from `samples` posterior draws of its embedding plus binomial sampling."""
    z = posterior.samples(samples, seed=seed)  # (M, S, d)
    M, S, d = z.shape
    proba = _all_pair_proba(model, z.reshape(M * S, d), np.asarray(encodings, dtype=np.float32))
    return accuracy_from_proba(proba.reshape(M, S, -1), sets, benchmarks, seed=seed)


def estimate_capability(model, encodings: np.ndarray, benchmarks: np.ndarray, evaluation_set: EvaluationSet,
                        prior_scale: np.ndarray, *, samples: int = 64, seed: int = 0) -> pd.DataFrame:
    """One model's frame (benchmark, estimate, lo, hi, observed, n) over the pool's queries (encodings, benchmarks)
    from the refined embedding; prior_scale: encoder_spread on the pool's training models at about this set's size.
    Onboarding's estimate, which also reads the pool's answers, is adaptive.estimate_newcomer's."""
    post = refine_embeddings(model, encodings, [evaluation_set], prior_scale)
    return capability_estimates(model, encodings, benchmarks, post, [evaluation_set], samples=samples, seed=seed).frame(0)


# ---------------------------------------------------------------------------------------------- reference scores


@dataclass(frozen=True)
class ReferenceMap:
    """Ridge maps from per-benchmark accuracy (K) to each reference score, fitted on the training models."""

    scores: tuple[str, ...]
    coef: np.ndarray  # (K, R)
    intercept: np.ndarray  # (R,)
    residual_std: np.ndarray  # (R,) leave-one-out residual spread on the training models

    def predict(self, accuracy: np.ndarray) -> np.ndarray:  # (..., K) -> (..., R)
        return accuracy @ self.coef + self.intercept


def fit_reference_map(accuracy: np.ndarray, reference: pd.DataFrame, *, alpha: float = 1e-3) -> ReferenceMap:
    """accuracy (N, K): the training models' per-benchmark accuracy; reference (N rows, one numeric column per score,
    aligned). Ridge with its closed-form leave-one-out residuals for the interval."""
    x = np.asarray(accuracy, dtype=np.float64)
    t = reference.to_numpy(dtype=np.float64)
    if len(x) != len(t) or np.isnan(t).any() or np.isnan(x).any():
        raise ValueError("fit_reference_map: accuracy and reference must be aligned rows without NaN. How to fix: keep "
                         "only the training models that have every reference score.")
    xm, tm = x.mean(axis=0), t.mean(axis=0)
    xc = x - xm
    gram = xc.T @ xc + alpha * len(x) * np.eye(x.shape[1])
    coef = np.linalg.solve(gram, xc.T @ (t - tm))
    hat = np.einsum("ij,jk,ik->i", xc, np.linalg.inv(gram), xc) + 1.0 / len(x)
    loo = (t - tm - xc @ coef) / (1 - hat)[:, None]
    return ReferenceMap(scores=tuple(reference.columns), coef=coef, intercept=tm - xm @ coef,
                        residual_std=np.sqrt((loo**2).mean(axis=0)))


def reference_estimates(capability: Capability, ref: ReferenceMap, *, seed: int = 0) -> tuple[np.ndarray, ...]:
    """(estimate, lo, hi), each (M, R): the map of the accuracy estimates, its interval from the map of every
    accuracy draw plus the map's residual spread."""
    draws = ref.predict(capability.draws)  # (M, S, R)
    draws = draws + ref.residual_std * np.random.default_rng(seed).standard_normal(draws.shape)
    tail = (1 - LEVEL) / 2
    return ref.predict(capability.estimate), np.quantile(draws, tail, axis=1), np.quantile(draws, 1 - tail, axis=1)


# ---------------------------------------------------------------------------------------------- who it answers like


def answer_agreement(pool_scores: np.ndarray, evaluation_set: EvaluationSet) -> tuple[np.ndarray, np.ndarray]:
    """(share of the questions each pool model shares with the set where both were right or both wrong, NaN where it
    shares none; how many it shares): pool_scores (P, Q), NaN = not asked."""
    idx, s = evaluation_set
    cells = pool_scores[:, np.asarray(idx)]  # (P, n)
    asked = ~np.isnan(cells)
    shared = asked.sum(axis=1)
    same = (asked & (np.abs(np.nan_to_num(cells) - np.asarray(s)) < 0.5)).sum(axis=1)
    return np.where(shared > 0, same / np.maximum(shared, 1), np.nan), shared


def answer_likeness(sets: Sequence[EvaluationSet], pool_scores: np.ndarray, pool_embeddings: np.ndarray,
                    posterior: Posterior, *, samples: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
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


__all__ = ["LEVEL", "Posterior", "encoder_spread", "refine_embeddings", "Capability", "accuracy_from_proba",
           "capability_estimates", "estimate_capability", "ReferenceMap", "fit_reference_map", "reference_estimates", "answer_agreement", "answer_likeness"]
