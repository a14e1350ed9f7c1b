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

ROUTER = "locus"


def cost_share(router_probs: Sequence[np.ndarray], reference_probs: Sequence[np.ndarray],
               costs: Sequence[np.ndarray], names: Sequence[str]) -> tuple[float | None, str | None]:
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


def routing_verdict(methods: Mapping, best_single: str, share: float | None,
                    cost_note: str | None = None) -> dict | None:
    """{"pays", "best_single", "delta", "lo", "hi", "cost_share", "cost_note"} from the protocol's ``methods`` result
    (LOCUS's ``all`` group compared with best_single), in accuracy points; ``cost_note`` says why the cost share is
    unknown (None when it is known or no costs were given); None when LOCUS did not run or the labels could not tell
    the methods apart (no interval). The figures are not rounded, so that the verdict prints the very figure the
    tables print (evaluation.summary: one interval from one set of resamples)."""
    stat = methods.get(ROUTER, {}).get("all", {}).get("vs_methods", {}).get("best_single", {}).get("routing_acc")
    if not stat or stat.get("ci_low") is None:
        return None
    delta, lo, hi = (100 * float(stat[k]) for k in ("diff", "ci_low", "ci_high"))
    return {"pays": lo > 0, "best_single": best_single, "delta": delta, "lo": lo, "hi": hi,
            "cost_share": None if share is None else round(share, 4),
            "cost_note": None if share is not None else cost_note}


def format_verdict(verdict: Mapping | None) -> str:
    """The one line ``locus evaluate`` prints first."""
    if verdict is None:
        return "no verdict: LOCUS was not evaluated, or the labels cannot tell the methods apart"
    figures = f"{verdict['delta']:+.1f} [{verdict['lo']:+.1f}, {verdict['hi']:+.1f}]"
    if verdict["pays"]:
        cost = ("" if verdict["cost_share"] is None and not verdict.get("cost_note")
                else f" (cost share unknown: {verdict['cost_note']})" if verdict["cost_share"] is None
                else f" (at {100 * verdict['cost_share']:.0f}% of its cost)")
        return f"routing pays: {figures} over calling {verdict['best_single']} alone{cost}"
    return f"routing does not pay on this data: call {verdict['best_single']} (LOCUS {figures})"


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
        why = ("routing forced by the operator" if force_router and verdict is not None and not verdict.get("pays")
               else "no routing evaluation of this pool" if verdict is None else format_verdict(verdict))
        return ServeChoice(router=True, model=None, reason=why)
    return ServeChoice(router=False, model=str(verdict["best_single"]), reason=format_verdict(verdict))


__all__ = ["ServeChoice", "best_single_name", "cost_share", "format_verdict", "routing_verdict", "what_to_serve"]
