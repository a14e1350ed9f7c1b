"""The estimator of what is known of a newcomer: fitted once on a pool, then asked of any evaluation set.

In the scikit-learn manner: ``Estimator(config).fit(pool_scores, benchmarks, router=..., encodings=...)`` does
every fit that depends on the pool alone -- the low-rank completion of the pool's answers and its inner split
(lowrank.LowRankPrior: 1 + folds fits), the benchmarks' coding, the training models the encoder's error is measured
on -- and nothing per newcomer refits it. Then, for the evaluation sets of M newcomers (query indices into the
pool's queries, scores in [0, 1]):

- ``posterior(sets)``: the (M, K) benchmark cells' robust Beta posterior (posterior.CellPosterior): prior mean the
  completion's mean P(correct) over each benchmark's queries, its measured error tau^2 at the sets' size, the
  answers' sums and counts. The completion projects only the answers on queries some pool model answered, so the
  prior's error is measured at that count: a newcomer whose answers are all on queries the pool never saw gets the
  pool's mean with the pool's spread, and its answers carry the estimate. ``EstimatorConfig.off_pool`` chooses
  another prior for such a newcomer: "ability" (the pool's per-benchmark mean shifted by its overall accuracy) or
  "router" (the router's P(correct) at the set encoder's embedding of its answers: the encoder reads query
  encodings, not question ids), each with its error measured on the pool's models (``measured_error``); the
  default is the one measured best (docs/estimates.md);
- ``capability(posterior)``: per-benchmark accuracy over each benchmark's queries with LEVEL intervals (the
  finite-population part: capability.capability_of);
- ``observe(posterior, m, query, score)``: one more graded answer, in place (two additions: microseconds); the
  learning router and the onboarding rounds update the same object;
- ``next_questions(set, posterior, candidates, k)``: the adaptive choice (questions.py) from the same posterior's
  intervals and the completion's factors;
- ``embedding(sets)`` and ``answers_like(set, ...)``: the refined embedding (embedding.py) and the pool models the
  newcomer answers like (likeness.py), with the router's model;
- ``fit_reference(reference)`` / ``reference_scores(capability)``: reference-score estimates (reference.py).

Queries no pool model answered join by ``extended`` (no refit: the completion gives them the pool's mean and no
factor); a newcomer that is a copy of a pool model is estimated by an estimator fitted without that row (the caller's
choice: ``locus_pipeline/newcomers.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from locus_model.estimates.capability import Capability, benchmark_posterior, capability_of
from locus_model.estimates.coding import LEVEL, Benchmarks
from locus_model.estimates.embedding import Posterior, encoder_spread, refine_embeddings
from locus_model.estimates.likeness import answer_agreement, answer_likeness
from locus_model.estimates.lowrank import LowRankPrior, at_powers_of_two, simulate_prior_error
from locus_model.estimates.posterior import ROBUST_WEIGHT, CellPosterior
from locus_model.estimates.questions import choose_adaptive, factor_gain
from locus_model.estimates.reference import ReferenceMap, fit_reference_map, reference_estimates
from locus_model.infer import EvaluationSet
from locus_model.stats.logistic import logit, sigmoid

OFF_POOL_PRIORS = ("pool", "ability", "router")
OFF_POOL_SHARE = 0.5  # a newcomer with more of its answers than this off the pool's queries reads the router's prior
ERROR_MODELS = 200  # pool models the router prior's error is measured on


@dataclass(frozen=True)
class EstimatorConfig:
    """How a newcomer is estimated from a pool."""

    rank: int = 16  # components of the pool's low-rank completion
    folds: int = 10  # groups of the inner split that measures the prior's error
    reps: int = 4  # random draws of n answers per pool model when measuring that error
    samples: int = 64  # posterior draws (accuracy, embedding)
    robust: float = ROBUST_WEIGHT  # the flat component's prior weight: answers that contradict the prior win
    level: float = LEVEL  # the intervals' nominal coverage
    spread_models: int = 64  # training models the encoder's error at n is measured on
    local_share: float | None = 0.25  # the prior's error measured on this share of the inner split's draws nearest
    # the newcomer's prior means (where it falls in the pool: a mid-pool model is not given the edge models' width);
    # None: one width for the pool
    off_pool: str = "pool"  # the prior of newcomers mostly off the pool's queries: "pool" (the completion: the pool's
    # mean, its error at the answers it can project), "ability" (the pool's per-benchmark mean shifted in logit by the
    # newcomer's accuracy over what the pool expects of its questions) or "router" (the router's P(correct))
    seed: int = 0  # every random draw: the error measures, the posterior's samples, the reference map

    def __post_init__(self) -> None:
        if self.off_pool not in OFF_POOL_PRIORS:
            raise ValueError(f"EstimatorConfig.off_pool = {self.off_pool!r}: use one of {OFF_POOL_PRIORS}")


@dataclass
class Estimator:
    """Fitted once on a pool (``fit``), then asked of any newcomer's evaluation sets (the module docstring)."""

    config: EstimatorConfig = field(default_factory=EstimatorConfig)

    # ------------------------------------------------------------------------------------------------- fitting
    def fit(
        self,
        pool_scores: np.ndarray,
        benchmarks: np.ndarray,
        *,
        router=None,
        encodings: np.ndarray | None = None,
        asked_from: np.ndarray | None = None,
    ) -> "Estimator":
        """Fit on the pool's answers (P, Q), NaN = not asked, over queries of these benchmarks (Q,); with the
        router (locus_model.router.Router) and the queries' encodings (Q, D): the embedding and answers_like too.
        ``asked_from``: the queries newcomers are asked from (their answers are drawn among them when the prior's
        error is measured; None: all)."""
        scores = np.asarray(pool_scores, np.float32)
        if scores.ndim != 2 or scores.shape[1] != len(benchmarks) or len(scores) < 2:
            raise ValueError(
                f"Estimator.fit: pool_scores {scores.shape} must be (models >= 2, {len(benchmarks)} "
                "queries). How to fix: give the pool's answers as a model x query table over the same "
                "queries, in the same order, as benchmarks"
            )
        if encodings is not None and len(encodings) != len(benchmarks):
            raise ValueError(
                f"Estimator.fit: {len(encodings)} encodings for {len(benchmarks)} queries. How to fix: "
                "one encoding per query, in the benchmarks' order"
            )
        cfg = self.config
        self.prior_ = LowRankPrior.fit(scores, benchmarks, rank=cfg.rank, folds=cfg.folds, seed=cfg.seed)
        self.router_ = router
        self.encodings_ = None if encodings is None else np.asarray(encodings, np.float32)
        self.asked_from_ = None if asked_from is None else np.asarray(asked_from, np.int64)
        self._derive()
        return self

    def _derive(self) -> None:
        self.coding_ = Benchmarks.of(self.prior_.benchmarks)
        answered = ~np.isnan(self.prior_.scores)
        self.pool_answered_ = answered.any(axis=0)  # (Q,) queries some pool model answered
        self.router_errors_: dict[tuple[str, int], np.ndarray] = {}  # (kind, n): tau^2 (K,)
        self.pool_known_ = (answered.any(axis=0) @ self.coding_.onehot) > 0  # (K,) the pool answered some query of b
        rng = np.random.default_rng(self.config.seed)
        rows = rng.permutation(len(answered))[: self.config.spread_models]
        self.training_ = [(np.flatnonzero(answered[r]), self.prior_.scores[r, answered[r]]) for r in rows]
        self.spreads_: dict[int, np.ndarray] = {}
        self.reference_: ReferenceMap | None = None

    def extended(self, benchmarks: np.ndarray, encodings: np.ndarray | None = None) -> "Estimator":
        """This estimator over more queries no pool model answered (their benchmarks (E,) and encodings (E, D),
        appended after the pool's): no fit again; the prior's error is measured afresh (the benchmarks changed)."""
        if len(benchmarks) == 0:
            return self
        out = Estimator(self.config)
        out.prior_ = self.prior_.extended(np.asarray(benchmarks).astype(str))
        out.router_ = self.router_
        out.asked_from_ = self.asked_from_
        out.encodings_ = None
        if self.encodings_ is not None:
            if encodings is None or len(encodings) != len(benchmarks):
                raise ValueError("Estimator.extended: give the extra queries' encodings, one per query")
            out.encodings_ = np.concatenate([self.encodings_, np.asarray(encodings, np.float32)])
        out._derive()
        return out

    @property
    def benchmarks(self) -> tuple[str, ...]:
        return tuple(self.coding_.names)

    # ------------------------------------------------------------------------------------------------- the posterior
    def posterior(self, sets: Sequence[EvaluationSet]) -> CellPosterior:
        """(M, K) benchmark cells of M newcomers: the completion's prior means from their answers, the prior's
        measured error at their median size, their answers' sums and counts."""
        for i, _ in sets:
            if len(i) and (np.min(i) < 0 or np.max(i) >= self.coding_.Q):
                raise ValueError(
                    f"Estimator.posterior: a query index outside the estimator's {self.coding_.Q} "
                    "queries. How to fix: place the newcomer's answers among the pool's queries first "
                    "(extended() for queries the pool never answered)"
                )
        if not sets:
            raise ValueError(
                "Estimator.posterior: no evaluation sets. How to fix: give each newcomer's (indices, scores)"
            )
        n = max(int(np.median([len(i) for i, _ in sets])), 1)
        mean, var = self._prior(sets, n)
        return benchmark_posterior(mean, var, sets, self.coding_, robust=self.config.robust)

    def off_pool(self, sets: Sequence[EvaluationSet]) -> np.ndarray:
        """(M,) bool: the sets whose answers are mostly (over OFF_POOL_SHARE) on queries no pool model answered,
        read by the ``off_pool`` prior ("router" where the estimator has the router)."""
        share = np.array([np.mean(~self.pool_answered_[np.asarray(i, np.int64)]) if len(i) else 0.0 for i, _ in sets])
        usable = self.config.off_pool == "ability" or (
            self.config.off_pool == "router" and self.router_ is not None and self.encodings_ is not None
        )
        return (share > OFF_POOL_SHARE) & usable

    def _prior(self, sets: Sequence[EvaluationSet], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(prior means (M, K), their measured error (M, K)) of the sets: the completion's, its error at each set's
        count of answers on queries the pool answered (what it projects); or the router's at size n for the sets
        off the pool's queries (off_pool)."""
        mean = self.coding_.means(self.prior_.full.proba(sets))
        mean = np.where(np.isnan(mean), self.prior_.full.mean.mean(), mean)
        on = np.array([int(self.pool_answered_[np.asarray(i, np.int64)].sum()) for i, _ in sets])
        var = np.empty(mean.shape)
        for k in np.unique(on):
            rows = on == k
            var[rows] = self.prior_.error_at(
                int(k), queries=self.asked_from_, means=mean[rows], share=self.config.local_share
            )
        off = self.off_pool(sets)
        if off.any():
            mine = [s for s, o in zip(sets, off) if o]
            means = self.router_means if self.config.off_pool == "router" else self.ability_means
            mean[off] = means(mine)
            var[off] = self.measured_error(self.config.off_pool, means, n)
        return mean, var

    def ability_means(self, sets: Sequence[EvaluationSet]) -> np.ndarray:  # (M, K)
        """The pool's mean per benchmark shifted in logit by each newcomer's ability: the logit of its accuracy less
        that of the pool's mean P(correct) on the questions it answered (a one-factor model; no question shared
        needed)."""
        base = logit(self.coding_.means(self.prior_.full.mean[None].astype(np.float64))[0])  # (K,)
        out = np.empty((len(sets), self.coding_.K))
        for m, (idx, s) in enumerate(sets):
            idx = np.asarray(idx, np.int64)
            right, count = float(np.sum(s)) + 0.5, len(idx) + 1.0  # half a pseudo-answer each way: finite logits
            expected = (float(self.prior_.full.mean[idx].sum()) + 0.5) / count
            out[m] = sigmoid(base + logit(right / count) - logit(expected))
        return out

    def measured_error(self, kind: str, means, n: int) -> np.ndarray:
        """tau^2 (K,) of a prior ``means(sets) -> (M, K)`` at n: up to ERROR_MODELS seeded pool models, each from n
        random answers, against its accuracy over all of each benchmark's queries (simulate_prior_error; optimistic
        for the router, trained on these models' answers). Measured once per (kind, power of two), interpolated in
        log n."""

        def at(k: int) -> np.ndarray:
            if (kind, k) not in self.router_errors_:
                rng = np.random.default_rng(self.config.seed)
                rows = rng.permutation(len(self.prior_.scores))[:ERROR_MODELS]
                self.router_errors_[kind, k] = simulate_prior_error(
                    lambda r, sets: means(sets),
                    self.prior_.scores[rows],
                    self.prior_.benchmarks,
                    k,
                    queries=self.asked_from_,
                    reps=self.config.reps,
                    seed=self.config.seed,
                )
            return self.router_errors_[kind, k]

        return at_powers_of_two(n, at)

    def router_means(self, sets: Sequence[EvaluationSet]) -> np.ndarray:  # (M, K)
        """The router's mean P(correct) over each benchmark's queries for newcomers embedded from their answers (one
        forward pass of the set encoder, their group profiles from the same answers)."""
        encodings = self._need_router("router_means")
        dense = np.full((len(sets), self.coding_.Q), np.nan, np.float32)
        for m, (idx, s) in enumerate(sets):
            dense[m, np.asarray(idx, np.int64)] = s
        z = self.router_.embed(encodings, sets)
        profiles = self.router_.profiles(encodings, dense, self.prior_.benchmarks)
        mean = self.coding_.means(self.router_.proba(z, profiles, encodings))
        return np.where(np.isnan(mean), 0.5, mean)

    def router_error_at(self, n: int) -> np.ndarray:
        """tau^2 (K,) of the router's prior at n (measured_error)."""
        return self.measured_error("router", self.router_means, n)

    def empty_posterior(self, M: int = 1) -> CellPosterior:
        """M newcomers before any answer (``refresh`` gives each its prior once it has answers)."""
        return CellPosterior.from_prior(
            np.full((M, self.coding_.K), 0.5), 0.25, robust=self.config.robust, centred=True
        )

    def observe(self, posterior: CellPosterior, m: int, query: int, score: float) -> None:
        """One more graded answer of newcomer m (a row of ``posterior``) on query ``query``: in place (microseconds:
        the learning router's and the onboarding rounds' one update rule)."""
        posterior.observe(m, int(self.coding_.codes[query]), float(score))

    def refresh(self, posterior: CellPosterior, m: int, evaluation_set: EvaluationSet) -> None:
        """Newcomer m's prior from all its answers so far (``evaluation_set``): the completion's projection (one
        r x r solve) and the prior's error at its n (measured once per power of two): no fit, milliseconds. The
        answers' sums and counts are ``observe``'s and stay as they are."""
        mean, var = self._prior([evaluation_set], max(len(evaluation_set[0]), 1))
        fresh = CellPosterior.from_prior(mean, var)
        posterior.prior_mean[m], posterior.prior_var[m] = fresh.prior_mean[0], fresh.prior_var[0]

    def capability(self, posterior: CellPosterior, *, seed: int | None = None) -> Capability:
        """Per-benchmark accuracy over each benchmark's queries with LEVEL intervals; a benchmark the pool never saw:
        the rate itself (capability.capability_of)."""
        return capability_of(
            posterior,
            self.coding_,
            rate_only=~self.pool_known_,
            level=self.config.level,
            samples=self.config.samples,
            seed=self.config.seed if seed is None else seed,
        )

    def estimate(self, sets: Sequence[EvaluationSet]) -> Capability:
        """capability(posterior(sets))."""
        return self.capability(self.posterior(sets))

    # ------------------------------------------------------------------------------------------------- questions
    def next_questions(
        self, evaluation_set: EvaluationSet, capability: Capability, candidates: np.ndarray, k: int, *, row: int = 0
    ) -> np.ndarray:
        """The next ``k`` queries (indices) among ``candidates`` (Q,) bool for the newcomer of this evaluation set
        whose capability (row ``row``) is shown: the widest interval's most informative question (questions.py)."""
        idx = np.asarray(evaluation_set[0], dtype=np.int64)
        seen = np.zeros(self.coding_.Q, dtype=bool)
        seen[idx] = True
        proba = self.prior_.full.proba([evaluation_set])[0] if len(idx) else self.prior_.full.mean
        gain = factor_gain(
            self.prior_.full.basis, proba, seen, self.coding_.codes, self.coding_.K, alpha=self.prior_.full.alpha
        )
        widths = capability.hi[row] - capability.lo[row]
        return choose_adaptive(gain, widths, np.asarray(candidates, dtype=bool) & ~seen, k, level=self.config.level)

    # ------------------------------------------------------------------------------------------------- the embedding
    def _need_router(self, what: str) -> np.ndarray:
        """The queries' encodings (Q, D), or a ValueError where the router or the encodings were not given."""
        if self.router_ is None or self.encodings_ is None:
            raise ValueError(
                f"Estimator.{what} needs the router and the queries' encodings. How to fix: "
                "fit(..., router=, encodings=)"
            )
        return self.encodings_

    def embedding(self, sets: Sequence[EvaluationSet]) -> Posterior:
        """The newcomers' refined embeddings with their Laplace spread (embedding.py), the prior's scale the encoder's
        error at the sets' median size (measured once per size on the pool's training models)."""
        encodings = self._need_router("embedding")
        n = max(int(np.median([len(i) for i, _ in sets])), 1)
        if n not in self.spreads_:
            self.spreads_[n] = encoder_spread(self.router_.model, encodings, self.training_, n, seed=self.config.seed)
        return refine_embeddings(self.router_.model, encodings, sets, self.spreads_[n])

    def answers_like(
        self,
        evaluation_set: EvaluationSet,
        pool_scores: np.ndarray,
        pool_embeddings: np.ndarray,
        *,
        embedding: Posterior | None = None,
        shown: int = 5,
    ) -> pd.DataFrame:
        """The ``shown`` pool models the newcomer answers most like: row (into pool_scores (P', Q) / pool_embeddings
        (P', d)), agreement, shared, p_nearest (likeness.answer_likeness)."""
        post = self.embedding([evaluation_set]) if embedding is None else embedding
        order, prob = answer_likeness(
            [evaluation_set], pool_scores, pool_embeddings, post, samples=self.config.samples, seed=self.config.seed
        )
        agree, shared = answer_agreement(pool_scores, evaluation_set)
        top = order[0][:shown]
        return pd.DataFrame({"row": top, "agreement": agree[top], "shared": shared[top], "p_nearest": prob[0][top]})

    # ------------------------------------------------------------------------------------------------- references
    def fit_reference(self, reference: pd.DataFrame) -> ReferenceMap:
        """The map from per-benchmark accuracy to reference scores (rows aligned with the pool's models, one numeric
        column per score), fitted on the pool's models that have every score and an answer on every benchmark."""
        accuracy = self.coding_.means(self.prior_.scores.astype(np.float64))
        ok = ~(reference.isna().any(axis=1).to_numpy() | np.isnan(accuracy).any(axis=1))
        self.reference_ = fit_reference_map(accuracy[ok], reference[ok].reset_index(drop=True))
        return self.reference_

    def reference_scores(self, capability: Capability) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(estimate, lo, hi), each (M, R), of the fitted reference scores."""
        if self.reference_ is None:
            raise ValueError("Estimator.reference_scores: no reference map. How to fix: fit_reference(table) first")
        return reference_estimates(capability, self.reference_, seed=self.config.seed)


__all__ = ["Estimator", "EstimatorConfig", "OFF_POOL_PRIORS"]
