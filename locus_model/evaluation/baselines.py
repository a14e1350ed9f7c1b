"""Baselines LOCUS is compared with, all behind one interface and fitted on the same budget anchors.

- :class:`MatrixFactorization` -- EmbedLLM's TextMF (Zhuang et al., 2024): a learned vector p_m per model,
  the query encoding projected linearly to u_q, and a linear classifier on p_m * u_q. Onboarding a held-out
  model freezes everything else and fits its p_m by gradient descent on its budget evaluations.
- :class:`IRT` -- multidimensional two-parameter IRT: P(correct) = sigmoid(a_q . theta_m - b_q), with the
  discrimination a_q and difficulty b_q computed from the query encoding (a small network, as in IRT-Net)
  and one ability vector theta_m per model (Gaussian prior). Onboarding fits theta only (MAP).
- :class:`KNNRouter` -- per-query kNN: the k training anchor queries nearest to the test query (cosine on the
  encodings) and each model's smoothed mean score there.
- :class:`BestSingle` -- the model with the best mean score on its budget evaluations; every model predicts
  its own mean rate for every query, so routing always picks the best single model.

The oracle (any model correct) needs the test labels and lives in the harness (locus_model.evaluation.harness).

Interface (:class:`Baseline`): ``fit(encodings, train_scores, val_scores)`` on the in-training models
(rows of the (M, Q) score matrices, NaN = not a training cell), ``onboard(scores)`` appends held-out models
fitted from their own budget evaluations only and returns their rows, ``predict_proba(model_rows, query_idx)``
gives P(correct) (len(rows), len(query_idx)). ``n_fitted_models`` is the number of models seen by ``fit``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def _check_scores(scores: np.ndarray, n_queries: int, what: str) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim != 2 or scores.shape[1] != n_queries:
        raise ValueError(
            f"{what} has shape {scores.shape}, expected (models, {n_queries}) with one column per query encoding; "
            "pass the score matrix aligned with the encodings (NaN where a cell is not used)"
        )
    return scores


class Baseline(ABC):
    """A correctness predictor with per-model parameters fitted from evaluations."""

    name: str = "baseline"

    def __init__(self) -> None:
        self.encodings: np.ndarray | None = None  # (Q, D) unit-norm query encodings
        self.n_fitted_models = 0  # models seen by fit(); rows >= this were onboarded

    def _require_fit(self) -> np.ndarray:
        if self.encodings is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(encodings, train_scores) first")
        return self.encodings

    @abstractmethod
    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        """Fit on the in-training models: train_scores (M, Q) NaN = not a training cell; val_scores likewise."""

    @abstractmethod
    def onboard(self, scores: np.ndarray) -> np.ndarray:
        """Add held-out models from their evaluations only (H, Q); returns their rows (H,)."""

    @abstractmethod
    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        """P(correct) for every (model row, query): (len(model_rows), len(query_idx)) float32."""


# ---------------------------------------------------------------------------------------------- latent-factor models


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


def _map_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, vectors: torch.Tensor, prior_std: float) -> torch.Tensor:
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
        train_scores = _check_scores(train_scores, len(self.encodings), "train_scores")
        phi = torch.from_numpy(self.encodings)
        cols, mask, targets = _cells(train_scores)
        val = None
        if val_scores is not None:
            val_scores = _check_scores(val_scores, len(self.encodings), "val_scores")
            if (~np.isnan(val_scores)).any():
                vcols, vmask, vtargets = _cells(val_scores)
                val = (phi[vcols], vmask, vtargets)
        grid = (cfg.noise,) if isinstance(cfg.noise, (int, float)) else tuple(cfg.noise)
        grid = grid if val is not None else grid[:1]  # no validation: nothing to select on, the first level is used
        if not grid:
            raise ValueError("LatentConfig.noise is empty; give at least one noise level, e.g. (0.05,)")
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
            [{"params": [net.models], "weight_decay": 0.0}, {"params": shared, "weight_decay": cfg.weight_decay}], lr=cfg.lr
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
        scores = _check_scores(scores, len(encodings), "scores")
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
            logits = self.net.logits(new, phi)  # (H, Qa)
            bce = (F.binary_cross_entropy_with_logits(logits, targets, reduction="none") * mask).sum(dim=1)
            prior = new.pow(2).sum(dim=1) / (2 * self.config.prior_std**2)
            loss = ((bce + prior) / counts).sum()  # separable: each model's own MAP objective
            loss.backward()
            return loss

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


# ---------------------------------------------------------------------------------------------- non-parametric


@dataclass(frozen=True)
class KNNConfig:
    """Per-query kNN router settings."""

    ks: tuple[int, ...] = (5, 10, 20, 50)  # candidate k; the one with the best validation routing accuracy is used
    smoothing: float = 1.0  # pseudo-count pulling a model's local mean toward its overall anchor mean


class KNNRouter(Baseline):
    """P(correct | m, q) = smoothed mean of m's scores on the k anchor queries nearest to q (cosine)."""

    name = "knn"

    def __init__(self, config: KNNConfig | None = None) -> None:
        super().__init__()
        self.config = config or KNNConfig()
        self.scores = np.zeros((0, 0), np.float32)  # (M_fitted + H, Q) each model's own anchor evaluations
        self.k = self.config.ks[0]

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        self.encodings = np.asarray(encodings, dtype=np.float32)
        self.scores = _check_scores(train_scores, len(self.encodings), "train_scores").copy()
        self.n_fitted_models = len(self.scores)
        self.k = self.config.ks[0]
        if val_scores is None:
            return
        val_scores = _check_scores(val_scores, len(self.encodings), "val_scores")
        val_q = np.flatnonzero(~np.isnan(val_scores).all(axis=0))
        if len(val_q) == 0:
            return
        from locus_model.evaluation.metrics import brier, routing_accuracy

        rows = np.arange(self.n_fitted_models)
        best = None
        for k in self.config.ks:
            self.k = k
            probs = self.predict_proba(rows, val_q)
            key = (routing_accuracy(probs, val_scores[:, val_q]), -brier(probs, val_scores[:, val_q]))
            if best is None or key > best[0]:
                best = (key, k)
        self.k = best[1]

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        encodings = self._require_fit()
        scores = _check_scores(scores, len(encodings), "scores")
        rows = np.arange(len(self.scores), len(self.scores) + len(scores))
        self.scores = np.concatenate([self.scores, scores])
        return rows

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        encodings = self._require_fit()
        anchors = np.flatnonzero(~np.isnan(self.scores[: self.n_fitted_models]).all(axis=0))  # (A,) training anchors
        scores = self.scores[np.asarray(model_rows, dtype=np.int64)][:, anchors]  # (M, A)
        known = ~np.isnan(scores)
        y = np.nan_to_num(scores)
        overall = y.sum(1) / np.maximum(known.sum(1), 1)  # (M,) each model's anchor mean rate
        sim = encodings[np.asarray(query_idx, dtype=np.int64)] @ encodings[anchors].T  # (Qt, A) cosine
        k = min(self.k, len(anchors))
        nearest = np.argpartition(-sim, k - 1, axis=1)[:, :k]  # (Qt, k)
        hits = y[:, nearest].sum(-1)  # (M, Qt)
        counts = known[:, nearest].sum(-1)  # (M, Qt)
        alpha = self.config.smoothing
        return ((hits + alpha * overall[:, None]) / (counts + alpha)).astype(np.float32)


class BestSingle(Baseline):
    """Every model predicts its mean rate on its budget evaluations; routing picks the best single model."""

    name = "best_single"

    def __init__(self) -> None:
        super().__init__()
        self.rates = np.zeros(0, np.float32)  # (M_fitted + H,)

    @staticmethod
    def _rates(scores: np.ndarray) -> np.ndarray:
        known = ~np.isnan(scores)
        if (known.sum(1) == 0).any():
            raise ValueError(
                f"{int((known.sum(1) == 0).sum())} model(s) have no evaluations to compute a mean rate from; "
                "give every model at least one budget evaluation (raise the budget or drop those models)"
            )
        return (np.nan_to_num(scores).sum(1) / known.sum(1)).astype(np.float32)

    def fit(self, encodings: np.ndarray, train_scores: np.ndarray, val_scores: np.ndarray | None = None) -> None:
        self.encodings = np.asarray(encodings, dtype=np.float32)
        self.rates = self._rates(_check_scores(train_scores, len(self.encodings), "train_scores"))
        self.n_fitted_models = len(self.rates)

    def onboard(self, scores: np.ndarray) -> np.ndarray:
        encodings = self._require_fit()
        rows = np.arange(len(self.rates), len(self.rates) + len(scores))
        self.rates = np.concatenate([self.rates, self._rates(_check_scores(scores, len(encodings), "scores"))])
        return rows

    def predict_proba(self, model_rows: np.ndarray, query_idx: np.ndarray) -> np.ndarray:
        self._require_fit()
        rates = self.rates[np.asarray(model_rows, dtype=np.int64)]
        return np.repeat(rates[:, None], len(query_idx), axis=1).astype(np.float32)

    def best_row(self, model_rows: np.ndarray) -> int:
        """The row among ``model_rows`` with the highest mean rate (the first on ties)."""
        model_rows = np.asarray(model_rows, dtype=np.int64)
        return int(model_rows[np.argmax(self.rates[model_rows])])


BASELINES: dict[str, type[Baseline]] = {
    cls.name: cls for cls in (MatrixFactorization, IRT, KNNRouter, BestSingle)
}
