"""The output refit of the set encoder (TrainConfig.refit_alphas), after the epochs and before the predictor
fine-tuning: its last linear layer is solved by ridge regression from the pooled set features of every training
model, embedded as at test time (all its train cells, no query noise), onto that model's latent vector from the warm-up.

The epochs train the encoder on random subsets of 16-256 cells with noisy queries and a few hundred optimiser
steps, while the latent it must reach was fitted on all the model's cells (the amortisation gap: on metabench @128
the warm-up's vectors route 87.9, the encoder's embeddings of the same models 83.7). The refit closes the part of
that gap that is linear in the pooled features, on exactly the inputs the encoder sees at test time. Embedding stays
one forward pass; the ridge strength is chosen by val BCE, and no change (the trained layer) stays a candidate.
"""

from __future__ import annotations

import torch

from locus_model.model import Locus
from locus_model.training.config import Stage, TrainConfig
from locus_model.training.inputs import Inputs, Latents, Validation, embed_sets, validate

OUTPUT_REFIT = Stage("output_refit", frozenset({"refit_alphas"}))

MODELS_PER_WEIGHT = 2  # the refit runs only with at least this many training models per weight of one output (d + 1):
#   with fewer, least squares can match every training model's latent and say nothing of a new model's (MMLU-Pro's 23,
#   AlpacaEval's 42 and the synthetic pool's 90 training models are left as trained, by construction)


def pooled_features(model: Locus, enc: torch.Tensor, sets: list) -> torch.Tensor:  # (M, d)
    """The set encoder's pooled features of evaluation sets, before its output layer."""
    out = model.out
    model.out = torch.nn.Identity()  # type: ignore[assignment]  # a swap undone below: the features before `out`
    try:
        return embed_sets(model, enc, sets)
    finally:
        model.out = out


def ridge(h: torch.Tensor, target: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(W (d_out, d_in), b (d_out,)) minimising ||h W^T + b - target||^2 + alpha * mean eigenvalue * ||W||^2."""
    h64, t64 = h.double(), target.double()
    h_mean, t_mean = h64.mean(dim=0), t64.mean(dim=0)
    hc, tc = h64 - h_mean, t64 - t_mean
    gram = hc.T @ hc
    scale = float(gram.trace()) / gram.shape[0]
    eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
    w = torch.linalg.solve(gram + alpha * max(scale, 1e-12) * eye, hc.T @ tc)  # (d_in, d_out)
    return w.T.to(h.dtype), (t_mean - h_mean @ w).to(h.dtype)


def _r2(z: torch.Tensor, target: torch.Tensor) -> float:
    resid = (z - target).pow(2).sum()
    total = (target - target.mean(dim=0)).pow(2).sum().clamp(min=1e-12)
    return float(1 - resid / total)


@torch.no_grad()
def refit_output(
    model: Locus, train_np, data: Inputs, val: Validation, latents: Latents | None, cfg: TrainConfig
) -> dict:
    """Solve model.out by ridge onto the warm-up's latents for each of cfg.refit_alphas; keep the lowest val BCE (the
    trained layer included). A pool of fewer than MODELS_PER_WEIGHT * (d + 1) training models is left as trained
    ({"alpha": None, "skipped": why}). Returns {"alpha" (None = kept as trained), "val_loss_before", "val_loss_after",
    "latent_r2_before", "latent_r2_after", "val_loss_at_alpha_<a>" for every alpha}."""
    if latents is None:
        return {"alpha": None, "skipped": "no latent warm-up (latent_steps=0): the refit's targets are its vectors"}
    needed = MODELS_PER_WEIGHT * (model.config.d + 1)
    if len(data.avail) < needed:
        return {
            "alpha": None,
            "skipped": f"{len(data.avail)} training models, fewer than {needed} "
            f"({MODELS_PER_WEIGHT} per weight of the {model.config.d}+1 of one output)",
        }
    sets = [(idx, train_np[m, idx]) for m, idx in enumerate(data.avail)]
    h = pooled_features(model, data.enc, sets)
    h_val = pooled_features(model, data.enc, val.sets)
    trained = (model.out.weight.clone(), model.out.bias.clone())
    before = validate(model, data.enc, val, model.out(h_val))[0]
    info: dict[str, float | None] = {
        "alpha": None,
        "val_loss_before": before,
        "val_loss_after": before,
        "latent_r2_before": _r2(model.out(h), latents.vectors),
    }
    best, best_loss = trained, before
    for alpha in cfg.refit_alphas:
        w, b = ridge(h, latents.vectors, alpha)
        loss = validate(model, data.enc, val, h_val @ w.T + b)[0]
        info[f"val_loss_at_alpha_{alpha:g}"] = loss
        if loss < best_loss:
            info.update(alpha=alpha, val_loss_after=loss)
            best, best_loss = (w, b), loss
    model.out.weight.copy_(best[0])
    model.out.bias.copy_(best[1])
    info["latent_r2_after"] = _r2(model.out(h), latents.vectors)
    return info
