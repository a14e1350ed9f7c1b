"""The dense form of an evaluation table the model code uses, and the digest of its evaluations."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class EvaluationMatrix:
    """The dense form the model code uses: scores (M, Q) with NaN where a model was not evaluated."""

    models: list[str]  # M
    query_ids: list[str]  # Q
    queries: list[str]  # Q
    benchmarks: np.ndarray  # (Q,) str
    scores: np.ndarray  # (M, Q) float32, NaN = not evaluated
    split: np.ndarray | None = None  # (Q,) str or None

    @classmethod
    def from_table(cls, table: pd.DataFrame) -> "EvaluationMatrix":
        queries = table.drop_duplicates("query_id").sort_values("query_id", kind="stable")
        models = sorted(table["model"].astype(str).unique())
        model_index = pd.Index(models)
        query_index = pd.Index(queries["query_id"].astype(str))
        scores = np.full((len(models), len(query_index)), np.nan, dtype=np.float32)
        scores[model_index.get_indexer(table["model"].astype(str)), query_index.get_indexer(table["query_id"].astype(str))] = (
            table["score"].to_numpy(np.float32)
        )
        split = queries["split"].to_numpy(str) if "split" in queries.columns else None
        return cls(
            models=models,
            query_ids=query_index.tolist(),
            queries=queries["query"].astype(str).tolist(),
            benchmarks=queries["benchmark"].to_numpy(str),
            scores=scores,
            split=split,
        )

    @property
    def shape(self) -> tuple[int, int]:
        return self.scores.shape


def evaluations_digest(table: pd.DataFrame) -> str:
    """sha256 over the sorted (model, query_id, score) triples: identical evaluations, identical digest."""
    part = table[["model", "query_id", "score"]].astype({"model": str, "query_id": str})
    part = part.sort_values(["model", "query_id"], kind="stable")
    digest = hashlib.sha256()
    digest.update(pd.util.hash_pandas_object(part, index=False).to_numpy().tobytes())
    return digest.hexdigest()[:16]
