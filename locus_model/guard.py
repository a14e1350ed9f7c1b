"""The guard: a router that rests on thin evidence degrades toward calling the best model, not below it (issue 57).

Where the pool is small, or a newcomer is stronger than every model the predictor was trained on, P(correct) can rank
a weaker known model above the model that is plainly the most accurate on its own evaluations. The guard routes a
query to another candidate only where that candidate's P(correct) beats the **reference's** by more than ``margin``;
the reference is the candidate of highest **standing** (each model's accuracy on its own evaluations, per query group
weighted by the groups' shares: locus_model.router.Router.standing, a closed-form fact of the model's answers, never
the predictor's view of it). In score terms every candidate but the reference is handicapped by ``margin``:

    routing score_m = P_m - margin * [m is not the reference]

and the routing score is what ranks (locus_model.routing.route's cost-aware rule reads it in place of P). P(correct)
itself is untouched: calibration, AUC and the estimates read P. With margin 0 the guard is the plain argmax of P.

GUARD_MARGIN = 0.02 was picked among 0.02, 0.05 and 0.1 after seeing the issue-57 case (docs/experiments.md, trials
(e) and (f)): the wider margins send most of a large pool's traffic to one model (metabench @256: -3.5 and -5.4
points), 0.02 leaves large pools as they were and lifts the case from -3.2 to a tie; it was then checked on draws not
used to pick it (AlpacaEval 1 and metabench 8 x 500: ties; bench/README.md, "Small data").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GUARD_MARGIN = 0.02


def check_margin(margin) -> float:
    """``margin`` as a float in [0, 1); else a ValueError saying what to give."""
    ok = isinstance(margin, (int, float, np.integer, np.floating)) and not isinstance(margin, (bool, np.bool_))
    if not ok or not 0.0 <= float(margin) < 1.0:
        raise ValueError(f"guard margin {margin!r}: give a number in [0, 1), in P(correct) units (0 = no guard; "
                         f"the default {GUARD_MARGIN} = two points)")
    return float(margin)


@dataclass(frozen=True)
class Guard:
    """The guard over a set of candidates: their standing (M,) and the margin."""

    standing: np.ndarray  # (M,) each candidate's accuracy on its own evaluations (Router.standing)
    margin: float = GUARD_MARGIN

    def __post_init__(self) -> None:
        object.__setattr__(self, "standing", np.asarray(self.standing, np.float64).reshape(-1))
        object.__setattr__(self, "margin", check_margin(self.margin))

    def reference(self, among: np.ndarray | None = None) -> int:
        """The candidate of highest standing among ``among`` (indices; all when None), the first of equals."""
        rows = np.arange(len(self.standing)) if among is None else np.asarray(among, np.int64).reshape(-1)
        if len(rows) == 0:
            raise ValueError("Guard.reference: no candidate to choose from")
        return int(rows[np.argmax(self.standing[rows])])

    def handicap(self, among: np.ndarray | None = None) -> np.ndarray:
        """(len(among),) margin for every candidate of ``among`` but the reference, 0 for it."""
        rows = np.arange(len(self.standing)) if among is None else np.asarray(among, np.int64).reshape(-1)
        out = np.full(len(rows), self.margin)
        if len(rows):
            out[rows == self.reference(rows)] = 0.0
        return out

    def scores(self, probs: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
        """Routing scores of the candidates ``among`` (all when None): their P(correct) rows (len(among),) or
        (len(among), Q), each less its handicap."""
        p = np.asarray(probs, np.float64)
        h = self.handicap(among)
        return p - (h if p.ndim == 1 else h[:, None])

    def per_query_handicap(self, known: np.ndarray) -> np.ndarray:
        """(M, Q) the handicap where each query's candidates are the rows ``known`` (M, Q) marks: the reference is
        the highest standing among them (route_many, the protocol's labelled models)."""
        known = np.asarray(known, bool)
        ranked = np.where(known, self.standing[:, None], -np.inf)
        ref = np.argmax(ranked, axis=0)  # (Q,) first of equals
        out = np.full(known.shape, self.margin)
        out[ref, np.arange(known.shape[1])] = 0.0
        return out


__all__ = ["GUARD_MARGIN", "Guard", "check_margin"]
