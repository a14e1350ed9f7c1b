"""The protocol's summary: the label checks that decide whether an interval may be claimed."""

from __future__ import annotations

import numpy as np

from locus_model.evaluation.summary import label_warnings


def test_label_warnings_name_a_one_model_pool_and_queries_no_model_differs_on() -> None:
    rng = np.random.default_rng(0)
    varied = (rng.random((5, 30)) < 0.5).astype(float)
    assert label_warnings(varied, [f"m{i}" for i in range(5)]) == ([], False)
    one, degenerate = label_warnings(varied[:1], ["m0"])
    assert "1 model(s)" in one[0]
    same_per_query = np.tile(varied[:1], (5, 1))  # every model scores what the others score, query by query
    same_per_query[2, 3] = np.nan
    warnings, degenerate = label_warnings(same_per_query, [f"m{i}" for i in range(5)])
    assert degenerate and "no query on which two models' scores differ" in warnings[0]
