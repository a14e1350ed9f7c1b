"""`locus evaluate --onboard-sizes --reference-scores` (evaluation.capability): the issue's JSON keys on a tiny table, and
a reference table with a problem named by file and row."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from locus_model.evaluation.capability import METHODS, read_reference_scores
from tests.locus_model.cli_runs import isolated_home, run_evaluate  # noqa: F401 (an autouse fixture)
from tests.locus_model.tables import write_table


def test_evaluate_onboard_sizes_writes_capability_reference_and_identity_keys(tmp_path):
    table = write_table(tmp_path / "evals.csv", n_models=10)
    ref = pd.DataFrame({"model": [f"org/model {m}" for m in range(10)], "avg": np.linspace(30, 70, 10),
                        "arch": "Llama"})
    ref.to_csv(tmp_path / "ref.csv", index=False)
    code, out = run_evaluate(tmp_path, table, "--folds", "2", "--methods", "best_single", "--onboard-sizes", "4",
                             "8", "--reference-scores", str(tmp_path / "ref.csv"))
    assert code == 0
    result = json.loads(out.read_text())
    for method in METHODS:
        for n in (4, 8):
            assert 0 <= result[f"capability.{method}.{n}.mae"] <= 100
            assert 0 <= result[f"capability.{method}.{n}.coverage"] <= 1
            assert result[f"reference.{method}.{n}.mae"] >= 0
    assert 0 <= result["identity.8.hit_at_1"] <= 1
    assert "capability.locus_minus_observed.8.mae" in result["capability_detail"]["paired"]


def test_evaluate_onboard_sizes_checks_the_reference_file(tmp_path, capsys):
    code, _ = run_evaluate(tmp_path, write_table(tmp_path / "evals.csv"), "--onboard-sizes",
                           "--reference-scores", str(tmp_path / "missing.csv"))
    assert code == 2 and "--reference-scores" in capsys.readouterr().err


@pytest.mark.parametrize("rows, problem", [
    ("name,avg\na,1\n", "no 'model' column"),
    ("model,arch\na,Llama\n", "no numeric score column"),
    ("model,avg\na,1\nb,2\na,3\n", "row 4"),
])
def test_reference_scores_errors_name_the_problem(tmp_path, rows, problem):
    path = tmp_path / "ref.csv"
    path.write_text(rows)
    with pytest.raises(ValueError, match=problem):
        read_reference_scores(path, ["a", "b"])


def test_reference_scores_follow_the_models_order():
    from io import StringIO

    got = read_reference_scores(StringIO("model,avg,arch,moe\nb,2,x,False\na,1,y,True\n"), ["a", "c", "b"])
    assert list(got.columns) == ["avg"]
    np.testing.assert_array_equal(got["avg"].to_numpy(), [1.0, np.nan, 2.0])
