"""The verdict: does routing pay over the best single model, in one line, and what a server serves from it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from locus_model.evaluation import protocol
from locus_model.evaluation.methods import Fitted
from locus_model.evaluation.results import format_frontier, format_results
from locus_model.evaluation.verdict import (best_single_name, cost_share, format_verdict, routing_verdict,
                                            what_to_serve)
from locus_model.routing import cost_table
from tests.locus_model.tables import make_table, unit_encodings


def methods_with(diff: float, lo: float, hi: float) -> dict:
    return {"locus": {"all": {"vs_methods": {"best_single": {"routing_acc": {"diff": diff, "ci_low": lo, "ci_high": hi}}}}}}


def test_routing_pays_only_when_the_whole_interval_is_above_zero():
    pays = routing_verdict(methods_with(0.021, 0.004, 0.038), "gemini-pro", 0.42)
    assert pays == {"pays": True, "best_single": "gemini-pro", "delta": pytest.approx(2.1), "lo": pytest.approx(0.4),
                    "hi": pytest.approx(3.8), "cost_share": 0.42, "cost_note": None}
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
    assert cost_share([routed], [best], [costs], ["a", "b"]) == (pytest.approx(5 / 8), None)
    assert cost_share([routed], [best], [np.array([[np.nan, 1.0], [4.0, 4.0]])], ["a", "b"]) == (
        None, "the router sends some queries to models without a price")
    unpriced_best = np.array([[1.0, 1.0], [np.nan, np.nan]])
    assert cost_share([routed], [best], [unpriced_best], ["a", "b"]) == (None, "b has no price")
    assert best_single_name([best, best, best[::-1]], ["a", "b"]) == "b"


def test_what_to_serve_follows_the_verdict_unless_overridden():
    no = routing_verdict(methods_with(-0.032, -0.048, -0.016), "gemini-pro", None)
    choice = what_to_serve(no)
    assert not choice.router and choice.model == "gemini-pro" and "does not pay" in choice.reason
    forced = what_to_serve(no, force_router=True)
    assert forced.router and forced.model is None and "forced" in forced.reason
    assert what_to_serve(None).router
    assert what_to_serve(routing_verdict(methods_with(0.02, 0.01, 0.03), "x", None)).router


def evaluate_with_a_stand_in_router(monkeypatch, prices: dict | None = None) -> dict:
    """The protocol on a small table whose model m09 is the most accurate, LOCUS replaced by a noisy copy of the
    labels (nothing trained: the verdict's plumbing is what is tested)."""
    table = make_table()
    top = table["model"] == "m09"
    table.loc[top, "score"] = (np.random.default_rng(1).random(top.sum()) < 0.9).astype(float)
    real = protocol.fit_and_predict

    def stand_in(**args):
        if args["name"] != "locus":
            return real(**args)
        labels = np.nan_to_num(args["scores"][:, args["fold"].test])
        noise = np.random.default_rng(args["seed"]).random(labels.shape)
        return Fitted((0.8 * labels + 0.2 * noise).astype(np.float32), 0.0)

    monkeypatch.setattr(protocol, "fit_and_predict", stand_in)
    names = sorted(table["model"].unique())
    costs = None if prices is None else cost_table(names, {m: {"cost_per_query": prices.get(m)} for m in names})
    return protocol.evaluate(table, unit_encodings(60), budget=20, folds=3, methods=("locus",), progress=False,
                             n_boot=200, costs=costs)


INTERVAL = re.compile(r"([+-] ?\d+\.\d) \[ *([+-]\d+\.\d), *([+-]\d+\.\d)\]")


def test_locus_against_the_best_single_model_is_one_interval_wherever_it_is_printed(monkeypatch):
    result = evaluate_with_a_stand_in_router(monkeypatch)
    table = format_results(result).splitlines()
    in_table = next(line for line in table[table.index("[all]"):] if line.startswith("locus "))
    minus_each = table[table.index(next(l for l in table if l.startswith("LOCUS minus each method [all]"))):]
    in_comparisons = next(line for line in minus_each if line.startswith("best_single "))
    printed = [INTERVAL.search(text).groups() for text in (format_verdict(result["verdict"]), in_table, in_comparisons)]
    numbers = [tuple(float(x.replace(" ", "")) for x in groups) for groups in printed]
    assert numbers[0] == numbers[1] == numbers[2], (format_verdict(result["verdict"]), in_table, in_comparisons)
    locus = result["methods"]["locus"]["all"]
    assert locus["vs_best_single"] == locus["vs_methods"]["best_single"]["routing_acc"]  # one figure, one source


def test_the_verdict_and_the_frontier_name_the_same_best_single_model(monkeypatch):
    priced = {f"m{i:02d}": 1.0 + i for i in range(10)}
    result = evaluate_with_a_stand_in_router(monkeypatch, priced)
    verdict = result["verdict"]
    assert verdict["best_single"] == "m09" and {f["best_single"] for f in result["frontier_folds"]} == {"m09"}
    assert verdict["cost_share"] is not None and verdict["cost_note"] is None
    assert "best single model m09 (the best on the anchors)" in format_frontier(result)
    # the most accurate model without a price: the verdict still calls it (the most accurate single model) and says
    # its cost share is unknown; the frontier, among priced models, names it beside the priced model it measures by
    result = evaluate_with_a_stand_in_router(monkeypatch, {m: p for m, p in priced.items() if m != "m09"})
    verdict = result["verdict"]
    assert verdict["best_single"] == "m09" and verdict["cost_share"] is None
    assert verdict["cost_note"] == "m09 has no price"
    assert format_verdict(verdict).endswith("over calling m09 alone (cost share unknown: m09 has no price)")
    assert {f["most_accurate"] for f in result["frontier_folds"]} == {"m09"}
    assert "m09" not in {f["best_single"] for f in result["frontier_folds"]}
    assert "(the most accurate on the anchors, m09, has no price" in format_frontier(result)
