"""The cost-aware route (arXiv 2601.21082, routing as a downstream use) and its fallback chain.

The correctness predictor gives P(correct) for every (model, query); the paper routes each query to the model
with the highest P(correct). Here each candidate also has a cost per query (locus_model.routing.costs), and the
router trades the two:

    score_m = w * P_m - (1 - w) * c_m / max_k c_k          w = quality_weight in [0, 1]

which ranks exactly as ``P_m - lambda * c~_m`` with ``lambda = (1 - w) / w`` (w = 1: lambda = 0, the paper's
router; w = 0.5: lambda = 1, the most expensive candidate must be 1.0 more likely to be right than a free one;
w = 0: lambda = infinity, the cheapest candidate, ties broken by P(correct)). Costs are normalised by the most
expensive candidate (:func:`normalized_costs`) so that lambda has the same meaning whatever the unit.
Alternatively a cost cap (``max_cost``) keeps only the candidates that cost at most that much and ranks them the
same way. A candidate of unknown cost (NaN) is left out of a cost-aware ranking (w < 1 or a cap), never charged a
made-up cost.

A fallback chain is the chosen model's nearest neighbours in the embedding space (Euclidean) among the other
candidates (the paper's nearest-neighbour fallback, which keeps most of the routing accuracy when the routed
model is unavailable), tried in the order of the same cost-aware score that ranked the candidates. When the
ranking uses cost (w < 1 or a cost cap), a failure must not make the query dearer than the rule accepted: the
chain takes its neighbours among the candidates that cost at most the chosen one, and only when fewer than k of
those exist the nearest dearer ones after them.

:func:`route` decides one query (``locus serve``); :func:`route_many` decides many at once by the same rule (the
``cost_frontier`` asset, bench/bench_frontier.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from locus_model.neighbours import nearest_neighbours, paired_distances
from locus_model.routing.errors import CostUnknown, NoCandidateWithinCap, RoutingError
from locus_model.routing.policy import RoutingPolicy, check_quality_weight, routing_scores

DIRECT_CHAIN = 4096  # candidates up to which a fallback chain sorts every distance (screening pays off past it)


def quality_lambda(quality_weight: float) -> float:
    """lambda of ``P - lambda * normalised cost`` for a quality weight w: (1 - w) / w (infinite at w = 0)."""
    return RoutingPolicy(guard_margin=0.0, quality_weight=quality_weight).lam


def normalized_costs(costs: np.ndarray) -> np.ndarray:  # (M,) or (M, Q)
    """costs / the largest cost over the models (axis 0: per query for (M, Q)); 0 where the largest is free."""
    c = np.asarray(costs, dtype=np.float64)
    if c.size == 0:
        return c
    top = c.max(axis=0, keepdims=True)
    return np.divide(c, top, out=np.zeros_like(c), where=top > 0)


def route_scores(probs: np.ndarray, costs: np.ndarray, quality_weight: float) -> np.ndarray:  # (M,) or (M, Q)
    """w * P - (1 - w) * cost / max cost; costs (M,) or (M, Q), normalised per query over the models."""
    w = check_quality_weight(quality_weight)
    return w * np.asarray(probs, dtype=np.float64) - (1.0 - w) * normalized_costs(costs)


@dataclass(frozen=True)
class RouteDecision:
    """One query's routing: indices refer to the arrays given to :func:`route`."""

    ranking: np.ndarray  # eligible candidates, best first
    scores: np.ndarray  # (M,) the score that ranked them (NaN for models left out)
    chosen: int
    fallbacks: np.ndarray  # the chosen model's nearest neighbours among the other eligible candidates
    over_cost: np.ndarray  # candidates left out by max_cost
    quality_weight: float
    lam: float = field(default=0.0)
    unknown_cost: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # left out: cost unknown
    over_params: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # left out by max_params
    unknown_params: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # left out: size unknown


@dataclass(frozen=True)
class Caps:
    """Which candidates a policy's caps keep and why the others are out: bool arrays shaped as the costs, (M,) for
    one query or (M, Q) for many (the one caps rule of :func:`route` and :func:`route_many`)."""

    keep: np.ndarray
    unknown_cost: np.ndarray  # cost unknown (NaN) while the ranking uses cost
    over_cost: np.ndarray  # known cost above max_cost
    unknown_params: np.ndarray  # size unknown under max_params
    over_params: np.ndarray  # known size above max_params


def apply_caps(costs: np.ndarray, policy: RoutingPolicy, params: np.ndarray | None = None) -> Caps:
    """The policy's caps on candidates of ``costs`` (M,) or (M, Q) (NaN = unknown), ``params`` (M,) in billions
    (NaN or None = unknown). Nothing unknown is made up: a cost-aware ranking (w < 1 or max_cost) leaves out a
    candidate of unknown cost; max_params leaves out one of unknown size. Each reason counts only the candidates
    the reasons before it kept (cost unknown, over max_cost, size unknown, over max_params)."""
    c = np.asarray(costs, dtype=np.float64)
    none = np.zeros(c.shape, dtype=bool)
    unknown_cost = np.isnan(c) if policy.uses_cost else none
    keep = ~unknown_cost
    over_cost = keep & (np.nan_to_num(c) > policy.max_cost) if policy.max_cost is not None else none
    keep = keep & ~over_cost
    unknown_params, over_params = none, none
    if policy.max_params is not None:
        n = np.full(c.shape[0], np.nan) if params is None else np.asarray(params, dtype=np.float64).reshape(-1)
        if n.shape[0] != c.shape[0]:
            raise RoutingError(f"params {n.shape} must have one entry per candidate of costs {c.shape}.")
        n = n.reshape(-1, *([1] * (c.ndim - 1)))  # (M,) or (M, 1): one size per candidate, every query
        unknown_params = keep & np.isnan(n)
        over_params = keep & ~unknown_params & (np.nan_to_num(n) > policy.max_params)
        keep = keep & ~unknown_params & ~over_params
    return Caps(keep, unknown_cost, over_cost, unknown_params, over_params)


def fallback_chain(
    embeddings: np.ndarray, chosen: int, among: np.ndarray | Sequence[int], *, k: int | None = None
) -> np.ndarray:
    """The models of ``among`` (other than ``chosen``) ordered by Euclidean distance of their model embedding to
    the chosen one's, nearest first (ties: lower index); at most ``k``."""
    z = np.asarray(embeddings)
    others = np.asarray(among, dtype=np.int64).reshape(-1)
    others = others[others != chosen]
    if k is not None and k <= 0:
        return others[:0]
    if k is not None and k < len(others) and len(others) > DIRECT_CHAIN:  # a few of many: screened, still exact
        return nearest_neighbours(z, k, rows=np.array([chosen]), among=others)[0][0]
    dist = paired_distances(z[others], z[chosen][None, :])  # (1, d) broadcast against each row
    return others[np.lexsort((others, dist))][:k]  # the same distances and order as nearest_neighbours'


def rank_candidates(scores: np.ndarray, costs: np.ndarray, index: np.ndarray) -> np.ndarray:  # (M,) or (M, Q)
    """Candidates best first along axis 0, the one ranking rule of :func:`route` and :func:`route_many`: the higher
    score, then the cheaper (an unknown cost, NaN, after the known on a tie), then the lower index."""
    return np.lexsort((index, np.where(np.isnan(costs), np.inf, costs), -scores), axis=0)  # last key sorts first


def route(
    probs: np.ndarray,  # (M,) P(correct) of each candidate for this query
    costs: np.ndarray,  # (M,) expected cost of each candidate for this query (NaN = unknown)
    policy: RoutingPolicy = RoutingPolicy(),
    *,
    standing: np.ndarray | None = None,  # (M,) the candidates' standing (Router.standing): the guard's; None: no guard
    params: np.ndarray | None = None,  # (M,) parameter counts (billions, NaN = unknown), for the policy's max_params
    embeddings: np.ndarray | None = None,  # (M, d) model embeddings, for the fallback chain
    n_fallbacks: int | None = None,
    noise: float | None = None,  # P's measured error on this query (Router.query_noise), for the measured guard
) -> RouteDecision:
    """Rank the candidates by :func:`route_scores` of the policy's quality weight (ties: cheaper first, then lower
    index), keeping only those that cost at most the policy's ``max_cost`` and have at most its ``max_params``
    billion parameters when it has them; the chosen model is the first, its fallback chain its nearest embedding
    neighbours among the other kept candidates (empty without embeddings), in ranking order; when cost ranks, those
    that cost at most the chosen one first (the module's docstring). Costs are normalised over the kept candidates.

    Nothing unknown is made up. A candidate of unknown cost (NaN) is left out (``unknown_cost``) when the ranking
    uses cost (w < 1 or a cost cap); at w = 1 cost does not matter and it is ranked like the others, after the
    candidates of known cost on an exact tie. Under ``max_params`` a candidate of unknown size is left out
    (``unknown_params``). With ``standing`` the quality term is the routing score under the policy's guard
    (policy.routing_scores; its reference is the kept candidate of highest standing)."""
    p = np.asarray(probs, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64)
    if p.ndim != 1 or p.shape != c.shape or p.size == 0:
        raise RoutingError(f"route: probs {p.shape} and costs {c.shape} must be 1-D, equal and non-empty.")
    if (c < 0).any():
        raise RoutingError("route: costs must be >= 0 (NaN = unknown).")
    if standing is not None and len(standing) != len(p):
        raise RoutingError(f"route: the guard stands over {len(standing)} candidates, the probs over {len(p)}")
    w = policy.quality_weight
    uses_cost = policy.uses_cost
    if uses_cost and np.isnan(c).all():
        raise CostUnknown(
            "route: every candidate's cost is unknown, so no cost-aware ranking (quality_weight < 1 or "
            "max_cost) is possible. How to fix: give prices (or parameter counts), or quality_weight=1."
        )
    if policy.max_params is not None:
        n = np.full(len(c), np.nan) if params is None else np.asarray(params, dtype=np.float64)
        if n.shape != c.shape:
            raise RoutingError(f"route: params {n.shape} must match costs {c.shape}.")
        if np.isnan(n).all():
            raise CostUnknown(
                "route: every candidate's parameter count is unknown, so max_params cannot be applied. "
                "How to fix: give params_b (models file or models config), or leave max_params out."
            )
    caps = apply_caps(c, policy, params)
    keep = caps.keep
    if not keep.any():
        raise NoCandidateWithinCap(_nothing_within(c, caps, policy, params))
    idx = _rows(keep)
    scores = np.full(len(c), np.nan)
    quality = routing_scores(
        p[idx], None if standing is None else np.asarray(standing)[idx], policy.margins(noise), None
    )
    # at w = 1 cost has no weight (a cost may be unknown, NaN): the score is the quality itself
    scores[idx] = quality if w == 1.0 else route_scores(quality, np.nan_to_num(c[idx]), w)
    ranking = idx[rank_candidates(scores[idx], c[idx], idx)]
    chosen = int(ranking[0])
    chain = (
        _cost_aware_chain(embeddings, chosen, ranking, c, uses_cost, n_fallbacks)
        if embeddings is not None
        else np.zeros(0, dtype=np.int64)
    )
    return RouteDecision(
        ranking,
        scores,
        chosen,
        chain,
        _rows(caps.over_cost),
        w,
        policy.lam,
        _rows(caps.unknown_cost),
        _rows(caps.over_params),
        _rows(caps.unknown_params),
    )


def _rows(mask: np.ndarray) -> np.ndarray:
    """The indices ``mask`` marks (an empty array at once where it marks none: most caps on most requests)."""
    return np.flatnonzero(mask) if mask.any() else np.zeros(0, dtype=np.int64)


def _cost_aware_chain(
    embeddings: np.ndarray, chosen: int, ranking: np.ndarray, c: np.ndarray, uses_cost: bool, k: int | None
) -> np.ndarray:
    """The fallback chain of :func:`route`: the nearest k of the other ranked candidates, each group tried in
    ranking order; under a cost-aware ranking first those that cost at most the chosen one, then (to fill k) the
    nearest dearer ones."""
    position = np.empty(len(c), dtype=np.int64)
    position[ranking] = np.arange(len(ranking))  # no per-candidate dict: pools of 100,000 models
    groups = [ranking]
    if uses_cost:
        not_dearer = c[ranking] <= c[chosen]
        groups = [ranking[not_dearer], ranking[~not_dearer]]
    chain: list[int] = []
    for group in groups:
        room = None if k is None else k - len(chain)
        if room is not None and room <= 0:
            break
        near = fallback_chain(embeddings, chosen, group, k=room)
        chain += near[np.argsort(position[near], kind="stable")].tolist()  # nearest, tried best-scored first
    return np.array(chain, dtype=np.int64)


def _nothing_within(c: np.ndarray, caps: Caps, policy: RoutingPolicy, params: np.ndarray | None) -> str:
    """What to say when the caps leave no candidate: the caps, the cheapest and the smallest left out."""
    max_cost, max_params, over_params = policy.max_cost, policy.max_params, caps.over_params
    cheapest = float(np.min(np.where(caps.unknown_cost, np.inf, c))) if max_cost is not None else None
    if max_params is None:
        return (
            f"route: no candidate costs at most max_cost={max_cost:g}; the cheapest costs {cheapest:g}. "
            "How to fix: raise max_cost or add cheaper candidates."
        )
    sizes = np.where(over_params, np.asarray(params, dtype=np.float64), np.nan)
    smallest = float(np.nanmin(sizes)) if over_params.any() else None
    limits = [f"max_cost={max_cost:g}"] if max_cost is not None else []
    limits.append(f"max_params={max_params:g} (billions)")
    return (
        f"route: no candidate of known size within {' and '.join(limits)}"
        + (f"; the cheapest costs {cheapest:g}" if cheapest is not None else "")
        + (f"; the smallest over the size cap has {smallest:g}B" if smallest is not None else "")
        + ". How to fix: raise the cap or add cheaper / smaller candidates of known size."
    )


def route_many(
    probs: np.ndarray,
    costs: np.ndarray,
    policy: RoutingPolicy = RoutingPolicy(),
    *,
    known: np.ndarray | None = None,
    standing: np.ndarray | None = None,
    params: np.ndarray | None = None,
    noise: np.ndarray | None = None,  # (Q,) P's measured error per query (Router.query_noise), for the measured guard
) -> np.ndarray:  # (Q,) chosen per query
    """The chosen model of each query (column) of ``probs`` (M, Q) by the rule of :func:`route` under ``policy``;
    costs (M,) or (M, Q), NaN = unknown (left out when cost ranks; at w = 1 ranked after the known on a tie, as
    :func:`route` does); params (M,) for the policy's ``max_params``. ``known`` (M, Q) bool restricts each query to
    those models (e.g. labelled ones); ``standing`` (M,): the guard's, as in :func:`route`, its reference per query the
    candidate of highest standing among that query's."""
    p = np.asarray(probs, dtype=np.float64)
    c = np.broadcast_to(np.asarray(costs, dtype=np.float64).reshape(p.shape[0], -1), p.shape)
    w = policy.quality_weight
    known = np.ones(p.shape, dtype=bool) if known is None else np.asarray(known, dtype=bool)
    caps = apply_caps(c, policy, params)
    if policy.uses_cost and not (known & ~caps.unknown_cost).any(axis=0).all():
        raise CostUnknown(
            "route_many: a query has no candidate of known cost, so no cost-aware ranking "
            "(quality_weight < 1 or max_cost) is possible. How to fix: give prices (or parameter "
            "counts)."
        )
    known = known & caps.keep
    if (policy.max_cost is not None or policy.max_params is not None) and not known.any(axis=0).all():
        raise NoCandidateWithinCap(
            f"route_many: a query has no candidate within max_cost={policy.max_cost} and "
            f"max_params={policy.max_params}. How to fix: raise the caps or add cheaper / "
            "smaller candidates of known size."
        )
    c_known = np.where(known & ~np.isnan(c), c, 0.0)
    quality = routing_scores(p, standing, policy.margins(noise), known)
    s = np.where(known, route_scores(quality, c_known, w), -np.inf)
    rows = np.broadcast_to(np.arange(p.shape[0])[:, None], p.shape)
    return rank_candidates(s, c, rows)[0]


__all__ = [
    "quality_lambda",
    "normalized_costs",
    "route_scores",
    "RouteDecision",
    "fallback_chain",
    "rank_candidates",
    "route",
    "route_many",
]
