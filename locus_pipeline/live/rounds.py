"""The rounds of ``locus onboard --endpoint``: which questions to ask next (``--choice random|adaptive``,
locus_model.estimates.questions), the newcomer's capability estimates after each round (the ones its onboarding
partition shows: newcomers.NewcomerSource's estimator, fitted once for the session), its progress line with the
answers the ``--until POINTS`` target needs, and the stopping rule.

A round costs what its answers cost: each graded answer is one ``Estimator.observe`` (two additions), then the
newcomer's prior is refreshed from its answers (``Estimator.refresh``: a projection, no fit)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from locus_model.estimates import Capability, CellPosterior
from locus_model.estimates.questions import random_order, stop_reached
from locus_pipeline.newcomers import NewcomerSource


class Rounds:
    """The state between rounds: the training source and its estimator (``newcomer_source``: fitted once for the
    session), the candidate questions (``questions``: query_id, ...; those among the source's queries), the
    newcomer's posterior and the latest estimates."""

    def __init__(
        self, home, questions: pd.DataFrame, *, choice: str = "random", until: float | None = None, seed: int = 0
    ) -> None:
        self.choice, self.until, self.seed = choice, until, seed
        self.questions = questions
        table = home.read_table("evaluation_table", columns=["model", "query_id", "benchmark", "score"])
        self.newcomer_source = NewcomerSource(table, home.read_table("query_encodings"), seed=seed)
        index = {q: i for i, q in enumerate(self.newcomer_source.ids)}
        self.where = np.array([index.get(str(q), -1) for q in questions["query_id"]])  # question -> source query
        self.posterior: CellPosterior | None = None
        self.answered: list[tuple[int, float]] = []  # (source query, score) in the order observed
        self.observed = 0  # records of ``done`` observed so far
        self.capability: Capability | None = None
        self.lines: list[dict] = []  # one per round: answers, spend, the widest interval and its benchmark

    @property
    def estimator(self):
        return self.newcomer_source.estimator

    def estimate(self, done: list[dict]) -> Capability:
        """Observe the answers since the last call (each: query_id, benchmark, score; ``done`` grows), refresh the
        prior, estimate. An answer to a question outside the source's queries is not part of the estimate."""
        index = {q: i for i, q in enumerate(self.newcomer_source.ids)}
        est = self.estimator
        if self.posterior is None:
            self.posterior = est.empty_posterior()
        for record in done[self.observed :]:
            q = index.get(str(record["query_id"]))
            if q is not None:
                est.observe(self.posterior, 0, q, float(record["score"]))
                self.answered.append((q, float(record["score"])))
        self.observed = len(done)
        idx = np.array([q for q, _ in self.answered], dtype=np.int64)
        scores = np.array([s for _, s in self.answered], dtype=np.float32)
        est.refresh(self.posterior, 0, (idx, scores))
        self.capability = est.capability(self.posterior)
        return self.capability

    def more_needed(self) -> int | None:
        """Answers the ``until`` target needs beyond those so far, at the current rate (the widest interval shrinks
        about as 1 / sqrt(n)): None without a target or answers, 0 when met."""
        if self.until is None or self.capability is None or not self.answered:
            return None
        width = self.capability.widest()[1]
        n = len(self.answered)
        return 0 if width < self.until else max(1, math.ceil(n * (width / self.until) ** 2) - n)

    def progress(self, answers: int, spent: float) -> str:
        """The round's line: answers so far, spend, the widest 90% interval and its benchmark, what the target needs."""
        assert self.capability is not None  # estimate() runs before each round's line
        name, width = self.capability.widest()
        more = self.more_needed()
        self.lines.append(
            {
                "answers": answers,
                "cost_usd": round(spent, 6),
                "widest_benchmark": name,
                "widest_points": round(width, 2),
                "more_needed": more,
            }
        )
        goal = ""
        if self.until is not None:
            goal = f" (until {self.until:g}" + (f": about {more} more answers at this rate)" if more else ")")
        return f"{answers} answers, ${spent:.4f}: widest 90% interval {width:.1f} points{goal}, {name}"

    def done(self) -> bool:
        """The stopping rule: every benchmark's 90% interval narrower than ``until`` points."""
        return self.capability is not None and stop_reached(self.capability, self.until)

    def next(self, asked: np.ndarray, skip: np.ndarray, k: int) -> np.ndarray:
        """The next ``k`` candidate questions (positions in ``questions``), none asked or skipped. ``random``, and
        the first round of ``adaptive`` (no answers to estimate from yet): the seeded random order."""
        n = len(self.questions)
        if self.choice == "random" or self.capability is None:
            return random_order(n, asked, skip, k, seed=self.seed)
        allowed = np.ones(n, dtype=bool)
        allowed[np.asarray(asked, dtype=np.int64)] = False
        allowed[np.asarray(skip, dtype=np.int64)] = False
        candidates = np.zeros(len(self.newcomer_source.ids), dtype=bool)
        candidates[self.where[allowed & (self.where >= 0)]] = True
        evaluation = (
            np.array([q for q, _ in self.answered], dtype=np.int64),
            np.array([s for _, s in self.answered], dtype=np.float32),
        )
        picks = self.estimator.next_questions(evaluation, self.capability, candidates, k)
        back = {int(w): i for i, w in enumerate(self.where) if w >= 0}
        return np.array([back[int(p)] for p in picks], dtype=np.int64)

    def table_rows(self) -> pd.DataFrame:
        """The latest estimates: benchmark, estimate, lo, hi, observed, n."""
        return self.capability.frame(0) if self.capability is not None else pd.DataFrame()
