"""The verdict: does routing pay over the best single model, in one line, and what a server serves from it."""

from __future__ import annotations

import numpy as np
import pytest

from locus_model.evaluation.verdict import (best_single_name, cost_share, format_verdict, routing_verdict,
                                            what_to_serve)


def methods_with(diff: float, lo: float, hi: float) -> dict:
    return {"locus": {"all": {"vs_methods": {"best_single": {"routing_acc": {"diff": diff, "ci_low": lo, "ci_high": hi}}}}}}


def test_routing_pays_only_when_the_whole_interval_is_above_zero():
    pays = routing_verdict(methods_with(0.021, 0.004, 0.038), "gemini-pro", 0.42)
    assert pays == {"pays": True, "best_single": "gemini-pro", "delta": 2.1, "lo": 0.4, "hi": 3.8, "cost_share": 0.42}
    assert format_verdict(pays) == "routing pays: +2.1 [+0.4, +3.8] over calling gemini-pro alone (at 42% of its cost)"
    tie = routing_verdict(methods_with(-0.006, -0.02, 0.006), "gemini-pro", None)
    assert not tie["pays"]
    assert format_verdict(tie) == "routing does not pay on this data: call gemini-pro (LOCUS -0.6 [-2.0, +0.6])"


def test_no_verdict_without_locus_or_an_interval():
    assert routing_verdict({"knn": {}}, "m", None) is None
    assert routing_verdict(methods_with(0.0, None, None), "m", None) is None
    assert format_verdict(None).startswith("no verdict")


def test_cost_share_and_best_single_on_a_hand_checked_fold():
    costs = np.array([[1.0, 1.0], [4.0, 4.0]])  # model 1 costs four times model 0
    best = np.array([[0.2, 0.2], [0.9, 0.9]])  # best single: model 1
    routed = np.array([[0.9, 0.1], [0.5, 0.5]])  # query 0 to model 0 (cost 1), query 1 to model 1 (cost 4)
    assert cost_share([routed], [best], [costs]) == pytest.approx(5 / 8)
    assert cost_share([routed], [best], [np.array([[np.nan, 1.0], [4.0, 4.0]])]) is None
    assert best_single_name([best, best, best[::-1]], ["a", "b"]) == "b"


def test_what_to_serve_follows_the_verdict_unless_overridden():
    no = routing_verdict(methods_with(-0.032, -0.048, -0.016), "gemini-pro", None)
    choice = what_to_serve(no)
    assert not choice.router and choice.model == "gemini-pro" and "does not pay" in choice.reason
    forced = what_to_serve(no, force_router=True)
    assert forced.router and forced.model is None and "forced" in forced.reason
    assert what_to_serve(None).router
    assert what_to_serve(routing_verdict(methods_with(0.02, 0.01, 0.03), "x", None)).router
