"""The training source a run's newcomers are placed against (locus_pipeline.newcomers.NewcomerSource): the table's
pivot and the pool's low-rank prior computed once for every model; a model of the source (its own row left out) and
a model with queries outside the source get a prior of their own, the one the per-model path fits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.benchmark_bayes import LowRank, LowRankPrior
from locus_pipeline.newcomers import NewcomerSource

QUERIES = [f"q{i:03d}" for i in range(120)]
BENCH = np.array(["law", "math", "physics"])[np.arange(120) % 3]


def source_tables(rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(an evaluation table of 60 models, each on 90 of the 120 queries; the queries' encodings)."""
    rows = [(f"m{m:02d}", QUERIES[q], BENCH[q], float(rng.random() < 0.3 + 0.4 * m / 60))
            for m in range(60) for q in rng.choice(120, 90, replace=False)]
    table = pd.DataFrame(rows, columns=["model", "query_id", "benchmark", "score"])
    encodings = pd.DataFrame({"query_id": QUERIES, "encoding": list(rng.normal(size=(120, 4)).astype(np.float32))})
    return table, encodings


def store_of(model: str, rng: np.random.Generator, n: int = 30) -> pd.DataFrame:
    picks = rng.choice(120, n, replace=False)
    return pd.DataFrame({"model": model, "query_id": [QUERIES[q] for q in picks], "benchmark": BENCH[picks],
                         "score": (rng.random(n) < 0.5).astype(float)})


def per_model_prior(table: pd.DataFrame, data, own: str) -> LowRankPrior:
    """The prior the per-model path fits: the pool's answers over the placed queries, the model's own row left out."""
    wide = table.pivot_table(index="model", columns="query_id", values="score", aggfunc="mean")
    wide = wide.reindex(columns=data.ids)
    return LowRankPrior.fit(wide[wide.index != own].to_numpy(np.float32), data.benchmarks)


def test_the_pool_prior_is_fitted_once_for_the_run_and_again_only_for_a_model_that_changes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    table, encodings = source_tables(rng)
    real, fits = LowRank.fit.__func__, []

    def counted(cls, *args, **kwargs):
        fits.append(1)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(LowRank, "fit", classmethod(counted))
    source, pivots = NewcomerSource(table, encodings), []
    pivot = pd.DataFrame.pivot_table
    monkeypatch.setattr(pd.DataFrame, "pivot_table", lambda *a, **k: (pivots.append(1), pivot(*a, **k))[1])
    placed = [source.place(store_of(f"new/{i}", rng), encodings.iloc[:0]) for i in range(3)]
    assert len(fits) == 11 and len(pivots) == 1  # the pool's completion and its inner split's ten, one pivot
    assert all(data.prior is source.prior for data in placed)
    copy = source.place(store_of("m07", rng), encodings.iloc[:0])  # a model of the source: not its own prior
    assert len(fits) == 22 and copy.prior is not source.prior and len(copy.prior.scores) == 59
    extra = pd.DataFrame({"model": "new/x", "query_id": ["x1"], "benchmark": ["chess"], "score": [1.0]})
    wider = source.place(pd.concat([store_of("new/x", rng), extra]),
                         pd.DataFrame({"query_id": ["x1"], "encoding": [np.ones(4, dtype=np.float32)]}))
    assert len(fits) == 33 and wider.ids[-1] == "x1" and wider.benchmarks[-1] == "chess" and len(wider.phi) == 121
    assert len(pivots) == 1 and [s[0].tolist() for s in wider.training] == [s[0].tolist() for s in placed[0].training]
    monkeypatch.setattr(LowRank, "fit", classmethod(real))
    for data, own in [(placed[0], "new/0"), (copy, "m07"), (wider, "new/x")]:
        want = per_model_prior(table, data, own).capability([data.newcomer]).frame(0)
        pd.testing.assert_frame_equal(data.prior.capability([data.newcomer]).frame(0), want)
