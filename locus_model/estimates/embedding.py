"""A newcomer's embedding the question choice does not bias, with its spread: the refined embedding.

The set encoder's embedding z0 of a model is an amortised guess, trained on random sets. Given the model's observed
answers y_i to queries phi_i, the correctness predictor G defines a likelihood, so the embedding is refined as IRT
estimates ability:

    z* = argmin_z  sum_i BCE(G(z, phi_i), y_i) + 1/2 sum_k ((z_k - z0_k) / s_k)^2

with s the encoder's own error at that set size on the training pool (``encoder_spread``: the RMS difference between
a training model's embedding from n of its evaluations and from all of them). The spread is the Laplace approximation:
cov = H^-1, H = J^T diag(p (1 - p)) J + diag(1 / s^2) (the Gauss-Newton Hessian in d = 128; J = d logit / dz on the
observed queries, built in blocks of queries so that memory grows linearly with the answers), and posterior samples
z* + chol(cov) eps carry it to the models a newcomer answers like (likeness.py) and to the question choice.

The predictor is reached through one adapter function, ``_pair_logits`` (the model's current API); nothing here
trains or changes the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch.func import jacrev, vmap

from locus_model.infer import EvaluationSet, embed_evaluation_sets

# ---------------------------------------------------------------------------------------------- predictor adapter
# The only place that touches the model: re-point it when the router/model API changes.


def _pair_logits(model, z: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:  # (B, d), (B, T, D) -> (B, T)
    """Logits of P(correct) of each model on its own queries (autograd flows to z)."""
    return model.pair_logits(z, model.query_projection(phi))


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


def encoder_spread(
    model, encodings: np.ndarray, sets: Sequence[EvaluationSet], n: int, *, seed: int = 0, floor: float = 1e-3
) -> np.ndarray:  # (d,)
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


def refine_embeddings(
    model,
    encodings: np.ndarray,
    sets: Sequence[EvaluationSet],
    prior_scale: np.ndarray | float | np.floating,
    *,
    z0: np.ndarray | None = None,
    steps: int = 50,
) -> Posterior:
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
        raise ValueError(
            "refine_embeddings: no evaluation sets given. How to fix: give each model's (indices, scores)."
        )
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


GN_BLOCK = 2**22  # floats of one Jacobian block's backward graph (16 MB): bounds _gauss_newton's memory at any n


def _gauss_newton(model, z: torch.Tensor, phi: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # (M, d, d)
    """J^T diag(p (1 - p)) J per model, J = d logit / d z on its observed queries.

    A logit depends on its own query alone, so J is built in blocks of C queries (and B models): reverse mode over a
    block's C outputs holds C basis vectors through a (C, hidden) graph, B C^2 hidden floats, so a block is sized to
    GN_BLOCK and the memory is the (M, T, D) input's plus a constant, linear in the answers (one model's whole
    Jacobian at once was 64 n^2 floats: 25.6 GB at n = 10,000)."""

    def one(zm: torch.Tensor, phim: torch.Tensor) -> torch.Tensor:  # (d,), (C, D) -> (C,)
        return _pair_logits(model, zm[None], phim[None])[0]

    M, T = mask.shape
    hidden = max(int(getattr(model.config, "predictor_hidden", 64)), 1)
    C = max(1, min(T, int(np.sqrt(GN_BLOCK / hidden))))  # queries per block
    B = max(1, min(M, GN_BLOCK // (C * C * hidden)))  # models per block
    out = torch.zeros(M, z.shape[1], z.shape[1])
    for m0 in range(0, M, B):
        zb = z[m0 : m0 + B]
        for t0 in range(0, T, C):
            pb, mb = phi[m0 : m0 + B, t0 : t0 + C], mask[m0 : m0 + B, t0 : t0 + C]
            if not mb.any():
                continue
            with torch.no_grad():
                p = torch.sigmoid(_pair_logits(model, zb, pb))
            jac = vmap(jacrev(one))(zb, pb)  # (B, C, d)
            w = (p * (1 - p) * mb).unsqueeze(-1)  # (B, C, 1)
            out[m0 : m0 + B] += torch.einsum("mti,mtj->mij", jac * w, jac).detach()
    return out


__all__ = ["Posterior", "encoder_spread", "refine_embeddings"]
