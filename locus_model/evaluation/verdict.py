"""The verdict of an evaluation: does routing pay on this data, or should a user call the best single model?

One line a user can act on, from the protocol's own figures: LOCUS's routing accuracy minus the best single
model's over all the models (the ``all`` group, held-out models included), with the protocol's paired 95%
interval (``vs_methods.best_single.routing_acc``: the difference of the fold means, test queries resampled within
each fold). Routing pays when the whole interval is above zero; otherwise the best single model is what to call.
``what_to_serve`` turns a verdict into what a server serves (``locus serve`` states it at start).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from locus_model.routing.frontier_plot import LABELS  # the plot's names of the routers: one name per router

ROUTER = "locus"


def cost_share(
    router_probs: Sequence[np.ndarray],
    reference_probs: Sequence[np.ndarray],
    costs: Sequence[np.ndarray],
    names: Sequence[str],
) -> tuple[float | None, str | None]:
    """(share, why unknown): the router's mean cost per query as a share of the best single model's, averaged over
    folds; the share is None, with the reason, when the best single model has no price or the router sends a query
    to a model without one.

    Each fold: ``router_probs`` / ``reference_probs`` (M, Q) P(correct) (the router sends a query to its highest;
    the best single model's rows are constant per model, its highest row is the model it calls: the most accurate
    on the anchors, priced or not, as in the verdict), ``costs`` (M, Q) USD or any unit, NaN = unknown."""
    shares = []
    for p, ref, c in zip(router_probs, reference_probs, costs):
        c = np.asarray(c, np.float64)
        q = np.arange(c.shape[1])
        best = int(np.argmax(np.asarray(ref).mean(axis=1)))
        if np.isnan(c[best]).any():
            return None, f"{names[best]} has no price"
        routed = c[np.argmax(p, axis=0), q]
        if np.isnan(routed).any():
            return None, "the router sends some queries to models without a price"
        if c[best].sum() <= 0:
            return None, f"{names[best]} costs nothing"
        shares.append(routed.sum() / c[best].sum())
    return (float(np.mean(shares)), None) if shares else (None, None)


def best_single_name(reference_probs: Sequence[np.ndarray], names: Sequence[str]) -> str:
    """The model the best-single baseline calls (its choice in most folds; the first of equals): the most accurate
    on the anchors among all the models, priced or not (the frontier names it too: routing.frontier)."""
    picks = [names[int(np.argmax(np.asarray(p).mean(axis=1)))] for p in reference_probs]
    return Counter(picks).most_common(1)[0][0]


def routing_verdict(
    methods: Mapping,
    best_single: str,
    share: float | None,
    cost_note: str | None = None,
    frontier: Mapping | None = None,
    frontier_folds: Sequence[Mapping] = (),
    kept: float | None = None,
) -> dict | None:
    """{"pays", "best_single", "delta", "lo", "hi", "cost_share", "cost_note", "cheaper", "kept_on_best_single"}
    from the protocol's ``methods`` result (LOCUS's ``all`` group compared with best_single), in accuracy points;
    ``cost_note`` says why the cost share is unknown (None when it is known or no costs were given); ``cheaper``:
    where routing would pay on cost (:func:`cheaper_routers` of the protocol's ``frontier`` and ``frontier_folds``;
    None without costs or when no router reaches the best single model's accuracy cheaper); ``kept``: the share of
    the test queries LOCUS routes to the best single model (:func:`kept_on_best_single`). None when LOCUS did not
    run or the labels could not tell the methods apart (no interval). The figures are not rounded, so that the
    verdict prints the very figure the tables print (evaluation.summary: one interval from one set of resamples)."""
    stat = methods.get(ROUTER, {}).get("all", {}).get("vs_methods", {}).get("best_single", {}).get("routing_acc")
    if not stat or stat.get("ci_low") is None:
        return None
    delta, lo, hi = (100 * float(stat[k]) for k in ("diff", "ci_low", "ci_high"))
    return {
        "pays": lo > 0,
        "best_single": best_single,
        "delta": delta,
        "lo": lo,
        "hi": hi,
        "cost_share": None if share is None else round(share, 4),
        "cost_note": None if share is not None else cost_note,
        "cheaper": cheaper_routers(frontier, frontier_folds) if frontier else None,
        "kept_on_best_single": None if kept is None else float(kept),
    }


def kept_on_best_single(route_scores: Sequence[np.ndarray], labels: Sequence[np.ndarray], best: int) -> float | None:
    """The share of the test queries (those with a label) that a router sends to model row ``best``: each fold's
    ``route_scores`` (M, Q) rank the labelled models of each query, the first of equals chosen (as the protocol's
    routing accuracy chooses: stats.bootstrap.routing_outcomes). None when no query has a label."""
    sent = total = 0
    for r, y in zip(route_scores, labels):
        known = ~np.isnan(np.asarray(y, np.float64))
        asked = known.any(axis=0)
        pick = np.argmax(np.where(known, np.asarray(r, np.float64), -np.inf), axis=0)
        sent += int((pick[asked] == best).sum())
        total += int(asked.sum())
    return sent / total if total else None


def kept_text(verdict: Mapping) -> str:
    """What LOCUS did on the test queries, in words, where routing did not pay: "the guard keeps every test query on
    X: no other model is clearly better anywhere", or the share it sent elsewhere; "" when not known."""
    kept = verdict.get("kept_on_best_single")
    if kept is None or verdict.get("pays"):
        return ""
    name = verdict["best_single"]
    if kept >= 1:
        return f"on this pool the guard keeps every test query on {name}: no other model is clearly better anywhere"
    return f"LOCUS sent {100 * (1 - kept):.0f}% of the test queries to other models than {name}, without a clear gain"


NOT_ROUTERS = ("oracle", "best_single", "random_mix")  # the frontier's references: not a router to deploy


def cheaper_routers(frontier: Mapping, folds: Sequence[Mapping] = ()) -> dict | None:
    """Where routing pays on cost: {"reference", "at_best_single", "at_95", "locus"}, each target {"router",
    "cost_share", "ci_low", "ci_high"} the router of the frontier (``evaluate_frontiers``' "methods"; the oracle,
    best_single and random mixing are references, not routers) that reaches the best single model's accuracy (100%, 95%
    of it) at the lowest share of that model's cost below 1, or None when none does; ``reference`` names that model (the
    frontier's best single model of known cost, one per fold: their names joined); ``locus``: LOCUS's own shares
    {"at_best_single", "at_95"} (None where it does not reach the target cheaper: locus serve's cost-aware
    requests route by it). None when no router reaches either target cheaper."""
    out: dict = {
        "reference": ", ".join(sorted({str(f["best_single"]) for f in folds})) or None,
        ROUTER: {
            key: _share_below_one(frontier.get(ROUTER, {}).get(figure))  # what locus serve routes by
            for key, figure in (("at_best_single", "cost_share_at_best_single"), ("at_95", "cost_share_at_95"))
        },
    }
    for key, figure in (("at_best_single", "cost_share_at_best_single"), ("at_95", "cost_share_at_95")):
        found = [
            (float(e[figure]["mean"]), name)
            for name, e in frontier.items()
            if name not in NOT_ROUTERS
            and e.get(figure, {}).get("mean") is not None
            and np.isfinite(e[figure]["mean"])
            and e[figure]["mean"] < 1
        ]
        if found:
            share, name = min(found)
            stat = frontier[name][figure]
            out[key] = {
                "router": name,
                "cost_share": share,
                "ci_low": stat.get("ci_low"),
                "ci_high": stat.get("ci_high"),
            }
        else:
            out[key] = None
    return out if out["at_best_single"] or out["at_95"] else None


def _share_below_one(stat: Mapping | None) -> float | None:
    mean = None if not stat else stat.get("mean")
    return float(mean) if mean is not None and np.isfinite(mean) and mean < 1 else None


def cheaper_text(cheaper: Mapping | None, best_single: str | None = None) -> str:
    """The cheaper operating points in words: "IRT reaches gemini's accuracy at 86% of its cost (95% CI 60-100%);
    95% of it: kNN at 60% (95% CI 40-80%)"; "" when there are none."""
    if not cheaper:
        return ""
    names = (cheaper.get("reference") or best_single or "").split(", ")
    reference = (
        f"{names[0]}'s"
        if len(names) == 1 and names[0]
        else f"the best single model of known cost's ({', '.join(names)}, by fold)"
    )

    def at(hit: Mapping) -> str:
        low, high = hit.get("ci_low"), hit.get("ci_high")
        ci = (
            ""
            if low is None
            else f" (95% CI {100 * low:.0f}-{100 * high:.0f}%)"
            if high is not None
            else f" (95% CI from {100 * low:.0f}%)"
        )
        return f"{100 * hit['cost_share']:.0f}%{' of its cost' if hit is cheaper.get('at_best_single') else ''}{ci}"

    parts = []
    if cheaper.get("at_best_single"):
        hit = cheaper["at_best_single"]
        parts.append(f"{LABELS.get(hit['router'], hit['router'])} reaches {reference} accuracy at {at(hit)}")
    if cheaper.get("at_95"):
        hit = cheaper["at_95"]
        parts.append(
            f"95% of {'it' if parts else reference + ' accuracy'}: {LABELS.get(hit['router'], hit['router'])} "
            f"at {at(hit)}{'' if parts else ' of its cost'}"
        )
    return "; ".join(parts)


def format_verdict(verdict: Mapping | None) -> str:
    """The one line ``locus evaluate`` prints first."""
    if verdict is None:
        return "no verdict: LOCUS was not evaluated, or the labels cannot tell the methods apart"
    figures = f"{verdict['delta']:+.1f} [{verdict['lo']:+.1f}, {verdict['hi']:+.1f}]"
    if verdict["pays"]:
        cost = (
            ""
            if verdict["cost_share"] is None and not verdict.get("cost_note")
            else f" (cost share unknown: {verdict['cost_note']})"
            if verdict["cost_share"] is None
            else f" (at {100 * verdict['cost_share']:.0f}% of its cost)"
        )
        line = f"routing pays: {figures} over calling {verdict['best_single']} alone{cost}"
    else:
        kept = kept_text(verdict)
        line = f"routing does not pay on this data: call {verdict['best_single']} (LOCUS {figures}" + (
            f"; {kept})" if kept else ")"
        )
    cheaper = cheaper_text(verdict.get("cheaper"), verdict["best_single"])
    return line + (f"; on cost: {cheaper}" if cheaper else "")


@dataclass(frozen=True)
class ServeChoice:
    """What a server serves: the router, or one model for every query."""

    router: bool
    model: str | None  # the model called for every query when not routing
    reason: str  # one line saying why, for the server's start-up message


def what_to_serve(verdict: Mapping | None, *, force_router: bool = False) -> ServeChoice:
    """The router where routing paid (or where there is no verdict, or ``force_router``: the operator's override),
    else the best single model of the verdict."""
    if force_router or verdict is None or verdict.get("pays"):
        why = (
            f"routing forced by the operator; the evaluation: {format_verdict(verdict)}"
            if force_router and verdict is not None and not verdict.get("pays")
            else "no routing evaluation of this pool"
            if verdict is None
            else format_verdict(verdict)
        )
        return ServeChoice(router=True, model=None, reason=why)
    return ServeChoice(router=False, model=str(verdict["best_single"]), reason=format_verdict(verdict))


__all__ = [
    "ServeChoice",
    "best_single_name",
    "cheaper_routers",
    "cheaper_text",
    "cost_share",
    "format_verdict",
    "kept_on_best_single",
    "kept_text",
    "routing_verdict",
    "what_to_serve",
]
