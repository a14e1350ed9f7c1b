"""A log of graded answers read as every input is: in time order, and each failure naming file, row, column and
how to fix it."""

import numpy as np
import pandas as pd
import pytest

from locus_model.data.errors import EvaluationDataError
from locus_model.data.stream_log import read_stream_log
from tests.locus_model.evaluation.stream_logs import graded_log


def test_a_log_is_read_in_time_order(tmp_path) -> None:
    log = graded_log(4).sample(frac=1.0, random_state=0)  # the file out of order
    path = tmp_path / "log.csv"
    log.to_csv(path, index=False)
    table = read_stream_log(path)
    assert (np.diff(table["time"].to_numpy()) >= 0).all() and len(table) == len(log)
    assert set(table.columns) >= {"model", "query_id", "query", "benchmark", "score", "time", "_row"}


def test_iso_times_are_read_as_seconds(tmp_path) -> None:
    log = graded_log(2)
    log["time"] = pd.to_datetime(log["time"], unit="s", utc=True).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    log.to_csv(tmp_path / "log.csv", index=False)
    assert read_stream_log(tmp_path / "log.csv")["time"].max() == 1001.0


@pytest.mark.parametrize(
    "change, column, row",
    [
        (lambda f: f.drop(columns="time"), "time", None),
        (lambda f: f.assign(time=f["time"].astype(object).where(f.index != 4, "soon")), "time", 5),
        (lambda f: f.assign(score=f["score"].where(f.index != 2, 1.5)), "score", 3),
    ],
)
def test_a_bad_log_says_where_and_how_to_fix(tmp_path, change, column, row) -> None:
    path = tmp_path / "log.csv"
    change(graded_log(2)).to_csv(path, index=False)
    with pytest.raises(EvaluationDataError) as err:
        read_stream_log(path)
    assert err.value.column == column and err.value.row == row and err.value.fix
    assert str(path) in str(err.value)


def test_two_scores_for_one_answer_at_one_time_are_refused(tmp_path) -> None:
    log = graded_log(2)
    twice = log.iloc[[0]].assign(score=1.0 - log["score"].iloc[0])
    pd.concat([log, twice]).to_csv(tmp_path / "log.csv", index=False)
    with pytest.raises(EvaluationDataError, match="two different scores") as err:
        read_stream_log(tmp_path / "log.csv")
    assert err.value.row == len(log) + 1
