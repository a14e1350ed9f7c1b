"""The verdict: does routing pay over the best single model, in one line, and what a server serves from it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from locus_model.evaluation import protocol
from locus_model.evaluation.methods import Fitted
from locus_model.evaluation.results import format_frontier, format_results
from locus_model.evaluation.summary import ties_to_lower_row
from locus_model.evaluation.verdict import (
    best_single_name,
    cheaper_routers,
    cost_share,
    format_verdict,
    kept_on_best_single,
    routing_verdict,
    what_to_serve,
)
from locus_model.routing import cost_table
from locus_model.routing.frontier import evaluate_frontiers
from locus_model.routing.frontier_plot import frontiers_figure
from tests.locus_model.tables import make_table, unit_encodings


def methods_with(diff: float, lo: float, hi: float) -> dict:
    return {
        "locus": {"all": {"vs_methods": {"best_single": {"routing_acc": {"diff": diff, "ci_low": lo, "ci_high": hi}}}}}
    }


def test_routing_pays_only_when_the_whole_interval_is_above_zero():
    pays = routing_verdict(methods_with(0.021, 0.004, 0.038), "gemini-pro", 0.42)
    assert pays == {
        "pays": True,
        "best_single": "gemini-pro",
        "delta": pytest.approx(2.1),
        "lo": pytest.approx(0.4),
        "hi": pytest.approx(3.8),
        "cost_share": 0.42,
        "cost_note": None,
        "cheaper": None,
        "kept_on_best_single": None,
    }
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
        None,
        "the router sends some queries to models without a price",
    )
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
    return protocol.evaluate(
        table, unit_encodings(60), budget=20, folds=3, methods=("locus",), progress=False, n_boot=200, costs=costs
    )


INTERVAL = re.compile(r"([+-] ?\d+\.\d) \[ *([+-]\d+\.\d), *([+-]\d+\.\d)\]")


def test_locus_against_the_best_single_model_is_one_interval_wherever_it_is_printed(monkeypatch):
    result = evaluate_with_a_stand_in_router(monkeypatch)
    table = format_results(result).splitlines()
    in_table = next(line for line in table[table.index("[all]") :] if line.startswith("locus "))
    minus_each = table[table.index(next(row for row in table if row.startswith("LOCUS minus each method [all]"))) :]
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
    assert (
        format_verdict(verdict)
        .split("; on cost: ")[0]
        .endswith("over calling m09 alone (cost share unknown: m09 has no price)")
    )
    assert {f["most_accurate"] for f in result["frontier_folds"]} == {"m09"}
    assert "m09" not in {f["best_single"] for f in result["frontier_folds"]}
    assert "(the most accurate on the anchors, m09, has no price" in format_frontier(result)


def share(mean, low=None, high=None) -> dict:
    return {"mean": mean, "ci_low": low, "ci_high": high, "not_reached": 0.0}


def test_the_verdict_names_the_cheapest_router_that_matches_the_best_single_model():
    """A hand-made frontier: IRT reaches the best single model's accuracy at 86% of its cost, kNN at 90%; 95% of it
    is reached cheapest by the threshold router; the oracle, best_single and random mixing are references."""
    frontier = {
        "locus": {"cost_share_at_best_single": share(None), "cost_share_at_95": share(0.7, 0.5, 0.9)},
        "irt": {"cost_share_at_best_single": share(0.86, 0.6, 1.0), "cost_share_at_95": share(0.65, 0.4, 0.8)},
        "knn": {"cost_share_at_best_single": share(0.9, 0.7, None), "cost_share_at_95": share(0.8, 0.6, 0.9)},
        "threshold_locus": {"cost_share_at_best_single": share(1.2), "cost_share_at_95": share(0.6, 0.3, 0.9)},
        "oracle": {"cost_share_at_best_single": share(0.1), "cost_share_at_95": share(0.05)},
        "best_single": {"cost_share_at_best_single": share(0.5), "cost_share_at_95": share(0.2)},
        "random_mix": {"cost_share_at_best_single": share(1.0), "cost_share_at_95": share(0.9)},
    }
    folds = [{"best_single": "gemini-pro"}] * 3
    cheaper = cheaper_routers(frontier, folds)
    assert cheaper == {
        "reference": "gemini-pro",
        "locus": {"at_best_single": None, "at_95": 0.7},
        "at_best_single": {"router": "irt", "cost_share": 0.86, "ci_low": 0.6, "ci_high": 1.0},
        "at_95": {"router": "threshold_locus", "cost_share": 0.6, "ci_low": 0.3, "ci_high": 0.9},
    }
    verdict = routing_verdict(methods_with(0.0, 0.0, 0.0), "gemini-pro", 1.0, frontier=frontier, frontier_folds=folds)
    assert verdict["cheaper"] == cheaper
    assert format_verdict(verdict) == (
        "routing does not pay on this data: call gemini-pro (LOCUS +0.0 [+0.0, +0.0]); on cost: IRT reaches "
        "gemini-pro's accuracy at 86% of its cost (95% CI 60-100%); 95% of "
        "it: 2-model threshold (LOCUS P) at 60% (95% CI 30-90%)"
    )
    only_95 = routing_verdict(
        methods_with(0.0, 0.0, 0.0),
        "g",
        1.0,
        frontier={"knn": frontier["knn"]},
        frontier_folds=[{"best_single": "a"}, {"best_single": "b"}],
    )
    assert format_verdict(only_95).endswith(
        "; on cost: kNN reaches the best single model of known cost's (a, b, by fold) accuracy at 90% of its cost "
        "(95% CI from 70%); 95% of it: kNN at 80% (95% CI 60-90%)"
    )
    nothing = {"locus": {"cost_share_at_best_single": share(None), "cost_share_at_95": share(1.3)}}
    assert cheaper_routers(nothing, folds) is None
    assert "on cost" not in format_verdict(routing_verdict(methods_with(0.0, 0.0, 0.0), "g", 1.0, frontier=nothing))


def test_ties_to_lower_row_breaks_only_exact_ties_toward_the_lower_row():
    rates = np.array([[0.5, 0.5], [0.75, 0.75], [0.75, 0.75], [0.25, 0.25]])
    broken = ties_to_lower_row(rates)
    assert list(np.argsort(-broken[:, 0], kind="stable")) == [1, 2, 0, 3]  # 1 before its equal 2; the rest as before
    assert np.abs(broken - rates).max() < 0.25 / 2  # under half the smallest gap between distinct rates


def test_the_best_single_line_ends_at_the_tables_best_single_model_when_a_cheaper_model_ties_on_the_anchors():
    """Two models with the same anchor rate: the table routes to the first (row 0), the cost-aware rule would take
    the cheaper (row 1); with the ties broken by row, best_single's frontier reaches its own accuracy at its cost,
    and its quality-weight-1 end is row 0's accuracy (what the star and the table show)."""
    labels = np.array([[1, 1, 1, 0], [0, 0, 1, 0], [0, 1, 0, 0]], dtype=float)  # row 0: 0.75, row 1: 0.25
    costs = np.array([[4.0] * 4, [2.0] * 4, [1.0] * 4])
    rates = np.array([[0.6] * 4, [0.6] * 4, [0.3] * 4])  # rows 0 and 1 tie on the anchors
    raw = evaluate_frontiers(
        {"best_single": [rates]}, [labels], [costs], [rates[:, 0]], names=["a", "b", "c"], n_boot=20
    )
    fixed = evaluate_frontiers(
        {"best_single": [ties_to_lower_row(rates)]}, [labels], [costs], [rates[:, 0]], names=["a", "b", "c"], n_boot=20
    )
    assert raw["folds"][0]["best_single"] == "a" and raw["folds"][0]["best_single_accuracy"] == 0.75
    assert raw["folds"][0]["routers"]["best_single"]["accuracy"][-1] == 0.25  # the defect: a cheaper equal at w = 1
    assert raw["methods"]["best_single"]["cost_share_at_best_single"]["mean"] == float("inf")  # "not reached"
    end = fixed["folds"][0]["routers"]["best_single"]
    assert end["knob"][-1] == 1.0 and end["accuracy"][-1] == 0.75 and end["mean_cost"][-1] == 4.0
    assert fixed["methods"]["best_single"]["cost_share_at_best_single"]["mean"] == pytest.approx(1.0)
    ax = frontiers_figure(fixed["folds"]).axes[0]  # the plot: the best-single line ends at the star
    line = next(drawn for drawn in ax.get_lines() if drawn.get_label() == "best single (anchor rates)")
    star = next(c for c in ax.collections if c.get_label().startswith("best single (fold mean): 0.750"))
    assert max(line.get_ydata()) == pytest.approx(star.get_offsets()[0][1]) == pytest.approx(0.75)


def test_the_verdict_says_in_words_when_the_guard_keeps_every_query_on_the_best_single_model():
    labels = np.array([[1.0, 0.0, np.nan], [0.0, 1.0, 1.0]])  # query 2: only model 1 is labelled
    routed = np.array([[0.9, 0.8, 0.9], [0.5, 0.5, 0.1]])  # model 0 wherever it is labelled
    assert kept_on_best_single([routed], [labels], 0) == pytest.approx(2 / 3)
    assert kept_on_best_single([routed[:, :2]], [labels[:, :2]], 0) == 1.0
    assert kept_on_best_single([routed], [np.full((2, 3), np.nan)], 0) is None
    every = routing_verdict(methods_with(0.0, 0.0, 0.0), "gemini-1.5-pro-002", None, kept=1.0)
    assert format_verdict(every) == (
        "routing does not pay on this data: call gemini-1.5-pro-002 (LOCUS +0.0 [+0.0, +0.0]; on this pool the guard "
        "keeps every test query on gemini-1.5-pro-002: no other model is clearly better anywhere)"
    )
    some = routing_verdict(methods_with(-0.01, -0.02, 0.0), "g", None, kept=0.75)
    assert "LOCUS sent 25% of the test queries to other models than g, without a clear gain" in format_verdict(some)
    assert "guard" not in format_verdict(routing_verdict(methods_with(0.02, 0.01, 0.03), "g", None, kept=0.5))
    forced = what_to_serve(every, force_router=True)
    assert forced.router and "forced by the operator; the evaluation: routing does not pay" in forced.reason
