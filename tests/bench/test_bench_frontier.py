"""bench/bench_frontier.py: AIQ and the monotone hull on hand-checked curves, unknown-cost models left out, and the
bench's decisions equal to the library rule's (locus serve's route, the cost_frontier asset's cost_frontier)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bench_frontier import (aiq, cost_at, fold_curves, fold_figures, fold_record, markdown,
                                  model_costs, monotone_hull, plot, rule_choices, summarise, threshold_choices,
                                  undominated)
from locus_model.routing import cost_frontier, route


def test_monotone_hull_drops_points_below_a_chord_and_after_the_best():
    # (1, .55) lies below the chord (0, .5)-(2, .8); (3, .7) and (4, .8) cost more for no more accuracy;
    # of the two points at cost 0 the more accurate starts the hull
    hx, hy = monotone_hull([0, 0, 1, 2, 3, 4], [0.4, 0.5, 0.55, 0.8, 0.7, 0.8])
    assert hx.tolist() == [0, 2] and hy.tolist() == [0.5, 0.8]
    hx, hy = monotone_hull([2, 0, 1], [0.8, 0.5, 0.7])  # (1, .7) is above the chord (.65): kept
    assert hx.tolist() == [0, 1, 2] and hy.tolist() == [0.5, 0.7, 0.8]
    assert (np.diff(monotone_hull([3, 1, 2], [0.9, 0.95, 0.2])[1]) >= 0).all()  # cheapest is best: one point
    assert monotone_hull([3, 1, 2], [0.9, 0.95, 0.2])[0].tolist() == [1]


def test_aiq_of_known_curves():
    a = monotone_hull([0, 1, 2], [0.5, 0.7, 0.8])
    b = (np.array([1.0]), np.array([0.9]))  # one operating point at cost 1: nothing below it, flat after
    got = aiq({"a": a, "b": b})  # range [0, 2]
    assert got["a"] == pytest.approx((0.6 + 0.75) / 2)  # trapezoids (0.5+0.7)/2 + (0.7+0.8)/2 over a width of 2
    assert got["b"] == pytest.approx(0.9 / 2)
    assert aiq({"a": a}, lo=0, hi=4)["a"] == pytest.approx((1.35 + 2 * 0.8) / 4)  # flat at 0.8 after its end


def test_cost_at_interpolates_on_the_hull():
    hx, hy = np.array([0.0, 2.0]), np.array([0.5, 0.8])
    assert cost_at(hx, hy, 0.65) == pytest.approx(1.0)
    assert cost_at(hx, hy, 0.4) == 0.0
    assert np.isnan(cost_at(hx, hy, 0.81))


def synthetic(seed: int = 0, m: int = 12, q: int = 40):
    rng = np.random.default_rng(seed)
    probs = rng.uniform(0.05, 0.95, size=(m, q))
    labels = (rng.uniform(size=(m, q)) < probs).astype(np.float64)
    costs = rng.choice([0.5, 1.0, 3.0, 7.0, 13.0, 70.0], size=m).astype(np.float64)
    costs[[2, 5]] = np.nan  # two models of unknown size
    return probs, labels, costs


def test_models_of_unknown_cost_are_never_chosen_even_when_they_look_best():
    probs, labels, costs = synthetic()
    probs[2] = 0.999  # the unknown-cost model would win every query at w = 1 were it a candidate
    anchor = labels.mean(axis=1)
    anchor[2] = 0.0  # ... but it is not the best single model (whose cost must be known)
    curves, info = fold_curves({"locus": probs, "embedllm_mf": probs, "irt": probs, "per_benchmark": probs},
                               labels, costs, anchor, small_params=3.0, weights=(0.0, 0.5, 0.99, 1.0))
    for name, curve in curves.items():
        if curve.chosen is not None:
            assert not np.isin(curve.chosen, [2, 5]).any(), name
        assert not np.isnan(curve.cost).any()
    assert costs[info["small"]] <= 3.0 and not np.isnan(costs[info["strong"]])
    assert (curves["locus"].chosen[0] == curves["locus"].chosen[0][0]).all()  # w = 0: the cheapest, every query
    assert costs[curves["locus"].chosen[0][0]] == np.nanmin(costs)
    figures = fold_figures(curves, labels[info["strong"]])
    assert set(figures) == set(curves) and all(0 <= f["aiq"][0] <= 1 for f in figures.values())


@pytest.mark.parametrize("consistent", [False, True])
@pytest.mark.parametrize("w", [0.0, 0.3, 0.9, 0.99, 1.0])
def test_the_bench_decides_as_the_library_rule_for_every_query_weight_and_candidate_set(w, consistent):
    probs, _, costs = synthetic(1)
    rng = np.random.default_rng(2)
    if consistent:  # one ranking of the models for every query, as LOCUS's: most models are never chosen
        probs = np.linspace(0.2, 0.8, len(probs))[rng.permutation(len(probs))][:, None] + rng.normal(0, 0.01, probs.shape)
        known = np.flatnonzero(~np.isnan(costs))
        assert len(undominated(probs, costs, known)) < len(known)
    for candidates in (np.flatnonzero(~np.isnan(costs)), np.sort(rng.choice(np.flatnonzero(~np.isnan(costs)), 4, replace=False))):
        chosen = rule_choices(probs, costs, [w], candidates)[0]
        for q in range(probs.shape[1]):
            d = route(probs[candidates, q], costs[candidates], quality_weight=w)  # what locus serve calls per request
            assert chosen[q] == candidates[d.chosen]
    if w < 1:  # serve given every model: route itself leaves the unknown-cost ones out of a cost-aware ranking
        known = np.flatnonzero(~np.isnan(costs))
        chosen = rule_choices(probs, costs, [w], known)[0]
        assert all(chosen[q] == route(probs[:, q], costs, quality_weight=w).chosen for q in range(probs.shape[1]))


def test_the_bench_frontier_equals_the_cost_frontier_the_asset_computes():
    probs, labels, costs = synthetic(3)
    known = np.flatnonzero(~np.isnan(costs))  # the asset leaves the unknown-cost models out, as the bench does
    weights = (0.0, 0.2, 0.5, 0.9, 0.99, 1.0)
    chosen = rule_choices(probs, costs, weights, known)
    q = np.arange(probs.shape[1])
    table = cost_frontier(probs[known], labels[known], costs[known], weights=weights).table
    assert table["accuracy"].tolist() == pytest.approx([labels[c, q].mean() for c in chosen])
    assert table["mean_cost"].tolist() == pytest.approx([costs[c].mean() for c in chosen])


def test_threshold_router_runs_from_the_small_model_to_the_strong_one():
    probs = np.array([[0.9, 0.2, 0.6], [0.5, 0.5, 0.5]])
    chosen, ts = threshold_choices(probs, strong=0, small=1)  # d = 0.4, -0.3, 0.1
    assert chosen[0].tolist() == [1, 1, 1] and chosen[-1].tolist() == [0, 0, 0]
    assert [row.tolist() for row in chosen[1:-1]] == [[0, 1, 1], [0, 1, 0]]  # the largest gain goes first
    assert ts[0] == np.inf and ts[-1] == -np.inf


def test_locus_serve_routes_a_query_as_the_bench_decides(tmp_path):
    """One real POST /route per weight on the tiny served pool: the bench's decision from the same P(correct),
    costs and candidates is the server's."""
    from tests.locus_pipeline.serve.helpers import NAMES, QUERY, client_for, expected_probs
    from tests.locus_pipeline.serve_home import build_home

    built = build_home(tmp_path / "home", NAMES)
    costs = {"alpha-7b": 7, "beta-13b": 13, "gamma-70b": 70, "delta-1b": 1, "org/epsilon 3b": 3}
    p = expected_probs(built, QUERY)
    names = list(p)
    probs = np.array([[p[n]] for n in names])
    cost = np.array([costs[n] for n in names], dtype=np.float64)
    candidates = ["alpha-7b", "gamma-70b", "delta-1b", "org/epsilon 3b"]
    rows = np.array(sorted(names.index(c) for c in candidates))
    with client_for(built, tmp_path, models={"models": {n: {"cost_per_query": c} for n, c in costs.items()}}) as client:
        for w in (0.0, 0.5, 0.9, 0.99, 1.0):
            served = client.post("/route", json={"query": QUERY, "quality_weight": w, "candidates": candidates}).json()
            assert names[rule_choices(probs, cost, [w], rows)[0][0]] == served["chosen"], w


@pytest.mark.slow
def test_the_asset_the_server_and_the_bench_decide_alike_with_unknown_costs_candidates_and_caps(tmp_path):
    """The cost_frontier asset (invoked as Dagster runs it), locus serve (POST /route) and the bench's rule choose the
    same model for every query, weight and candidate set, on a tiny home whose catalog leaves one model's size
    unknown (no size in its name either): the asset and the bench leave it out, the server leaves it out of every
    cost-aware ranking by itself."""
    import dagster as dg
    import pandas as pd

    from locus_model.data.encoding import encode_queries
    from locus_model.infer import predict_proba
    from locus_model.pool import pool_matrix
    from locus_model.routing import cost_info, cost_table, frontier_of_pool
    from locus_pipeline.defs.assets.cost import cost_frontier as cost_frontier_asset
    from tests.locus_pipeline.serve.helpers import client_for
    from tests.locus_pipeline.serve_home import build_home, queries

    names = ["alpha-7b", "beta-13b", "gamma-70b", "delta-1b", "org/epsilon 3b", "mystery-model"]
    built = build_home(tmp_path / "home", names)
    home = built["home"]
    pool_names, z = pool_matrix(home.read_pool())
    texts = queries(6, seed=5)
    probs = predict_proba(built["model"], z, encode_queries(texts, encoder="hashing-256", progress=False))  # (M, Q)
    labels = (np.random.default_rng(0).uniform(size=probs.shape) < 0.5).astype(np.float64)
    qids = [f"t{q}" for q in range(len(texts))]
    # the likelier right, the dearer, in steps as small as the untrained predictor's P(correct) differences: every
    # weight trades the two differently
    mean = probs.mean(axis=1)
    rank, step = np.argsort(np.argsort(mean)), float(np.median(np.diff(np.sort(mean))))
    sizes = {n: np.nan if n == "mystery-model" else 1 + step * rank[i] for i, n in enumerate(pool_names)}
    catalog = pd.DataFrame({"model": pool_names, "params_b": [sizes[n] for n in pool_names]})
    home.write_table("model_catalog", catalog)  # the server reads the same catalog
    home.write_table("raw_evaluations", pd.DataFrame({"source": ["long_format"], "root": ["tests"]}))  # the report's data note
    preds = pd.DataFrame({"model": np.repeat(pool_names, len(qids)), "query_id": np.tile(qids, len(pool_names)),
                          "prob": probs.ravel(), "label": labels.ravel(), "checkpoint_id": built["checkpoint_id"]})
    evaluations = pd.DataFrame({"query_id": qids, "query": texts})
    with dg.build_asset_context() as context:
        table = cost_frontier_asset(context, model_embeddings=home.read_pool(), test_query_predictions=preds,
                                    model_catalog=catalog, evaluation_table=evaluations, home=home).set_index("quality_weight")
    costs = cost_table(pool_names, cost_info(catalog)).costs()  # (M,) params_b, NaN for mystery-model
    assert np.isnan(costs[pool_names.index("mystery-model")]) and set(table["cost_basis"]) == {"params_b"}
    known = np.flatnonzero(~np.isnan(costs))
    weights = [float(w) for w in table.index]  # the asset's 41, from 0 to 1
    bench = rule_choices(probs, costs, weights, known)  # (K, Q)
    assert len({tuple(b) for b in bench}) > 1  # the weights lead to different choices
    q = np.arange(len(texts))
    subset = ["beta-13b", "gamma-70b", "delta-1b", "org/epsilon 3b", "mystery-model"]
    rows = np.array(sorted(pool_names.index(n) for n in subset if n != "mystery-model"))
    cap = float(np.median(costs[rows]))
    small = rows[costs[rows] <= cap]
    capped_frontier = frontier_of_pool(probs[rows], labels[rows], [pool_names[i] for i in rows], texts,
                                       cost_table(pool_names, cost_info(catalog)), weights=weights)
    with client_for(built, tmp_path) as client:
        for k, w in enumerate(weights):
            served = []
            for text in texts:
                body = {"query": text, "quality_weight": w} | ({} if w < 1 else {"candidates": [pool_names[i] for i in known]})
                decision = client.post("/route", json=body).json()
                served.append(pool_names.index(decision["chosen"]))
                if w < 1:
                    assert decision["unknown_cost"] == ["mystery-model"], decision
                capped = client.post("/route", json={"query": text, "quality_weight": w, "candidates": subset,
                                                     "max_params": cap}).json()
                assert pool_names.index(capped["chosen"]) == rule_choices(probs, costs, [w], small)[0][texts.index(text)]
                assert set(capped["over_params"]) == {pool_names[i] for i in rows if costs[i] > cap}
                assert capped["unknown_params"] == ([] if w < 1 else ["mystery-model"])  # w < 1: left out as unknown cost
            assert served == bench[k].tolist(), w
            assert table.loc[w, "accuracy"] == pytest.approx(labels[bench[k], q].mean())  # the asset's point
            assert table.loc[w, "mean_cost"] == pytest.approx(costs[bench[k]].mean())
            assert [rows[i] for i in capped_frontier.chosen[k]] == rule_choices(probs, costs, [w], rows)[0].tolist()


def test_the_served_portfolio_is_routed_by_the_same_rule_among_its_members_of_known_cost(tmp_path):
    probs, labels, costs = synthetic(4)
    anchor = labels.mean(axis=1)
    anchor[[2, 5]] = 0.0
    portfolio = np.array([0, 2, 3, 7, 9])  # row 2: unknown cost, never routed to
    weights = (0.0, 0.5, 0.99, 1.0)
    curves, info = fold_curves({"locus": probs}, labels, costs, anchor, small_params=3.0, weights=weights,
                               portfolio=portfolio)
    served = curves["locus_portfolio"].chosen
    assert set(np.unique(served)) <= {0, 3, 7, 9}
    assert (served == rule_choices(probs, costs, weights, np.array([0, 3, 7, 9]))).all()
    # the whole pool's frontier is never below the portfolio's at w = 1 (more candidates, the same P)
    assert (probs[curves["locus"].chosen[-1], np.arange(probs.shape[1])]
            >= probs[served[-1], np.arange(probs.shape[1])]).all()
    figures = fold_figures(curves, labels[int(np.argmax(anchor))])
    result = {"summary": summarise([figures], [fold_figures(curves, labels[int(np.argmax(anchor))], np.ones((3, labels.shape[1])))],
                                   [{"best_single_cost": 7.0}]),
              "settings": {"cost": {"basis": "usd"}}, "folds": [fold_record(curves, info)]}
    table = markdown(result)
    assert "LOCUS on the served k-center portfolio" in table and "cost @95% (USD / 1k queries)" in table
    assert plot(result, tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


def test_prices_make_the_cost_dollars_per_query_and_unpriced_models_unknown(tmp_path):
    prices = tmp_path / "prices.csv"
    prices.write_text("model,price_input_per_mtok,price_output_per_mtok\na,1.0,2.0\nb,0.5,0.5\n")
    costs, note = model_costs(["a", "b", "c"], prices=prices, input_tokens=100, output_tokens=50)
    np.testing.assert_allclose(costs, [(100 * 1.0 + 50 * 2.0) / 1e6, (100 * 0.5 + 50 * 0.5) / 1e6, np.nan])
    assert note["basis"] == "usd" and note["unknown"] == 1 and note["unknown_examples"] == ["c"]
    nothing = tmp_path / "none.csv"
    nothing.write_text("model,price_input_per_mtok\nzz,1.0\n")
    with pytest.raises(SystemExit, match="no model of the suite has a price"):
        model_costs(["a"], prices=nothing)
