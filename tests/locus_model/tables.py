"""Evaluation tables the tests of several packages build (the protocol's, the CLI's, the bench's): small, seeded."""

from __future__ import annotations

import numpy as np
import pandas as pd


def make_table(n_models: int = 10, n_queries: int = 60, *, seed: int = 0, split: bool = False) -> pd.DataFrame:
    """A long table from a low-rank logistic model; benchmarks 'mmlu_a', 'mmlu_b', 'gsm8k'."""
    rng = np.random.default_rng(seed)
    theta, items = rng.normal(size=(n_models, 2)) * 2, rng.normal(size=(n_queries, 2))
    p = 1 / (1 + np.exp(-(theta @ items.T)))
    y = (rng.random(p.shape) < p).astype(float)
    rows = []
    for m in range(n_models):
        for q in range(n_queries):
            row = {
                "model": f"m{m:02d}",
                "query_id": f"q{q:03d}",
                "query": f"question {q}",
                "benchmark": ("mmlu_a", "mmlu_b", "gsm8k")[q % 3],
                "score": y[m, q],
            }
            if split:
                row["split"] = "train" if q < n_queries * 0.6 else ("val" if q < n_queries * 0.8 else "test")
            rows.append(row)
    return pd.DataFrame(rows)


def unit_encodings(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    enc = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return enc / np.linalg.norm(enc, axis=1, keepdims=True)


def write_table(path, *, n_models: int = 8, n_queries: int = 50, split: bool = False):
    rng = np.random.default_rng(0)
    ability = np.linspace(-1.5, 1.5, n_models)
    difficulty = rng.normal(size=n_queries)
    y = (rng.random((n_models, n_queries)) < 1 / (1 + np.exp(-(ability[:, None] - difficulty)))).astype(int)
    rows = [
        {
            "model": f"org/model {m}",
            "query_id": f"q{q}",
            "query": f"what is {q} plus {q % 7}?",
            "benchmark": ("arith", "logic")[q % 2],
            "score": y[m, q],
            **({"split": "train" if q < 30 else ("val" if q < 40 else "test")} if split else {}),
        }
        for m in range(n_models)
        for q in range(n_queries)
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path
