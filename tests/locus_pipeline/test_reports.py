"""The report files and the table helpers the analysis assets and `locus search` share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_pipeline import reports  # reports.test_query_ids: not imported by name, or pytest would collect it
from locus_pipeline.reports import (
    data_note,
    parse_target,
    per_benchmark_accuracy,
    per_benchmark_answers,
    prediction_matrices,
    render_index,
    render_report,
    report_summary,
)
from locus_pipeline.storage import LocusHome


def test_parse_target_reads_benchmark_accuracy_pairs() -> None:
    assert parse_target(" synth-gsm8k=0.9, a=b=0.5 ,") == {"synth-gsm8k": 0.9, "a=b": 0.5}
    for bad in ("gsm8k", "gsm8k=1.5", "=0.3", "gsm8k=high", " , "):
        with pytest.raises(ValueError, match="How to fix"):
            parse_target(bad)


def test_a_report_leads_with_its_summary_and_figure(tmp_path: Path) -> None:
    text = render_report(
        "portfolios",
        title="Portfolios",
        summary="15 models do it",
        body="| k | acc |",
        note="Data: synthetic",
        png=tmp_path / "reports" / "portfolios.png",
    )
    assert text.split("\n\n")[:4] == [
        "# Portfolios",
        "Summary: 15 models do it",
        "![portfolios](portfolios.png)",
        "Data: synthetic",
    ]
    assert report_summary(text) == "15 models do it"
    bare = render_report("x", title="X", summary="s", body="b")
    assert "![" not in bare and report_summary(bare) == "s"


def test_a_report_is_written_through_the_home(tmp_path: Path) -> None:
    home = LocusHome(root=str(tmp_path))
    path = home.write_text("reports", "x.md", render_report("x", title="X", summary="s", body="b"))
    assert path == tmp_path / "reports" / "x.md" and report_summary(path.read_text(encoding="utf-8")) == "s"
    assert [p.name for p in path.parent.iterdir()] == ["x.md"]  # no temporary file left


def test_the_index_lists_each_report_with_its_summary_then_the_other_files() -> None:
    reports_ = {
        "a": render_report("a", title="Ay", summary="one", body=""),
        "b": render_report("b", title="Bee", summary="two", body=""),
        "c": None,
    }
    files = ["a.md", "b.md", "b.png", "atlas.html", "README.md"]
    index, text = render_index(reports_, files, data_note("synthetic", "x"))
    assert index["summary"].tolist() == ["one", "two", "missing"]
    lines = text.splitlines()
    assert lines[0] == "# LOCUS reports" and "SYNTHETIC" in lines[2]
    assert lines[4:7] == ["- [Ay](a.md): one", "- [Bee](b.md): two", "- [c](c.md): missing"]
    assert lines[-1] == "Other files: [atlas.html](atlas.html)"
    assert (
        data_note("mmlu_pro", "data/x").startswith("Data: **real** MMLU-Pro")
        and data_note("long", "f.csv") == "Data: `long` evaluations from `f.csv`."
    )


def test_the_test_query_ids_are_the_sorted_test_queries() -> None:
    split = pd.DataFrame({"query_id": ["q3", "q1", "q2"], "split": ["test", "test", "train"]})
    assert reports.test_query_ids(split) == ["q1", "q3"]
    with pytest.raises(ValueError, match="no test queries"):
        reports.test_query_ids(split.assign(split="train"))


def test_per_benchmark_accuracy_stacks_tables() -> None:
    table = pd.DataFrame({"model": ["a", "a", "a", "b"], "benchmark": ["x", "x", "y", "y"], "score": [1, 0, 1, 0]})
    onboarded = pd.DataFrame({"model": ["c"], "benchmark": ["x"], "score": [1.0]})
    acc = per_benchmark_accuracy(table, onboarded)
    assert acc.columns.tolist() == ["x", "y"] and acc.loc["a"].tolist() == [0.5, 1.0] and acc.loc["c", "x"] == 1.0
    assert np.isnan(acc.loc["b", "x"]) and per_benchmark_accuracy(table.iloc[:0]).empty
    n = per_benchmark_answers(table, onboarded)
    assert n.columns.tolist() == ["x", "y"] and n.loc["a"].tolist() == [2, 1] and n.loc["c", "x"] == 1


def test_prediction_matrices_follow_the_requested_model_order() -> None:
    long = pd.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "query_id": ["q1", "q2", "q1", "q2"],
            "prob": [0.1, 0.2, 0.3, 0.4],
            "label": [1.0, 0.0, np.nan, np.nan],
        }
    )
    preds = prediction_matrices(long, ["b", "a"])
    assert preds.names == ["b", "a"] and preds.query_ids == ["q1", "q2"]
    np.testing.assert_array_equal(preds.probs, [[0.3, 0.4], [0.1, 0.2]])
    assert preds.labelled.tolist() == [False, True]
    with pytest.raises(ValueError, match=r"no test-query predictions for models \['c'\]"):
        prediction_matrices(long, ["a", "c"])
