"""routing.frontier: the non-decreasing convex hull, RouterBench's AIQ and the cost shares on hand-computed cases,
models of unknown cost left out, paired intervals, and one piece of code behind cost_frontier and evaluate_frontiers."""

from __future__ import annotations

import numpy as np
import pytest

from locus_model.routing import RoutingPolicy, cost_frontier, cost_table, route
from locus_model.routing.curves import aiq, cost_at, monotone_hull, rule_curve
from locus_model.routing.frontier import evaluate_frontiers, fold_mean_hull, query_costs
from locus_model.routing.frontier_plot import frontiers_figure, plot_frontiers

# Three models: A cheap (cost 1), B (2), C dear (4); C is right on queries 0-2, B on 0-1, A on 0 only.
NAMES = ["A", "B", "C"]
LABELS = np.array([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
COSTS = np.array([1.0, 2.0, 4.0])
PROBS = np.array([[0.9, 0.1, 0.1, 0.1], [0.8, 0.9, 0.1, 0.1], [0.7, 0.8, 0.9, 0.2]])  # the likeliest right is right


def run(probs, labels, costs, *, n_boot=64, names=NAMES, rates=None):
    y = np.asarray(labels, np.float64)
    c = np.broadcast_to(np.asarray(costs, np.float64)[:, None], y.shape)
    rates = y.mean(axis=1) if rates is None else rates  # the anchors say what the test says: C is the best single
    return evaluate_frontiers(
        {m: [p] for m, p in probs.items()}, [y], [c], [rates], names=names, n_boot=n_boot, weights=[0.0, 1.0]
    )


def test_monotone_hull_drops_points_below_a_chord_and_after_the_best():
    # (1, .55) lies below the chord (0, .5)-(2, .8); (3, .7) and (4, .8) cost more for no more accuracy;
    # of the two points at cost 0 the more accurate starts the hull
    hx, hy = monotone_hull([0, 0, 1, 2, 3, 4], [0.4, 0.5, 0.55, 0.8, 0.7, 0.8])
    assert hx.tolist() == [0, 2] and hy.tolist() == [0.5, 0.8]
    hx, hy = monotone_hull([2, 0, 1], [0.8, 0.5, 0.7])  # (1, .7) is above the chord (.65): kept
    assert hx.tolist() == [0, 1, 2] and hy.tolist() == [0.5, 0.7, 0.8]
    assert monotone_hull([3, 1, 2], [0.9, 0.95, 0.2])[0].tolist() == [1]  # the cheapest is the best: one point


def test_aiq_is_the_area_under_the_hull_over_the_cost_range_over_its_width():
    a = monotone_hull([0, 1, 2], [0.5, 0.7, 0.8])
    assert aiq(*a, 0, 2) == pytest.approx((0.6 + 0.75) / 2)  # trapezoids (0.5+0.7)/2 + (0.7+0.8)/2 over a width of 2
    assert aiq(np.array([1.0]), np.array([0.9]), 0, 2) == pytest.approx(0.9 / 2)  # 0 below its one point, flat after
    assert aiq(*a, 0, 4) == pytest.approx((1.35 + 2 * 0.8) / 4)  # flat at 0.8 after its end
    assert aiq(*a, 1, 1) == pytest.approx(0.7)  # every model costs the same: the accuracy there


def test_cost_at_interpolates_on_the_hull_and_is_inf_when_never_reached():
    hx, hy = np.array([0.0, 2.0]), np.array([0.5, 0.8])
    assert cost_at(hx, hy, 0.65) == pytest.approx(1.0)
    assert cost_at(hx, hy, 0.4) == 0.0
    assert cost_at(hx, hy, 0.81) == np.inf


def test_the_frontier_of_three_models_by_hand():
    out = run({"locus": PROBS}, LABELS, COSTS)
    fold = out["folds"][0]
    assert (fold["best_single"], fold["cheapest"], fold["cost_range"]) == ("C", "A", [1.0, 4.0])
    assert (fold["best_single_accuracy"], fold["best_single_cost"]) == (0.75, 4.0)
    m = out["methods"]
    # the rule: w = 0 takes A everywhere (cost 1, accuracy .25); w = 1 takes A, B, C, C (cost 11/4, accuracy .75)
    assert fold["routers"]["locus"]["mean_cost"] == [1.0, 2.75] and fold["routers"]["locus"]["accuracy"] == [0.25, 0.75]
    # AIQ over [1, 4]: the line from (1, .25) to (2.75, .75), then flat at .75 to 4
    assert m["locus"]["aiq"]["mean"] == pytest.approx((1.75 * 0.5 + 1.25 * 0.75) / 3)
    assert m["locus"]["cost_share_at_best_single"]["mean"] == pytest.approx(2.75 / 4)
    assert m["locus"]["cost_share_at_95"]["mean"] == pytest.approx((1 + (0.7125 - 0.25) / 0.5 * 1.75) / 4)
    # random mixing of A and C: the straight line from (1, .25) to (4, .75)
    assert m["random_mix"]["aiq"]["mean"] == pytest.approx(0.5)
    assert m["random_mix"]["cost_share_at_best_single"]["mean"] == pytest.approx(1.0)
    assert m["random_mix"]["cost_share_at_95"]["mean"] == pytest.approx((1 + 0.925 * 3) / 4)
    # threshold on A's P (.9, .1, .1, .1): all A; C where P_A < .9 (cost 13/4, accuracy .75); all C (dominated)
    assert m["threshold_locus"]["aiq"]["mean"] == pytest.approx((2.25 * 0.5 + 0.75 * 0.75) / 3)
    assert m["threshold_locus"]["cost_share_at_best_single"]["mean"] == pytest.approx(3.25 / 4)
    for router in m.values():
        for figure in ("aiq", "cost_share_at_best_single", "cost_share_at_95"):
            stat = router[figure]
            assert set(stat) == {"mean", "ci_low", "ci_high"} | ({"not_reached"} if figure != "aiq" else set())
            assert stat["ci_low"] <= stat["ci_high"]
    assert set(m["random_mix"]["aiq_vs_locus"]) == {"diff", "ci_low", "ci_high"}


def test_a_router_that_never_reaches_the_best_single_model_has_an_infinite_cost_share():
    wrong = np.array([[0.9] * 4, [0.1] * 4, [0.1] * 4])  # always the cheap model, right once in four
    m = run({"locus": wrong}, LABELS, COSTS)["methods"]["locus"]
    assert m["cost_share_at_best_single"]["mean"] == np.inf and m["cost_share_at_95"]["mean"] == np.inf
    assert m["aiq"]["mean"] == pytest.approx(0.25)


def test_a_model_without_a_cost_is_left_out_never_priced():
    # D is right everywhere, the likeliest right and the best on the anchors, but has no cost: the frontier is the
    # one of A, B, C (D is never chosen, the best single model is C, the cost range is A's to C's)
    probs = np.vstack([PROBS, [0.99] * 4])
    labels = np.vstack([LABELS, [1.0] * 4])
    with_d = run({"locus": probs}, labels, np.append(COSTS, np.nan), names=[*NAMES, "D"])
    without = run({"locus": PROBS}, LABELS, COSTS)
    assert with_d["folds"][0]["best_single"] == "C" and with_d["folds"][0]["models_of_known_cost"] == 3
    assert with_d["methods"] == without["methods"]
    assert with_d["folds"][0]["routers"] == without["folds"][0]["routers"]


def test_every_router_is_scored_on_the_same_resamples():
    out = run({"locus": PROBS, "copy": PROBS.copy()}, LABELS, COSTS, n_boot=200)
    same = out["methods"]["copy"]["aiq_vs_locus"]
    assert (same["diff"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)  # paired: identical draws
    assert (
        out["methods"]["random_mix"]["aiq_vs_locus"]["ci_low"]
        <= out["methods"]["random_mix"]["aiq_vs_locus"]["ci_high"]
    )


def test_cost_frontier_gives_the_figures_of_evaluate_frontiers():
    """The cost_frontier asset and locus evaluate --models-file compute AIQ and the cost shares by one code."""
    f = cost_frontier(PROBS, LABELS, COSTS, names=NAMES, weights=[0.0, 1.0])
    m = run({"locus": PROBS}, LABELS, COSTS)["methods"]["locus"]
    assert f.figures == {
        k: pytest.approx(m[k]["mean"]) for k in ("aiq", "cost_share_at_best_single", "cost_share_at_95")
    }
    assert "AIQ 0.6042" in f.summary() and "68.8% of its cost" in f.summary()


@pytest.mark.parametrize("w", [0.0, 0.3, 0.9, 0.99, 1.0])
def test_the_rule_curve_decides_as_locus_serve_for_every_query(w):
    rng = np.random.default_rng(1)
    probs = rng.uniform(0.05, 0.95, size=(12, 30))
    labels = (rng.uniform(size=probs.shape) < probs).astype(np.float64)
    costs = rng.choice([0.5, 1.0, 3.0, 7.0, 13.0, 70.0], size=12).astype(np.float64)
    costs[[2, 5]] = np.nan  # unknown: never a candidate
    known = np.broadcast_to(~np.isnan(costs)[:, None], probs.shape)
    c = np.broadcast_to(costs[:, None], probs.shape)
    chosen = rule_curve(probs, labels, c, known, [w]).chosen[0]
    rows = np.flatnonzero(~np.isnan(costs))
    for q in range(probs.shape[1]):
        assert (
            chosen[q] == rows[route(probs[rows, q], costs[rows], RoutingPolicy(quality_weight=w)).chosen]
        )  # what serve calls


def test_query_costs_charge_each_query_its_tokens_when_priced_by_token():
    texts = ["x" * 400, "x" * 4000]  # 100 and 1,000 input tokens
    priced = cost_table(
        ["a", "b"], {"a": {"price_input_per_mtok": 1.0, "price_output_per_mtok": 2.0}, "b": {"cost_per_query": 0.01}}
    )
    np.testing.assert_allclose(
        query_costs(priced, texts, output_tokens=50), [[(100 + 100) / 1e6, (1000 + 100) / 1e6], [0.01, 0.01]]
    )
    sized = cost_table(["a-7b", "b"], {})
    np.testing.assert_allclose(query_costs(sized, texts), [[7.0, 7.0], [np.nan, np.nan]])


def test_plot_frontiers_draws_every_router(tmp_path):
    out = run({"locus": PROBS}, LABELS, COSTS, n_boot=8)
    assert plot_frontiers(out["folds"], tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


def two_folds(n_boot: int = 64, *, oracle: bool = False):
    """Fold 1: the three models above; fold 2: the same but C also answers query 3, so LOCUS at weight 1 (always the
    likeliest right) reaches fold 2's best single accuracy only at C's cost."""
    y2 = LABELS.copy()
    y2[2, 3] = 1.0
    probs = {"locus": [PROBS, PROBS]} | ({"oracle": [LABELS, y2]} if oracle else {})
    c = np.broadcast_to(COSTS[:, None], LABELS.shape)
    return evaluate_frontiers(
        probs,
        [LABELS, y2],
        [c, c],
        [LABELS.mean(axis=1), y2.mean(axis=1)],
        names=NAMES,
        n_boot=n_boot,
        weights=[0.0, 0.5, 0.9, 1.0],
    )


def test_the_table_and_the_plot_read_the_cost_share_from_one_fold_mean_curve():
    out = two_folds()
    hulls = [
        (np.array(f["routers"]["locus"]["hull_cost"]), np.array(f["routers"]["locus"]["hull_accuracy"]))
        for f in out["folds"]
    ]
    units = [f["best_single_cost"] for f in out["folds"]]
    hx, hy = fold_mean_hull(hulls, units)
    best = np.mean([f["best_single_accuracy"] for f in out["folds"]])
    stat = out["methods"]["locus"]["cost_share_at_95"]
    assert stat["mean"] == pytest.approx(cost_at(hx, hy, 0.95 * best))
    assert 0 <= stat["not_reached"] <= 1
    # the mean of two piecewise-linear hulls (cost over each fold's best single cost) is linear between their vertices
    grid = np.linspace(hx[0], hx[-1], 50)
    np.testing.assert_allclose(
        np.interp(grid, hx, hy), np.mean([np.interp(grid, h[0] / u, h[1]) for h, u in zip(hulls, units)], axis=0)
    )
    # random mixing ends at the best single model in every fold: its share at 100% of that accuracy is 1
    assert out["methods"]["random_mix"]["cost_share_at_best_single"]["mean"] == pytest.approx(1.0)
    ax = frontiers_figure(out["folds"]).axes[0]
    marked = [t for t in ax.get_legend().get_texts() if t.get_text().startswith("LOCUS at 95%")]
    assert marked and f"{stat['mean']:.1%}" in marked[0].get_text()  # the plot marks the table's figure


def test_the_oracle_does_not_stretch_the_plot_and_its_level_is_written():
    # every model is right on its own queries: the oracle answers all eight, the best single model (C) half
    labels = np.array([[1.0, 1, 0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]])
    probs = np.full(labels.shape, 0.5) + 0.01 * np.arange(3)[:, None]  # LOCUS knows little: always C at w=1
    c = np.broadcast_to(COSTS[:, None], labels.shape)
    out = evaluate_frontiers(
        {"locus": [probs], "oracle": [labels]},
        [labels],
        [c],
        [labels.mean(axis=1)],
        names=NAMES,
        n_boot=8,
        weights=[0.0, 0.5, 1.0],
    )
    ax = frontiers_figure(out["folds"]).axes[0]
    low, high = ax.get_ylim()
    assert 0.5 < high < 1.0 and low < 0.25  # the routers and best single fit
    assert any("oracle (knows the labels): up to 1.000" in t.get_text() for t in ax.texts)
    assert not any("oracle" in t.get_text() for t in frontiers_figure(two_folds(8)["folds"]).axes[0].texts)
