"""From the pipeline's tables to the library's arrays: training cells (encodings in query order), pool evaluations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_pipeline.tables import pool_evaluations, training_arrays


def evaluations() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": ["b", "b", "b", "a", "a"],
            "query_id": ["q1", "q2", "q3", "q1", "q3"],
            "query": ["x", "y", "z", "x", "z"],
            "benchmark": "t",
            "score": [1.0, 0.0, 1.0, 0.0, 1.0],
        }
    )


def split() -> pd.DataFrame:
    return pd.DataFrame(
        {"query_id": ["q1", "q2", "q3"], "split": ["train", "val", "test"], "anchor": [True, False, False]}
    )


def encodings() -> pd.DataFrame:
    return pd.DataFrame({"query_id": ["q3", "q1", "q2"], "encoding": [[3.0, 3.0], [1.0, 1.0], [2.0, 2.0]]})


def test_training_arrays_put_anchors_in_train_cells_and_validation_queries_in_val_cells() -> None:
    arrays = training_arrays(evaluations(), encodings(), split())
    assert arrays.matrix.models == ["a", "b"] and arrays.matrix.query_ids == ["q1", "q2", "q3"]
    np.testing.assert_array_equal(arrays.encodings, [[1, 1], [2, 2], [3, 3]])  # in query_ids order
    np.testing.assert_array_equal(arrays.train_scores, [[0.0, np.nan, np.nan], [1.0, np.nan, np.nan]])
    np.testing.assert_array_equal(arrays.val_scores, [[np.nan, np.nan, np.nan], [np.nan, 0.0, np.nan]])
    with pytest.raises(ValueError, match="does not cover every query"):
        training_arrays(evaluations(), encodings(), split().iloc[:2])


def test_pool_evaluations_leave_out_the_test_queries() -> None:
    assert sorted(pool_evaluations(evaluations(), split())["query_id"].unique()) == ["q1", "q2"]
