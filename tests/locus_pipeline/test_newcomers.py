"""The training source a run's newcomers are placed against (locus_pipeline.newcomers.NewcomerSource): the table's
pivot and the estimator fitted once for every newcomer; a copy of a source model gets one without its own row, a
newcomer with queries outside the source the run's estimator extended (no refit); the rounds of ``locus onboard``
observe their answers and fit nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.estimates import LowRank
from locus_pipeline.live.rounds import Rounds
from locus_pipeline.newcomers import NewcomerSource

QUERIES = [f"q{i:03d}" for i in range(120)]
BENCH = np.array(["law", "math", "physics"])[np.arange(120) % 3]


def source_tables(rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(an evaluation table of 60 models, each on 90 of the 120 queries; the queries' encodings)."""
    rows = [
        (f"m{m:02d}", QUERIES[q], BENCH[q], float(rng.random() < 0.3 + 0.4 * m / 60))
        for m in range(60)
        for q in rng.choice(120, 90, replace=False)
    ]
    table = pd.DataFrame(rows, columns=["model", "query_id", "benchmark", "score"])
    encodings = pd.DataFrame({"query_id": QUERIES, "encoding": list(rng.normal(size=(120, 4)).astype(np.float32))})
    return table, encodings


def store_of(model: str, rng: np.random.Generator, n: int = 30) -> pd.DataFrame:
    picks = rng.choice(120, n, replace=False)
    return pd.DataFrame(
        {
            "model": model,
            "query_id": [QUERIES[q] for q in picks],
            "benchmark": BENCH[picks],
            "score": (rng.random(n) < 0.5).astype(float),
        }
    )


class Home:
    """What Rounds reads of a home: its evaluation table and query encodings."""

    def __init__(self, table: pd.DataFrame, encodings: pd.DataFrame) -> None:
        self.tables = {"evaluation_table": table, "query_encodings": encodings}

    def read_table(self, name: str, columns=None) -> pd.DataFrame:
        return self.tables[name] if columns is None else self.tables[name][columns]


def counting(monkeypatch: pytest.MonkeyPatch) -> list:
    real, fits = vars(LowRank)["fit"].__func__, []  # the classmethod's function

    def counted(cls, *args, **kwargs):
        fits.append(1)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(LowRank, "fit", classmethod(counted))
    return fits


def test_the_estimator_is_fitted_once_for_the_run_and_again_only_for_a_copy_of_a_source_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(0)
    table, encodings = source_tables(rng)
    fits = counting(monkeypatch)
    source, pivots = NewcomerSource(table, encodings), []
    pivot = pd.DataFrame.pivot_table

    def counted_pivot(*a, **k):  # noqa: ANN002, ANN003, ANN202 (pandas' arguments)
        pivots.append(1)
        return pivot(*a, **k)

    monkeypatch.setattr(pd.DataFrame, "pivot_table", counted_pivot)
    placed = [source.place(store_of(f"new/{i}", rng), encodings.iloc[:0]) for i in range(3)]
    assert len(fits) == 11 and len(pivots) == 1  # the pool's completion and its inner split's ten, one pivot
    assert all(data.estimator is source.estimator for data in placed)
    copy = source.place(store_of("m07", rng), encodings.iloc[:0])  # a model of the source: not its own prior
    assert len(fits) == 22 and copy.estimator is not source.estimator and len(copy.estimator.prior_.scores) == 59
    extra = pd.DataFrame({"model": "new/x", "query_id": ["x1"], "benchmark": ["chess"], "score": [1.0]})
    wider = source.place(
        pd.concat([store_of("new/x", rng), extra]),
        pd.DataFrame({"query_id": ["x1"], "encoding": [np.ones(4, dtype=np.float32)]}),
    )
    assert len(fits) == 22 and wider.ids[-1] == "x1" and "chess" in wider.estimator.benchmarks  # no refit
    assert wider.newcomer[0][-1] == 120 and len(pivots) == 1
    frame = wider.estimator.estimate([wider.newcomer]).frame(0)
    assert frame["benchmark"].tolist() == ["chess", "law", "math", "physics"] and frame["n"].tolist()[0] == 1


def test_a_round_observes_its_answers_and_fits_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    table, encodings = source_tables(rng)
    questions = pd.DataFrame({"query_id": QUERIES, "benchmark": BENCH})
    rounds = Rounds(Home(table, encodings), questions, choice="adaptive", until=5.0)
    done: list[dict] = []
    for q in rounds.next(np.empty(0), np.empty(0), 8):
        done.append({"query_id": QUERIES[q], "benchmark": BENCH[q], "score": 1.0})
    rounds.estimate(done)  # the first round fits the session's estimator
    fits = counting(monkeypatch)
    for _ in range(3):
        asked = np.array([QUERIES.index(r["query_id"]) for r in done])
        for q in rounds.next(asked, np.empty(0), 8):
            done.append({"query_id": QUERIES[q], "benchmark": BENCH[q], "score": float(rng.random() < 0.5)})
        rounds.estimate(done)
        assert "more answers at this rate" in rounds.progress(len(done), 0.0)
    assert rounds.posterior is not None and rounds.capability is not None
    assert fits == [] and rounds.posterior.count.sum() == 32 and len(set(r["query_id"] for r in done)) == 32
    # the answers the target needs: the widest interval shrinks as 1 / sqrt(n)
    width, n = rounds.capability.widest()[1], 32
    assert rounds.more_needed() == int(np.ceil(n * (width / 5.0) ** 2)) - n
