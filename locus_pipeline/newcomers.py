"""What an onboarded model's answers say of it, against the training source: its per-benchmark capability estimates
and the pool models it answers like (its onboarding partition's metadata, the rounds of ``locus onboard``).

What depends on the training source alone (its evaluations as a model x query table, the training models' evaluation
sets the encoder's error is measured on, the queries' encodings and benchmarks, the pool's low-rank prior) is
computed once per run and shared by every model of the run and every round of an onboarding
(:class:`NewcomerSource`); what depends on the model (its answers, its queries) is placed against it per model
(``NewcomerSource.place``), cheaply unless the model changes the pool's prior.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from locus_model.benchmark_bayes import LowRankPrior
from locus_model.data.query_encodings import encoding_matrix
from locus_model.infer import EvaluationSet
from locus_model.markdown import escape_frame
from locus_model.model import Locus
from locus_model.pool import pool_matrix

if TYPE_CHECKING:
    from locus_model.estimates import Capability, Posterior

PRIOR_MODELS = 64  # training models the encoder's error at the newcomer's set size is measured on (encoder_spread)
MISSING_MARK = "—"  # a cell with no figure, never nan
WIDE_INTERVAL = 0.20  # an estimate's 90% interval wider than this warns (the check onboarded_model_trustworthy)


@dataclass(frozen=True)
class NewcomerEstimates:
    """What a few dozen answers say of an onboarded model: per benchmark its accuracy over all of the benchmark's
    queries with a 90% interval (locus_model.benchmark_bayes: empirical Bayes on the pool's low-rank completion)
    beside what it answered (``capability``: benchmark, estimate, lo, hi, observed, n), and the pool models that
    answer like it (``answers_like``: model, agreement, shared, p_nearest)."""

    capability: pd.DataFrame
    answers_like: pd.DataFrame


@dataclass(frozen=True)
class NewcomerData:
    """An onboarded model's answers placed among the training source's queries: ``ids`` (Q,) and their encodings
    ``phi`` (Q, D) and ``benchmarks`` (Q,), its answers as an evaluation set (indices into ids, scores), the
    training source's evaluations as a (model x query) table ``wide``, the low-rank prior of the pool's answers
    without the model's own row (``prior``), and the training models' evaluation sets the encoder's error is
    measured on (``training``, PRIOR_MODELS of them)."""

    ids: list[str]
    phi: np.ndarray
    benchmarks: np.ndarray
    newcomer: EvaluationSet
    wide: pd.DataFrame
    prior: LowRankPrior
    training: list[EvaluationSet]


@dataclass
class NewcomerSource:
    """The training source's evaluations (``table``: model, query_id, benchmark, score) and its queries' ``encodings``
    as every newcomer of one run is placed against them: each part computed on first use, then kept for the run's
    other models (``seed``: the training sets' draw, the prior's inner split and the estimates')."""

    table: pd.DataFrame
    encodings: pd.DataFrame
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

    @cached_property
    def training(self) -> list[EvaluationSet]:
        """PRIOR_MODELS seeded training models' evaluation sets (indices into ids, scores): encoder_spread's."""
        rng = np.random.default_rng(self.seed)
        sets = []
        for m in [str(m) for m in rng.permutation(self.wide.index.astype(str))[:PRIOR_MODELS]]:
            row = self.wide.loc[m].to_numpy(np.float32)
            keep = np.flatnonzero(~np.isnan(row))
            sets.append((keep, row[keep]))
        return sets

    @cached_property
    def prior(self) -> LowRankPrior:
        """The low-rank prior of all the source's models' answers: every newcomer's that is none of them."""
        return LowRankPrior.fit(self.wide.to_numpy(np.float32), self.benchmarks, seed=self.seed)

    def place(self, store: pd.DataFrame, store_encodings: pd.DataFrame) -> NewcomerData:
        """The model's store (query_id, benchmark, score; ``store_encodings`` of its queries) among the source's
        queries. Its queries outside the source join the query set with their own benchmarks, and a model of the
        source leaves its own row out of the pool's answers: both change the prior, then fitted for this model alone;
        every other model shares ``prior``."""
        own = store.assign(query_id=store["query_id"].astype(str)).drop_duplicates("query_id", keep="last")
        extra = [q for q in own["query_id"] if q not in self.labels.index]
        ids, phi, bench, wide = self.ids, self.phi, self.benchmarks, self.wide
        if extra:  # their columns are all NaN: the training sets' indices stay the same
            ids = ids + extra
            phi = np.concatenate([phi, encoding_matrix(store_encodings, extra)])
            bench = np.array(bench.tolist() + own.set_index("query_id").loc[extra, "benchmark"].astype(str).tolist())
            wide = wide.reindex(columns=ids)
        index = {q: i for i, q in enumerate(ids)}
        newcomer = (np.array([index[q] for q in own["query_id"]]), own["score"].to_numpy(np.float32))
        own_row = str(store["model"].iloc[0]) if "model" in store and len(store) else None
        prior = self.prior
        if extra or own_row in wide.index.astype(str):  # a copy's own answers are not its prior
            pool_scores = wide[wide.index.astype(str) != own_row].to_numpy(np.float32)
            prior = LowRankPrior.fit(pool_scores, bench, seed=self.seed)
        return NewcomerData(ids=ids, phi=phi, benchmarks=bench, newcomer=newcomer, wide=wide, prior=prior,
                            training=self.training)

    def estimate(self, model: Locus, store: pd.DataFrame,
                 store_encodings: pd.DataFrame) -> tuple[NewcomerData, Posterior, Capability]:
        """(its NewcomerData, its posterior embedding, its capability estimates) of the model whose store this is:
        ``place``, then adaptive.estimate_newcomer on the prior ``place`` chose."""
        from locus_model.adaptive import estimate_newcomer  # why: torch

        data = self.place(store, store_encodings)
        posterior, capability = estimate_newcomer(model, data.phi, data.benchmarks, data.newcomer, data.training,
                                                  pool_prior=data.prior, seed=self.seed)
        return data, posterior, capability


def newcomer_estimates(model: Locus, store: pd.DataFrame, store_encodings: pd.DataFrame, source: NewcomerSource,
                       pool: pd.DataFrame, *, shown: int = 5) -> NewcomerEstimates:
    """The onboarded model's estimates from its store (its queries' encodings: ``store_encodings``) against the
    training ``source`` (shared by the run's models) and the pool (its embeddings)."""
    from locus_model.estimates import answer_agreement, answer_likeness  # why: torch

    data, posterior, estimated = source.estimate(model, store, store_encodings)
    newcomer = data.newcomer
    capability = estimated.frame(0)
    others = pool[pool["model"].astype(str) != str(store["model"].iloc[0])]
    names, z = pool_matrix(others)
    scores = data.wide.reindex(index=names).to_numpy(np.float32)
    order, prob = answer_likeness([newcomer], scores, z, posterior, seed=source.seed)
    agree, shared = answer_agreement(scores, newcomer)
    top = order[0][:shown]
    like = pd.DataFrame({"model": [names[i] for i in top], "agreement": agree[top], "shared": shared[top],
                         "p_nearest": prob[0][top]})
    return NewcomerEstimates(capability=capability, answers_like=like)


def estimates_markdown(estimates: NewcomerEstimates) -> tuple[str, str]:
    """(the capability table, the answers-like table) as Markdown for the onboarding partition's metadata."""
    cap = estimates.capability
    rows = pd.DataFrame({
        "benchmark": cap["benchmark"].astype(str),
        "answered (n)": [f"{o:.3f} ({n})" if n else MISSING_MARK for o, n in zip(cap["observed"], cap["n"])],
        "estimate over all its queries": cap["estimate"].map(lambda v: f"{v:.3f}"),
        "90% interval": [f"{lo:.3f} - {hi:.3f}" for lo, hi in zip(cap["lo"], cap["hi"])],
    })
    like = estimates.answers_like
    like_rows = pd.DataFrame({
        "model": like["model"].astype(str),
        "agreement": [f"{a:.1%} of {n}" if n else MISSING_MARK for a, n in zip(like["agreement"], like["shared"])],
        "P(nearest)": like["p_nearest"].map(lambda v: f"{v:.2f}"),
    })
    return (escape_frame(rows).to_markdown(index=False),
            escape_frame(like_rows).to_markdown(index=False)
            + "\n\nagreement: share of the questions both answered where both were right or both wrong; P(nearest): "
              "share of draws of its embedding (its posterior) whose nearest pool model this is")
