"""`locus evaluate --onboard-sizes --reference-scores` (evaluation.capability): the scores of a hand-checked case, the
JSON keys on a tiny table, and a reference table with a problem named by file and row."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from locus_model.evaluation.capability import METHODS, capability_evaluation, read_reference_scores
from tests.locus_model.cli_runs import isolated_home, run_evaluate  # noqa: F401 (an autouse fixture)
from tests.locus_model.tables import write_table


def test_the_observed_mean_scores_as_checked_by_hand() -> None:
    # queries 0, 1 of benchmark a, 2, 3 of b; the held-out model (row 2) is asked the training queries 0 and 2 (n = 2)
    scores = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 1]], np.float32)
    out = capability_evaluation(
        None,
        np.zeros((4, 2), np.float32),
        scores,
        np.array(["a", "a", "b", "b"]),
        trained=np.array([0, 1]),
        held=np.array([2]),
        train_queries=np.array([0, 2]),
        sizes=(2,),
        methods=("observed",),
    )
    # its observed mean on a is 1 (query 0), so query 1 is taken as right: estimate 1.0 against its 0.5 (50 points);
    # on b 1.0 against 1.0 (0); the observed mean has no spread: [1, 1] misses a's 0.5 and holds b's 1.0
    assert out["capability.observed.2.mae"] == pytest.approx(25.0)
    assert out["capability.observed.2.coverage"] == pytest.approx(0.5)
    assert out["benchmarks"] == ["a", "b"]


def test_evaluate_onboard_sizes_writes_capability_reference_and_identity_keys(tmp_path):
    table = write_table(tmp_path / "evals.csv", n_models=10)
    ref = pd.DataFrame(
        {"model": [f"org/model {m}" for m in range(10)], "avg": np.linspace(30, 70, 10), "arch": "Llama"}
    )
    ref.to_csv(tmp_path / "ref.csv", index=False)
    code, out = run_evaluate(
        tmp_path,
        table,
        "--folds",
        "2",
        "--methods",
        "best_single",
        "--onboard-sizes",
        "4",
        "8",
        "--reference-scores",
        str(tmp_path / "ref.csv"),
    )
    assert code == 0
    result = json.loads(out.read_text())
    keys = {
        f"{kind}.{method}.{n}.{what}"
        for method in METHODS
        for n in (4, 8)
        for kind, what in (("capability", "mae"), ("capability", "coverage"), ("reference", "mae"))
    }
    assert keys <= set(result), sorted(keys - set(result))
    assert {"identity.4.hit_at_1", "identity.8.hit_at_1"} <= set(result)
    paired = result["capability_detail"]["paired"]
    assert {"capability.product_minus_observed.8.mae", "capability.locus_minus_observed.8.mae"} <= set(paired)
    # a paired difference is the difference of the two methods' MAE over the same held-out models and draws
    summary = result["capability_detail"]["summary"]
    assert paired["capability.product_minus_observed.8.mae"]["diff"] == pytest.approx(
        summary["capability.product.8.mae"]["mean"] - summary["capability.observed.8.mae"]["mean"], abs=1e-6
    )


def test_evaluate_onboard_sizes_checks_the_reference_file(tmp_path, capsys):
    code, _ = run_evaluate(
        tmp_path,
        write_table(tmp_path / "evals.csv"),
        "--onboard-sizes",
        "--reference-scores",
        str(tmp_path / "missing.csv"),
    )
    assert code == 2 and "--reference-scores" in capsys.readouterr().err


@pytest.mark.parametrize(
    "rows, problem",
    [
        ("name,avg\na,1\n", "no 'model' column"),
        ("model,arch\na,Llama\n", "no numeric score column"),
        ("model,avg\na,1\nb,2\na,3\n", "row 4"),
    ],
)
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
