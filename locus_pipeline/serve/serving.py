"""What a gateway serves and says of it: the single model or the router (the routing evaluation's verdict on the
served checkpoint decides under ``--serve auto``), where routing would pay on cost, and the guard, in words."""

from __future__ import annotations

import json

from locus_model.evaluation.verdict import cheaper_text, what_to_serve
from locus_model.routing import incumbent
from locus_pipeline.serve.snapshot import Snapshot
from locus_pipeline.storage import LocusHome


def single_model(serve: str, snap: Snapshot, home: LocusHome | None = None) -> tuple[str | None, str]:
    """(the pool model "locus" answers with for every query, or None for the router; why, in one line).
    ``serve``: ``auto`` (the routing evaluation's verdict on this pool's checkpoint decides: the best single model
    where routing did not pay, else the router), ``router`` (always route) or ``single:<model>``. A ValueError says
    what to pass when ``serve`` is none of these or the model is not a routable pool model."""
    if serve in ("auto", "router"):
        verdict = pool_verdict(home, snap) if home is not None else None
        choice = what_to_serve(verdict, force_router=serve == "router")
        if choice.router or choice.model in snap.routable:
            return choice.model, choice.reason + ("" if choice.router else " (--serve router to route anyway)")
        return None, (
            f"{choice.reason}; but {choice.model} is not a routable pool model with an upstream here, "
            "so the router serves"
        )
    name = serve.split(":", 1)[1] if serve.startswith("single:") else ""
    if not name:
        raise ValueError(f"--serve {serve!r}: expected 'auto', 'router' or 'single:<pool model>'")
    if name not in snap.routable:
        raise ValueError(
            f"--serve {serve!r}: {name!r} is not a routable pool model"
            + (" with an upstream" if snap.upstreams and not snap.dry_run else "")
            + f" (routable: {', '.join(snap.routable[:8])}{', ...' if len(snap.routable) > 8 else ''})"
        )
    return name, "chosen by the operator (--serve single:MODEL)"


def pool_verdict(home: LocusHome, snap: Snapshot) -> dict | None:
    """The verdict of the home's routing evaluation (reports/routing_evaluation.json) when it evaluated the pool's
    own checkpoint; None when there is none, or it is of another checkpoint (a stale verdict decides nothing)."""
    path = home.routing_evaluation_path
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict) or result.get("settings", {}).get("checkpoint_id") != snap.checkpoint_id:
        return None
    verdict = result.get("verdict")
    return verdict if isinstance(verdict, dict) and "pays" in verdict and "best_single" in verdict else None


def cost_text(verdict: dict | None) -> str:
    """Where routing would pay on cost, from the routing evaluation of this checkpoint: the share of the best
    single model's cost at which LOCUS's cost-aware operating points reached its accuracy (and 95% of it);
    what a request weighing cost (model "locus:<w>", w < 1) is routed by, in single-model mode too."""
    how = 'requests with model "locus:<w>", w < 1, route by cost'
    if verdict is None:
        return f"{how} (no routing evaluation of this checkpoint says what that saves)"
    if verdict.get("cheaper") is None:
        return (
            f"{how}; the routing evaluation found no router that reaches {verdict['best_single']}'s accuracy "
            "for less (or it had no prices: locus evaluate --models-file)"
        )
    cheaper = verdict["cheaper"]
    mine = cheaper.get("locus") or {}
    reference = cheaper.get("reference") or verdict["best_single"]
    full, near = mine.get("at_best_single"), mine.get("at_95")
    said = (
        f"{reference}'s accuracy at {100 * full:.0f}% of its cost"
        + (f", 95% of it at {100 * near:.0f}%" if near is not None else "")
        if full is not None
        else f"95% of {reference}'s accuracy at {100 * near:.0f}% of its cost (its full accuracy not for less)"
        if near is not None
        else ""
    )
    return (
        f"{how}: in the routing evaluation LOCUS reached {said}"
        if said
        else f"{how}; in the routing evaluation LOCUS did not reach {reference}'s accuracy for less"
    ) + f" (every router: {cheaper_text(cheaper, verdict['best_single'])})"


def guard_text(snap: Snapshot, margin: float | str) -> str:
    """The guard in words: its margin and the routable model of highest standing it leans toward."""
    rows = snap.routable_rows
    if margin == 0:
        return "no guard"
    leaned = snap.names[int(rows[incumbent(snap.pool_scorer.standing[rows])])] if len(rows) else "none"
    shown = margin if isinstance(margin, str) else f"{margin:g}"  # a str: the measured guard (routing.policy)
    return f"guard {shown} toward {leaned}"


__all__ = ["cost_text", "guard_text", "pool_verdict", "single_model"]
