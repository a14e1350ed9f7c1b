"""From the pipeline's tables (evaluations, query encodings, the query split) to the arrays the library
takes: the training arrays and the evaluations a pool embedding is computed
from. The split itself is the library's (locus_model.evaluation.splits)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from locus_model.data.matrix import EvaluationMatrix
from locus_model.data.query_encodings import encoding_matrix


@dataclass
class TrainingArrays:
    matrix: EvaluationMatrix
    encodings: np.ndarray  # (Q, D) in matrix.query_ids order
    train_scores: np.ndarray  # (M, Q): scores on the anchors, NaN elsewhere
    val_scores: np.ndarray  # (M, Q): scores on validation queries, NaN elsewhere
    benchmarks: np.ndarray  # (Q,) each query's benchmark, "" for test queries (the router's groups never read them)


def training_arrays(table: pd.DataFrame, encodings: pd.DataFrame, split: pd.DataFrame) -> TrainingArrays:
    """Dense arrays for train_locus: anchors -> train cells, validation queries -> val cells."""
    matrix = EvaluationMatrix.from_table(table.drop(columns=["split"], errors="ignore"))
    enc = encoding_matrix(encodings, matrix.query_ids)
    by_query = split.set_index("query_id").reindex(matrix.query_ids)
    if by_query["split"].isna().any():
        raise ValueError(
            "the query split does not cover every query of the evaluation table: compute the split from this table"
        )
    anchor = by_query["anchor"].to_numpy(bool)
    val = (by_query["split"] == "val").to_numpy()
    train_scores = np.where(anchor[None, :], matrix.scores, np.nan).astype(np.float32)
    val_scores = np.where(val[None, :], matrix.scores, np.nan).astype(np.float32)
    benchmarks = np.where((by_query["split"] == "test").to_numpy(), "", np.asarray(matrix.benchmarks).astype(str))
    return TrainingArrays(matrix, enc, train_scores, val_scores, benchmarks)


def pool_evaluations(table: pd.DataFrame, split: pd.DataFrame) -> pd.DataFrame:
    """The evaluations pool embeddings are computed from: all of a model's evaluations outside the test queries."""
    test = set(split.loc[split["split"] == "test", "query_id"].astype(str))
    return table[~table["query_id"].astype(str).isin(test)]
