"""The routing policy: the rules that turn P(correct) into a choice, and the one function that applies the guard.

A :class:`RoutingPolicy` holds what an operator (``locus serve``), an evaluation (``locus evaluate``) or a request
chooses, validated once when it is made: the guard margin, the quality weight and the caps. None of it is trained,
so none of it is stored in a checkpoint: a checkpoint holds what training fitted (locus_model.router), and the same
checkpoint is served or evaluated under any policy.

The guard: where the pool is small or a newcomer is stronger than every model the predictor was trained on,
P(correct) can rank a weaker model above the model that is plainly the most accurate on its own evaluations. So a
query leaves the candidate of highest **standing** (each model's accuracy on its own evaluations over the training
queries' group shares: locus_model.router.Router.standing, a fact of the model's answers, not the predictor's view)
(the **incumbent**: it keeps every query no other candidate clearly wins) only for a P(correct) more than
``guard_margin`` higher. In score terms every candidate but that incumbent is
handicapped by the margin:

    routing score_m = P_m - margin * [m is not the incumbent]

and the routing score is what ranks (:func:`routing_scores`; locus_model.routing.route's cost-aware rule reads it in
place of P). P(correct) itself is untouched: calibration, AUC and the estimates read P. With margin 0 the guard is
the plain argmax of P. The default margin of two points leaves large pools' routing as it was and keeps a small
pool's routing from falling below its best model; the figures that chose it are in bench/README.md ("Small data").

The measured guard (``guard_margin="measured"``) makes the margin follow what the router knows: P's error measured per
query group on the validation answers (locus_model.router.measure_noise, kept in the checkpoint), so another candidate
wins only where it is better with 95% probability (:func:`measured_margin`). A policy made without a margin routes
under DEFAULT_GUARD (:func:`check_margin`: the one place "None means the default" is read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from locus_model.routing.costs import check_cost
from locus_model.routing.errors import QualityWeightError, RoutingError

GUARD_MARGIN = 0.02  # in P(correct) units: two points
MEASURED = "measured"  # the guard margin that follows the router's measured noise (measured_margin)
GUARD_Z = 1.645  # the measured margin: another candidate wins where it is better with 95% probability (one-sided)
DEFAULT_GUARD: float | str = GUARD_MARGIN  # what a policy without a guard margin routes under: the one default


def check_quality_weight(quality_weight) -> float:
    """``quality_weight`` as a float in [0, 1]; else a QualityWeightError."""
    ok = (
        isinstance(quality_weight, (int, float, np.integer, np.floating))
        and not isinstance(quality_weight, (bool, np.bool_))
        and 0.0 <= quality_weight <= 1.0
    )
    if not ok:
        raise QualityWeightError(
            f"quality_weight={quality_weight} must be in [0, 1] (1 = best P(correct) whatever "
            "the cost, 0 = the cheapest model)"
        )
    return float(quality_weight)


def check_margin(margin) -> float | str:
    """The guard margin as given: None -> the default (DEFAULT_GUARD, the one place it is chosen), ``"measured"``
    (the router's measured noise), or a float in [0, 1) (a fixed margin); else a RoutingError (a ValueError) saying
    what to give."""
    if margin is None:
        return DEFAULT_GUARD
    if isinstance(margin, str) and margin.strip().lower() == MEASURED:
        return MEASURED
    ok = isinstance(margin, (int, float, np.integer, np.floating)) and not isinstance(margin, (bool, np.bool_))
    if not ok or not 0.0 <= float(margin) < 1.0:
        raise RoutingError(
            f"guard margin {margin!r}: give a number in [0, 1), in P(correct) units (0 = no guard; "
            f"{GUARD_MARGIN} = two points), or {MEASURED!r} (the router's measured noise per query group)"
        )
    return float(margin)


def measured_margin(noise: float | np.ndarray) -> float | np.ndarray:
    """The margin of the measured guard from P's measured error on each query (locus_model.router.Router.query_noise):
    two models' errors, independent, differ by sqrt(2) x noise; another candidate wins only beyond GUARD_Z of that
    (better than the incumbent with 95% probability given what the validation answers say). Kept below 1."""
    return np.minimum(GUARD_Z * math.sqrt(2.0) * np.asarray(noise, np.float64), 0.99)


def guard_margins(guard_margin: float | str, noise: float | np.ndarray | None) -> float | np.ndarray:
    """The margin the guard applies: a fixed ``guard_margin`` as it is; ``"measured"``: measured_margin of ``noise``
    (Q,) per query, GUARD_MARGIN where the router carries no measured noise (a checkpoint from before)."""
    if guard_margin == MEASURED:
        return GUARD_MARGIN if noise is None else measured_margin(noise)
    return float(guard_margin)


@dataclass(frozen=True)
class RoutingPolicy:
    """How a query is routed: ``w * routing score - (1 - w) * cost / max cost`` over the candidates within the caps,
    the routing score being P(correct) under the guard (locus_model.routing.route)."""

    guard_margin: float | str | None = None  # another candidate than the incumbent wins only by more (0: none;
    # "measured": the router's measured noise per query group; None: DEFAULT_GUARD)
    quality_weight: float = 1.0  # w: 1 = the best P(correct) whatever the cost, 0 = the cheapest candidate
    max_cost: float | None = None  # only candidates that cost at most this per query (None: no cap)
    max_params: float | None = None  # only candidates of at most this many billion parameters (None: no cap)

    def __post_init__(self) -> None:
        object.__setattr__(self, "guard_margin", check_margin(self.guard_margin))
        object.__setattr__(self, "quality_weight", check_quality_weight(self.quality_weight))
        for cap in ("max_cost", "max_params"):
            if getattr(self, cap) is not None:
                object.__setattr__(self, cap, float(check_cost(getattr(self, cap), cap)))

    @property
    def uses_cost(self) -> bool:
        """Whether cost enters the ranking (w < 1 or a cost cap): then a candidate of unknown cost is left out."""
        return self.quality_weight < 1 or self.max_cost is not None

    @property
    def lam(self) -> float:
        """lambda of ``P - lambda * normalised cost``: (1 - w) / w (infinite at w = 0)."""
        w = self.quality_weight
        return math.inf if w == 0 else (1.0 - w) / w

    @property
    def margin(self) -> float | str:
        """``guard_margin`` as __post_init__ left it (check_margin: a float or MEASURED, never None)."""
        if self.guard_margin is None:
            raise RoutingError(
                "RoutingPolicy: guard_margin is None after __post_init__ (check_margin gives the default)"
            )
        return self.guard_margin

    @property
    def fixed_margin(self) -> float:
        """The fixed guard margin, for a caller that applies one margin to every query; a RoutingError for the
        measured guard, whose margin depends on each query's noise (:meth:`margins`)."""
        margin = self.margin
        if isinstance(margin, str):
            raise RoutingError(
                f"guard margin {margin!r}: this takes a fixed margin (a number in [0, 1)); the measured guard needs "
                "each query's noise (RoutingPolicy.margins)"
            )
        return margin

    def margins(self, noise: float | np.ndarray | None) -> float | np.ndarray:
        """The margin applied on each query (guard_margins), given P's measured error on each (Router.query_noise)."""
        return guard_margins(self.margin, noise)

    def describe_guard(self) -> str:
        """The guard in words (a run's metadata, `locus evaluate`)."""
        if self.guard_margin == MEASURED:
            return (
                "guarded toward the model of highest standing (another wins only where it is better with 95% "
                f"probability: a margin of {GUARD_Z:g} x sqrt(2) x P's measured error on the query's group)"
            )
        if self.guard_margin == 0:
            return "no guard (the highest P(correct) wins)"
        return (
            f"guarded toward the model of highest standing (another wins only by more than "
            f"{self.guard_margin:g} of P(correct))"
        )


def incumbents(standing: np.ndarray, known: np.ndarray) -> np.ndarray:
    """(Q,) the guard's incumbent of each query: the candidate of highest ``standing`` (M,) among the rows ``known``
    (M, Q) marks, the first of equals; -1 for a query with no candidate. The one place the incumbent is chosen."""
    s = np.asarray(standing, np.float64).reshape(-1)
    k = np.asarray(known, bool).reshape(len(s), -1)
    ref = np.argmax(np.where(k, s[:, None], -np.inf), axis=0)
    return np.where(k.any(axis=0), ref, -1)


def incumbent(standing: np.ndarray, among: np.ndarray | None = None) -> int:
    """The guard's incumbent: the candidate of highest standing among ``among`` (indices; all when None), the first
    of equals."""
    s = np.asarray(standing, np.float64).reshape(-1)
    known = np.zeros(len(s), bool)
    known[np.arange(len(s)) if among is None else np.asarray(among, np.int64).reshape(-1)] = True
    if not known.any():
        raise RoutingError("the guard's incumbent: no candidate to choose from")
    return int(incumbents(s, known)[0])


def routing_scores(
    probs: np.ndarray, standing: np.ndarray | None, guard_margin: float | np.ndarray, known: np.ndarray | None = None
) -> np.ndarray:  # (M,) or (M, Q)
    """What ranks: P(correct) ``probs`` (M,) or (M, Q) less the guard's handicap, ``guard_margin`` (one, or (Q,) per
    query: RoutingPolicy.margins) for every candidate but the incumbent (:func:`incumbents`: the candidate of highest
    ``standing`` (M,) among each query's candidates, the rows ``known`` (M,) or (M, Q) marks; all when None). A query
    with no candidate has no incumbent (every row handicapped). No standing: P(correct) as it is (a method without a
    guard). The one place the guard is applied."""
    p = np.asarray(probs, np.float64)
    if standing is None:
        return p
    s = np.asarray(standing, np.float64).reshape(-1)
    if len(s) != p.shape[0]:
        raise RoutingError(f"the guard stands over {len(s)} candidates, the probs over {p.shape[0]}")
    if known is None and p.ndim == 1 and np.ndim(guard_margin) == 0:  # one query, every row known: the request path
        out = p - float(guard_margin)
        top = int(incumbents(s, np.ones(len(s), bool))[0])  # the one place the incumbent is chosen
        out[top] = p[top]
        return out
    p2 = p.reshape(len(s), -1)  # (M, Q)
    k = (
        np.ones(p2.shape, bool)
        if known is None
        else np.broadcast_to(np.asarray(known, bool).reshape(len(s), -1), p2.shape)
    )
    ref = incumbents(s, k)
    handicap = np.broadcast_to(np.asarray(guard_margin, np.float64).reshape(1, -1), p2.shape).copy()
    has = ref >= 0
    handicap[ref[has], np.flatnonzero(has)] = 0.0
    return (p2 - handicap).reshape(p.shape)


__all__ = [
    "DEFAULT_GUARD",
    "GUARD_MARGIN",
    "GUARD_Z",
    "MEASURED",
    "RoutingPolicy",
    "check_margin",
    "check_quality_weight",
    "guard_margins",
    "incumbent",
    "incumbents",
    "measured_margin",
    "routing_scores",
]
