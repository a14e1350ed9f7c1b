"""The latent-factor baselines, fitted by gradient descent on the budget anchors.

- :class:`MatrixFactorization` -- EmbedLLM's TextMF (Zhuang et al., 2024): a learned vector p_m per model,
  the query encoding projected linearly to u_q, and a linear classifier on p_m * u_q. Onboarding a held-out
  model freezes everything else and fits its p_m by gradient descent on its budget evaluations.
- :class:`IRT` -- multidimensional two-parameter IRT: P(correct) = sigmoid(a_q . theta_m - b_q), with the
  discrimination a_q and difficulty b_q computed from the query encoding (a small network, as in IRT-Net)
  and one ability vector theta_m per model (Gaussian prior). Onboarding fits theta only (MAP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from locus_model.evaluation.baselines import Baseline, check_scores
from locus_model.threads import torch_threads


@dataclass(frozen=True)
class LatentConfig:
    """Training settings shared by the two gradient-descent baselines (matrix factorisation and IRT)."""

    dim: int = 128  # per-model vector size (MF: EmbedLLM's model embedding; IRT: ability dimensions)
    hidden: int = 64  # IRT only: hidden width of the net from query encoding to (a_q, b_q); 0 = linear
    # std of Gaussian noise per dimension on the query encodings while training (EmbedLLM's alpha, 0.05 there);
    # with several values, one model is fitted per value and the best validation BCE wins (budget-limited
    # training sees only N anchor queries, so the query side overfits unless the noise is tuned)
    noise: tuple[float, ...] = (0.05, 0.1, 0.2)
    lr: float = 1e-3  # Adam learning rate, full-batch steps over all training cells
    weight_decay: float = 1e-4  # AdamW decay on the shared (query-side) parameters
    prior_std: float = 1.0  # Gaussian prior N(0, prior_std^2 I) on each per-model vector (MAP)
    max_steps: int = 3000  # upper bound on full-batch steps
    eval_every: int = 25  # steps between validation checks
    patience: int = 400  # steps without a better validation BCE before stopping
    onboard_iters: int = 200  # L-BFGS iterations when onboarding held-out models (a convex problem)
    seed: int = 0


class _LatentNet(nn.Module):
    """logits (M, Q) = f(per-model vectors (M, dim), query encodings (Q, D)); subclasses define f."""

    def __init__(self, n_models: int, query_dim: int, cfg: LatentConfig) -> None:
        super().__init__()
        self.models = nn.Parameter(torch.zeros(n_models, cfg.dim))

    def logits(self, vectors: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class _TextMF(_LatentNet):
    """EmbedLLM's TextMF: classifier(p_m * W phi_q); the 2-class head is one logit here."""

    def __init__(self, n_models: int, query_dim: int, cfg: LatentConfig) -> None:
        super().__init__(n_models, query_dim, cfg)
        nn.init.normal_(self.models, std=cfg.prior_std)
        self.text_proj = nn.Linear(query_dim, cfg.dim)
        self.classifier = nn.Linear(cfg.dim, 1)

    def logits(self, vectors: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        u = self.text_proj(phi)  # (Q, dim)
        # classifier(p * u) for all pairs = (p * w) @ u^T + c
        return (vectors * self.classifier.weight) @ u.T + self.classifier.bias  # (M, Q)


class _IRTNet(_LatentNet):
    """Multidimensional 2PL: a_q . theta_m - b_q, with (a_q, b_q) = net(phi_q)."""

    def __init__(self, n_models: int, query_dim: int, cfg: LatentConfig) -> None:
        super().__init__(n_models, query_dim, cfg)
        nn.init.normal_(self.models, std=0.1 * cfg.prior_std)
        self.item: nn.Module  # phi (Q, D) -> (a, b) (Q, dim + 1)
        if cfg.hidden > 0:
            self.item = nn.Sequential(nn.Linear(query_dim, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, cfg.dim + 1))
        else:
            self.item = nn.Linear(query_dim, cfg.dim + 1)

    def logits(self, vectors: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        item = self.item(phi)  # (Q, dim + 1)
        a, b = item[:, :-1], item[:, -1]  # (Q, dim), (Q,)
        return vectors @ a.T - b  # (M, Q)


def _cells(scores: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Non-NaN cells of a (M, Q) matrix restricted to the columns that have any: (col idx, mask, targets)."""
    cols = np.flatnonzero(~np.isnan(scores).all(axis=0))
    sub = scores[:, cols]
    mask = torch.from_numpy(~np.isnan(sub))
    return torch.from_numpy(cols), mask, torch.from_numpy(np.nan_to_num(sub)).float()


def _map_loss(
    logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, vectors: torch.Tensor, prior_std: float
) -> torch.Tensor:
    """Negative log posterior per training cell: sum BCE + sum ||v||^2 / (2 s^2), divided by the cell count."""
    bce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")[mask].sum()
    prior = vectors.pow(2).sum() / (2 * prior_std**2)
    return (bce + prior) / mask.sum().clamp(min=1)


class _LatentBaseline(Baseline):
    net_class: type[_LatentNet] = _LatentNet

    def __init__(self, config: LatentConfig | None = None) -> None:
        super().__init__()
        self.config = config or LatentConfig()
        self.net: _LatentNet | None = None
        self.vectors = torch.zeros(0, self.config.dim)  # (M_fitted + H, dim): per-model vectors, fitted then onboarded
        self.history: list[dict] = []  # validation checks of the kept fit
        self.best_step = 0  # its step with the best validation BCE
        self.noise: float | None = None  # the noise level that was kept
        self.val_bce_by_noise: dict[float, float] = {}

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        cfg = self.config
        self.encodings = np.asarray(encodings, dtype=np.float32)
        train_scores = check_scores(train_scores, len(self.encodings), "train_scores")
        phi = torch.from_numpy(self.encodings)
        cols, mask, targets = _cells(train_scores)
        val = None
        if val_scores is not None:
            val_scores = check_scores(val_scores, len(self.encodings), "val_scores")
            if (~np.isnan(val_scores)).any():
                vcols, vmask, vtargets = _cells(val_scores)
                val = (phi[vcols], vmask, vtargets)
        grid = (cfg.noise,) if isinstance(cfg.noise, (int, float)) else tuple(cfg.noise)
        grid = grid if val is not None else grid[:1]  # no validation: nothing to select on, the first level is used
        if not grid:
            raise ValueError("LatentConfig.noise is empty; give at least one noise level, e.g. (0.05,)")
        with torch_threads(1):  # a small fit: on a busy machine a second thread waits for a core (25x slower)
            fits = [self._fit_one(phi[cols], mask, targets, val, noise) for noise in grid]
        best = min(range(len(fits)), key=lambda i: fits[i][0])
        self.val_bce_by_noise = {noise: fit[0] for noise, fit in zip(grid, fits)}
        _, net, self.best_step, self.history = fits[best]
        self.noise = grid[best]
        for p in net.parameters():
            p.requires_grad_(False)
        self.net = net
        self.vectors = net.models.detach().clone()
        self.n_fitted_models = len(train_scores)

    def _fit_one(
        self,
        phi_train: torch.Tensor,  # (Qt, D) encodings of the queries with a training cell
        mask: torch.Tensor,  # (M, Qt) bool
        targets: torch.Tensor,  # (M, Qt)
        val: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
        noise: float,
    ) -> tuple[float, _LatentNet, int, list[dict]]:
        """One full-batch fit at one noise level: (best val BCE or inf, net at its best step, step, history)."""
        cfg = self.config
        torch.manual_seed(cfg.seed)
        net = self.net_class(len(mask), phi_train.shape[1], cfg)
        shared = [p for n, p in net.named_parameters() if n != "models"]
        opt = torch.optim.AdamW(
            [{"params": [net.models], "weight_decay": 0.0}, {"params": shared, "weight_decay": cfg.weight_decay}],
            lr=cfg.lr,
        )
        gen = torch.Generator().manual_seed(cfg.seed)
        best = (float("inf"), 0, {k: v.detach().clone() for k, v in net.state_dict().items()})
        history = []
        for step in range(1, cfg.max_steps + 1):
            noisy = phi_train + noise * torch.randn(phi_train.shape, generator=gen)
            loss = _map_loss(net.logits(net.models, noisy), targets, mask, net.models, cfg.prior_std)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if val is None or step % cfg.eval_every:
                continue
            with torch.no_grad():
                vphi, vmask, vtargets = val
                vloss = F.binary_cross_entropy_with_logits(net.logits(net.models, vphi)[vmask], vtargets[vmask]).item()
            history.append({"step": step, "train_loss": loss.item(), "val_bce": vloss, "noise": noise})
            if vloss < best[0] - 1e-5:
                best = (vloss, step, {k: v.detach().clone() for k, v in net.state_dict().items()})
            elif step - best[1] >= cfg.patience:
                break
        if val is None:
            return float("inf"), net, cfg.max_steps, history
        net.load_state_dict(best[2])
        return best[0], net, best[1], history

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        """MAP fit of each new model's vector with every shared parameter frozen (convex: logistic regression)."""
        encodings = self._require_fit()
        assert self.net is not None
        net = self.net  # the closure below reads the fitted net
        scores = check_scores(scores, len(encodings), "scores")
        rows = np.arange(len(self.vectors), len(self.vectors) + len(scores))
        if len(scores) == 0:
            return rows
        cols, mask, targets = _cells(scores)
        with torch.no_grad():
            phi = torch.from_numpy(encodings)[cols]
        new = torch.zeros(len(scores), self.config.dim, requires_grad=True)
        counts = mask.sum(dim=1).clamp(min=1).float()  # (H,)
        opt = torch.optim.LBFGS([new], lr=1.0, max_iter=self.config.onboard_iters, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            logits = net.logits(new, phi)  # (H, Qa)
            bce = (F.binary_cross_entropy_with_logits(logits, targets, reduction="none") * mask).sum(dim=1)
            prior = new.pow(2).sum(dim=1) / (2 * self.config.prior_std**2)
            loss = ((bce + prior) / counts).sum()  # separable: each model's own MAP objective
            loss.backward()
            return loss

        with torch_threads(1):  # a small fit, as in fit
            opt.step(closure)
        self.vectors = torch.cat([self.vectors, new.detach()])
        return rows

    @torch.no_grad()
    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        encodings = self._require_fit()
        assert self.net is not None
        vectors = self.vectors[torch.as_tensor(np.asarray(model_rows, dtype=np.int64))]
        phi = torch.from_numpy(encodings[np.asarray(query_idx, dtype=np.int64)])
        return torch.sigmoid(self.net.logits(vectors, phi)).numpy().astype(np.float32)


class MatrixFactorization(_LatentBaseline):
    """EmbedLLM-style matrix factorisation (TextMF) on the query encodings."""

    name = "embedllm_mf"
    net_class = _TextMF


class IRT(_LatentBaseline):
    """Multidimensional 2PL IRT with query parameters from the encoding (IRT-Net style)."""

    name = "irt"
    net_class = _IRTNet

    def __init__(self, config: LatentConfig | None = None) -> None:
        super().__init__(config or LatentConfig(dim=16))
