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
        scores[
            model_index.get_indexer(table["model"].astype(str)), query_index.get_indexer(table["query_id"].astype(str))
        ] = table["score"].to_numpy(np.float32)
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


def _sorted_row_hashes(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(model names, uint64 row hashes) of the (model, query_id, score) triples sorted by model and query_id."""
    part = table[["model", "query_id", "score"]].astype({"model": str, "query_id": str})
    part = part.sort_values(["model", "query_id"], kind="stable")
    return part["model"].to_numpy(), pd.util.hash_pandas_object(part, index=False).to_numpy()


def evaluations_digest(table: pd.DataFrame) -> str:
    """sha256 over the sorted (model, query_id, score) triples: identical evaluations, identical digest."""
    return hashlib.sha256(_sorted_row_hashes(table)[1].tobytes()).hexdigest()[:16]


def evaluations_digests(table: pd.DataFrame) -> dict[str, str]:
    """{model: evaluations_digest of its rows} for every model of ``table``, from one sort and one hash pass
    (a row's hash does not depend on the other rows)."""
    models, hashes = _sorted_row_hashes(table)
    starts = np.flatnonzero(np.r_[True, models[1:] != models[:-1]]) if len(models) else np.zeros(0, int)
    ends = np.r_[starts[1:], len(models)]
    return {str(models[a]): hashlib.sha256(hashes[a:b].tobytes()).hexdigest()[:16] for a, b in zip(starts, ends)}
