"""The real AlpacaEval-1 matrix (../shared, CC BY-NC, read in place) passes the data contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from locus_model.data.long_format import read_evaluations
from locus_model.data.matrix import EvaluationMatrix

AE1 = Path(__file__).resolve().parents[4] / "shared" / "data" / "alpacaeval-ae1" / "evaluations.parquet"
needs_ae1 = pytest.mark.skipif(
    not AE1.exists(), reason=f"real AE1 data not found at {AE1} (../shared is absent on this machine)"
)


@needs_ae1
def test_alpacaeval_reads_as_a_valid_long_table() -> None:
    table, report = read_evaluations(AE1)
    assert (report.models, report.queries, len(table)) == (53, 805, 42_416)
    assert report.repeats_dropped == 0
    assert set(table["benchmark"]) == {"helpful_base", "koala", "oasst", "selfinstruct", "vicuna"}
    assert abs(table["score"].mean() - 0.789) < 0.001
    matrix = EvaluationMatrix.from_table(table)
    assert matrix.shape == (53, 805) and np.isnan(matrix.scores).sum() == 53 * 805 - 42_416
