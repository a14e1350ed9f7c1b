"""The rounds of ``locus onboard --endpoint``: which questions to ask next (``--choice random|adaptive``,
locus_model.adaptive), the model's capability estimates after each round (the ones its onboarding partition shows:
newcomers.NewcomerSource, adaptive.estimate_newcomer; the training source and its low-rank prior computed once for
the session, not once a round), its progress line, and the stopping rule ``--until POINTS``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from locus_model.adaptive import next_adaptive, random_order, stop_reached, widest
from locus_model.estimates import Capability
from locus_pipeline.newcomers import NewcomerSource


class Rounds:
    """The state between rounds: the home's checkpoint model, its training source's evaluations and query
    encodings (``newcomer_source``: what every round's estimate shares), the candidate questions (``questions``:
    query_id, ...), and the latest estimates."""

    def __init__(self, home, questions: pd.DataFrame, model, *, choice: str = "random", until: float | None = None,
                 seed: int = 0) -> None:
        self.model, self.choice, self.until, self.seed = model, choice, until, seed
        self.questions = questions
        self.table = home.read_table("evaluation_table", columns=["model", "query_id", "benchmark", "score"])
        self.encodings = home.read_table("query_encodings")
        self.newcomer_source = NewcomerSource(self.table, self.encodings, seed=seed)
        self.capability: Capability | None = None
        self.lines: list[dict] = []  # one per round: answers, spend, the widest interval and its benchmark

    def estimate(self, done: list[dict]) -> Capability:
        """Re-estimate from the answers so far (each: query_id, benchmark, score)."""
        store = pd.DataFrame(done)[["query_id", "benchmark", "score"]].astype({"score": float})
        self.data, self.posterior, self.capability = self.newcomer_source.estimate(self.model, store,
                                                                                   self.encodings.iloc[:0])
        return self.capability

    def progress(self, answers: int, spent: float) -> str:
        """The round's line: answers so far, spend, the widest 90% interval and its benchmark."""
        name, width = widest(self.capability)
        self.lines.append({"answers": answers, "cost_usd": round(spent, 6), "widest_benchmark": name,
                           "widest_points": round(width, 2)})
        goal = f" (until {self.until:g})" if self.until is not None else ""
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
        index = {q: i for i, q in enumerate(self.data.ids)}
        where = np.array([index.get(str(q), -1) for q in self.questions["query_id"]])  # question -> pool query
        allowed = np.ones(n, dtype=bool)
        allowed[np.asarray(asked, dtype=np.int64)] = False
        allowed[np.asarray(skip, dtype=np.int64)] = False
        candidates = np.zeros(len(self.data.ids), dtype=bool)
        candidates[where[allowed & (where >= 0)]] = True
        picks = next_adaptive(self.model, self.data.phi, self.data.benchmarks, self.data.newcomer, self.posterior,
                              self.capability, candidates, k, seed=self.seed)
        back = {int(w): i for i, w in enumerate(where) if w >= 0}
        return np.array([back[int(p)] for p in picks], dtype=np.int64)

    def table_rows(self) -> pd.DataFrame:
        """The latest estimates: benchmark, estimate, lo, hi, observed, n."""
        return self.capability.frame(0) if self.capability is not None else pd.DataFrame()
