"""A tiny untrained LOCUS and four evaluation sets for it (n = 1, 7, 50, 120): what test_model.py and
test_infer.py run on."""

from __future__ import annotations

import numpy as np
import torch

from locus_model.model import Locus, LocusConfig
from locus_model.query_groups import Blend, fit_query_groups
from locus_model.router import Router

D = 32
CFG = LocusConfig(query_dim=D, d=32, n_blocks=2, n_latents=8, n_heads=4, predictor_hidden=16)


def tiny_model() -> Locus:
    torch.manual_seed(0)
    return Locus(CFG).eval()


def tiny_pool() -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:  # (300, D) encodings, the sets
    rng = np.random.default_rng(0)
    enc = rng.normal(size=(300, D)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    sets = []
    for n in (1, 7, 50, 120):
        idx = rng.choice(300, n, replace=False)
        sets.append((idx, (rng.random(n) > 0.5).astype(np.float32)))
    return enc, sets


def one_group_router(model: Locus) -> Router:
    """An untrained router around ``model``: one query group, the predictor alone (Blend()): P(correct) is the
    predictor's."""
    return Router(model, fit_query_groups(np.zeros((1, model.config.query_dim), np.float32)), Blend())
