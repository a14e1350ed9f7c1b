"""The tiny pool of the training tests: 12 models x 200 queries in 4 clusters, each model good at some clusters
(planted skill), and the small LOCUS and TrainConfig settings they train with."""

from __future__ import annotations

import numpy as np

from locus_model.model import LocusConfig

D = 16
MODEL_CFG = LocusConfig(query_dim=D, d=32, n_blocks=1, n_latents=8, n_heads=4, predictor_hidden=32)
# the default path (every stage, every rule of TrainConfig's defaults), shrunk to the tiny pool: fewer epochs and
# steps, smaller sets, larger learning rates for the few steps
SMALL = dict(
    epochs=25,
    batch_models=4,
    enc_min=8,
    enc_max=64,
    dec_batch=64,
    lr_encoder=2e-3,
    lr_predictor=4e-3,
    patience=25,
    device="cpu",
    latent_steps=100,
    finetune_steps=60,
)
FAST = {**SMALL, "latent_steps": 0, "finetune_steps": 0}  # the end-to-end epochs alone, for their own tests


def tiny_train_pool() -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # encodings, train, val scores
    """12 models x 200 queries in 4 clusters; each model is good at some clusters (planted skill)."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, D))
    cluster = rng.integers(0, 4, 200)
    enc = centres[cluster] + 0.3 * rng.normal(size=(200, D))
    enc = (enc / np.linalg.norm(enc, axis=1, keepdims=True)).astype(np.float32)
    skill = rng.choice([-3.0, 3.0], size=(12, 4))
    p = 1 / (1 + np.exp(-skill[:, cluster]))
    scores = (rng.random((12, 200)) < p).astype(np.float32)
    is_val = rng.random(200) < 0.3
    train = np.where(is_val[None], np.nan, scores)
    val = np.where(is_val[None], scores, np.nan)
    return enc, train, val
