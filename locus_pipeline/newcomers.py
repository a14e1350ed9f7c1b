"""Where a newcomer's answers stand against the training source: which of the source's queries they are (and which
queries join it), which pool rows its estimator is fitted on, and the newcomer's estimates as the onboarding partition
and the rounds of ``locus onboard`` show them.

A newcomer is a model that joins the pool after training (an onboarded model: docs/glossary.md). What depends on the
training source alone (its evaluations as a model x query table, the queries' encodings and benchmarks, the
estimator fitted on them: locus_model.estimates.Estimator) is computed once per run and shared by every newcomer of
the run and every round of an onboarding (:class:`NewcomerSource`); ``place`` only places data: the newcomer's
queries among the source's, and the estimator to read them with (the run's; the run's extended by the newcomer's
queries the source never saw; or, for a copy of a source model, one fitted without that model's row).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from locus_model.data.query_encodings import encoding_matrix
from locus_model.estimates import Capability, Estimator, EstimatorConfig
from locus_model.infer import EvaluationSet
from locus_model.markdown import escape_frame
from locus_model.pool import pool_matrix

if TYPE_CHECKING:
    from locus_model.router import Router

MISSING_MARK = "—"  # a cell with no figure, never nan
WIDE_INTERVAL = 0.20  # an estimate's 90% interval wider than this warns (the check onboarded_model_trustworthy)


@dataclass(frozen=True)
class NewcomerEstimates:
    """What a few dozen answers say of a newcomer: per benchmark its accuracy over all of the benchmark's queries with
    a 90% interval (locus_model.estimates.Estimator: empirical Bayes on the pool's low-rank completion)
    beside what it answered (``capability``: benchmark, estimate, lo, hi, observed, n), and the pool models that
    answer like it (``answers_like``: model, agreement, shared, p_nearest)."""

    capability: pd.DataFrame
    answers_like: pd.DataFrame


@dataclass(frozen=True)
class NewcomerData:
    """A newcomer's answers placed among the training source's queries: ``ids`` (Q,) (the source's, then its own
    queries the source never saw), its answers as an evaluation set (indices into ids, scores), the training
    source's evaluations as a (model x query) table ``wide`` over the source's queries, and the ``estimator`` to
    read them with."""

    ids: list[str]
    newcomer: EvaluationSet
    wide: pd.DataFrame
    estimator: Estimator


@dataclass
class NewcomerSource:
    """The training source's evaluations (``table``: model, query_id, benchmark, score), its queries' ``encodings``
    and the ``router`` (the pool's checkpoint: the refined embedding for "answers like"; None: estimates only) as
    every newcomer of one run is placed against them: each part computed on first use, then kept for the run's other
    newcomers (``seed``: the estimator's)."""

    table: pd.DataFrame
    encodings: pd.DataFrame
    router: "Router | None" = None
    seed: int = 0

    @cached_property
    def ids(self) -> list[str]:
        """The source's queries (Q,), in the encodings' order."""
        return [str(q) for q in self.encodings["query_id"]]

    @cached_property
    def labels(self) -> pd.Series:
        """Each evaluated query's benchmark (index query_id)."""
        table = self.table.assign(query_id=self.table["query_id"].astype(str))
        return table.drop_duplicates("query_id").set_index("query_id")["benchmark"]

    @cached_property
    def phi(self) -> np.ndarray:
        """(Q, D) the queries' encodings."""
        return encoding_matrix(self.encodings, self.ids)

    @cached_property
    def benchmarks(self) -> np.ndarray:
        """(Q,) each query's benchmark ("" for a query no model of the source was evaluated on)."""
        return np.array([str(self.labels.get(q, "")) for q in self.ids])

    @cached_property
    def wide(self) -> pd.DataFrame:
        """The source's evaluations as a (model x query) table over ``ids`` (NaN = not asked)."""
        wide = self.table.pivot_table(index="model", columns="query_id", values="score", aggfunc="mean")
        wide.columns = wide.columns.astype(str)
        return wide.reindex(columns=self.ids)

    def _fit(self, rows: pd.DataFrame) -> Estimator:
        return Estimator(EstimatorConfig(seed=self.seed)).fit(
            rows.to_numpy(np.float32), self.benchmarks, router=self.router, encodings=self.phi
        )

    @cached_property
    def estimator(self) -> Estimator:
        """The estimator fitted on all the source's models: every newcomer's that is none of them."""
        return self._fit(self.wide)

    def place(self, store: pd.DataFrame, store_encodings: pd.DataFrame) -> NewcomerData:
        """The newcomer's store (query_id, benchmark, score; ``store_encodings`` of its queries) among the source's
        queries: its queries outside the source join after them with their own benchmarks (the estimator extended,
        nothing refitted); a model of the source is read by an estimator fitted without its own row (its own answers
        are not its prior: the one refit, per such model); every other newcomer shares ``estimator``."""
        own = store.assign(query_id=store["query_id"].astype(str)).drop_duplicates("query_id", keep="last")
        extra = [q for q in own["query_id"] if q not in self.labels.index]
        own_row = str(store["model"].iloc[0]) if "model" in store and len(store) else None
        copy = own_row in self.wide.index.astype(str)
        estimator = self._fit(self.wide[self.wide.index.astype(str) != own_row]) if copy else self.estimator
        ids = self.ids
        if extra:
            benchmarks = own.set_index("query_id").loc[extra, "benchmark"].astype(str).to_numpy()
            estimator = estimator.extended(benchmarks, encoding_matrix(store_encodings, extra))
            ids = ids + extra
        index = {q: i for i, q in enumerate(ids)}
        newcomer = (np.array([index[q] for q in own["query_id"]], dtype=np.int64), own["score"].to_numpy(np.float32))
        return NewcomerData(ids=ids, newcomer=newcomer, wide=self.wide, estimator=estimator)

    def estimate(self, store: pd.DataFrame, store_encodings: pd.DataFrame) -> tuple[NewcomerData, Capability]:
        """(its NewcomerData, its capability estimates) of the newcomer whose store this is."""
        data = self.place(store, store_encodings)
        return data, data.estimator.estimate([data.newcomer])


def newcomer_estimates(
    store: pd.DataFrame, store_encodings: pd.DataFrame, source: NewcomerSource, pool: pd.DataFrame, *, shown: int = 5
) -> NewcomerEstimates:
    """The newcomer's estimates from its store (its queries' encodings: ``store_encodings``) against the training
    ``source`` (shared by the run's newcomers; with the router) and the pool (its embeddings)."""
    data, estimated = source.estimate(store, store_encodings)
    others = pool[pool["model"].astype(str) != str(store["model"].iloc[0])]
    names, z = pool_matrix(others)
    scores = data.wide.reindex(index=names, columns=data.ids).to_numpy(np.float32)
    like = data.estimator.answers_like(data.newcomer, scores, z, shown=shown)
    like = pd.DataFrame(
        {
            "model": [names[i] for i in like["row"]],
            "agreement": like["agreement"].to_numpy(),
            "shared": like["shared"].to_numpy(),
            "p_nearest": like["p_nearest"].to_numpy(),
        }
    )
    return NewcomerEstimates(capability=estimated.frame(0), answers_like=like)


def estimates_markdown(estimates: NewcomerEstimates) -> tuple[str, str]:
    """(the capability table, the answers-like table) as Markdown for the onboarding partition's metadata."""
    cap = estimates.capability
    rows = pd.DataFrame(
        {
            "benchmark": cap["benchmark"].astype(str),
            "answered (n)": [f"{o:.3f} ({n})" if n else MISSING_MARK for o, n in zip(cap["observed"], cap["n"])],
            "estimate over all its queries": cap["estimate"].map(lambda v: f"{v:.3f}"),
            "90% interval": [f"{lo:.3f} - {hi:.3f}" for lo, hi in zip(cap["lo"], cap["hi"])],
        }
    )
    like = estimates.answers_like
    like_rows = pd.DataFrame(
        {
            "model": like["model"].astype(str),
            "agreement": [f"{a:.1%} of {n}" if n else MISSING_MARK for a, n in zip(like["agreement"], like["shared"])],
            "P(nearest)": like["p_nearest"].map(lambda v: f"{v:.2f}"),
        }
    )
    return (
        escape_frame(rows).to_markdown(index=False),
        escape_frame(like_rows).to_markdown(index=False)
        + "\n\nagreement: share of the questions both answered where both were right or both wrong; P(nearest): "
        "share of draws of its embedding (its posterior) whose nearest pool model this is",
    )
