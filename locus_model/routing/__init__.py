"""Cost-aware routing over a pool of model embeddings (arXiv 2601.21082, routing as a downstream use).

    costs.py     what a query costs on each model (prices, or parameter counts as a proxy; unknown stays unknown)
    policy.py    the routing policy (guard margin, quality weight, caps) and the guard's routing scores
    route.py     the rule: w * routing score - (1 - w) * cost / max cost, under the policy's caps; the fallback chain
    curves.py    the curve each router's knob traces, its hull, AIQ and cost at an accuracy (RouterBench)
    frontier.py  every router's frontier and figures per fold with paired intervals, the rule's sweep; plots
    errors.py    one error type per cause

``locus serve`` (one query per request), the ``cost_frontier`` asset and bench/bench_frontier.py (many queries)
decide by the same rule under a RoutingPolicy; the pyfunc, the reports and the evaluation protocol rank by the same
routing scores.
"""

from locus_model.routing.costs import (
    BASIS_MEANS,
    COST_KEYS,
    DEFAULT_OUTPUT_TOKENS,
    CostTable,
    check_cost,
    cost_info,
    cost_table,
    estimate_tokens,
)
from locus_model.routing.curves import DEFAULT_WEIGHTS
from locus_model.routing.errors import CostError, CostUnknown, NoCandidateWithinCap, QualityWeightError, RoutingError
from locus_model.routing.frontier import CostFrontier, cost_frontier, frontier_of_pool
from locus_model.routing.policy import (
    DEFAULT_GUARD,
    GUARD_MARGIN,
    MEASURED,
    RoutingPolicy,
    check_margin,
    check_quality_weight,
    incumbent,
    routing_scores,
)
from locus_model.routing.route import (
    Caps,
    RouteDecision,
    apply_caps,
    fallback_chain,
    normalized_costs,
    quality_lambda,
    route,
    route_many,
    route_scores,
)

__all__ = [
    "Caps",
    "apply_caps",
    "BASIS_MEANS",
    "COST_KEYS",
    "DEFAULT_OUTPUT_TOKENS",
    "CostTable",
    "check_cost",
    "cost_info",
    "cost_table",
    "estimate_tokens",
    "DEFAULT_GUARD",
    "GUARD_MARGIN",
    "MEASURED",
    "RoutingPolicy",
    "check_margin",
    "incumbent",
    "routing_scores",
    "CostError",
    "CostUnknown",
    "NoCandidateWithinCap",
    "QualityWeightError",
    "RoutingError",
    "DEFAULT_WEIGHTS",
    "CostFrontier",
    "cost_frontier",
    "frontier_of_pool",
    "RouteDecision",
    "check_quality_weight",
    "fallback_chain",
    "normalized_costs",
    "quality_lambda",
    "route",
    "route_many",
    "route_scores",
]
