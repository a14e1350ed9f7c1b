"""Cost-aware routing, fallback chains, cost tables and the quality-cost frontier on tiny hand-checked arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from locus_model.routing import (
    CostError,
    CostUnknown,
    NoCandidateWithinCap,
    QualityWeightError,
    RoutingError,
    RoutingPolicy,
    apply_caps,
    cost_frontier,
    cost_table,
    estimate_tokens,
    fallback_chain,
    normalized_costs,
    quality_lambda,
    route,
    route_many,
    route_scores,
)

P = np.array([0.9, 0.8, 0.5])
C = np.array([10.0, 2.0, 0.0])  # normalised: [1, 0.2, 0]


@pytest.mark.parametrize(
    "w, order, scores",
    [
        (1.0, [0, 1, 2], [0.9, 0.8, 0.5]),
        (0.5, [1, 2, 0], [-0.05, 0.3, 0.25]),  # 0.5 * P - 0.5 * c~
        (0.0, [2, 1, 0], [-1.0, -0.2, 0.0]),
    ],
)
def test_route_ranks_by_weighted_probability_minus_normalised_cost(w, order, scores):
    d = route(P, C, RoutingPolicy(quality_weight=w))
    assert d.ranking.tolist() == order and d.chosen == order[0]
    np.testing.assert_allclose(d.scores, scores, atol=1e-12)
    assert d.over_cost.tolist() == []


def test_quality_weight_maps_to_lambda():
    assert quality_lambda(1.0) == 0.0 and quality_lambda(0.5) == 1.0 and quality_lambda(0.8) == pytest.approx(0.25)
    assert quality_lambda(0.0) == math.inf
    # same ranking as P - lambda * c~
    w = 0.8
    np.testing.assert_allclose(route_scores(P, C, w) / w, P - quality_lambda(w) * C / C.max())
    for bad in (-0.1, 1.2):
        with pytest.raises(QualityWeightError, match=r"quality_weight=.* must be in \[0, 1\]"):
            route(P, C, RoutingPolicy(quality_weight=bad))


def test_cost_cap_keeps_only_affordable_candidates():
    d = route(P, C, RoutingPolicy(quality_weight=1.0, max_cost=5))
    assert d.ranking.tolist() == [1, 2] and d.chosen == 1 and d.over_cost.tolist() == [0]
    assert np.isnan(d.scores[0])
    assert route(P, C, RoutingPolicy(max_cost=0)).chosen == 2
    with pytest.raises(NoCandidateWithinCap, match="no candidate costs at most max_cost=0.5; the cheapest costs 1"):
        route(P, np.array([10.0, 2.0, 1.0]), RoutingPolicy(max_cost=0.5))
    with pytest.raises(CostError, match="max_cost=-1 must be a number >= 0"):
        route(P, C, RoutingPolicy(max_cost=-1))


def test_costs_are_normalised_by_the_dearest_model_per_query():
    np.testing.assert_allclose(normalized_costs(np.array([[2.0, 0.0], [4.0, 0.0]])), [[0.5, 0.0], [1.0, 0.0]])
    assert normalized_costs(np.zeros(3)).tolist() == [0.0, 0.0, 0.0]  # all free: nothing to normalise by
    np.testing.assert_allclose(route_scores(P, C, 0.5), 0.5 * P - 0.5 * normalized_costs(C))


def test_ties_go_to_the_cheaper_then_the_lower_index():
    assert route(np.array([0.5, 0.5, 0.5]), np.array([3.0, 1.0, 1.0])).ranking.tolist() == [1, 2, 0]


def test_fallback_chain_is_nearest_embedding_neighbours_among_candidates():
    z = np.array([[0.0, 0.0], [3.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.0, 1.0]])
    assert fallback_chain(z, 0, [0, 1, 2, 3]).tolist() == [2, 3, 1]
    assert fallback_chain(z, 0, [0, 1, 2, 3], k=2).tolist() == [2, 3]
    assert fallback_chain(z, 0, [0, 1, 2, 3, 4]).tolist() == [2, 4, 3, 1]  # 2 and 4 tie at 1: lower index first
    assert fallback_chain(z, 0, [0]).tolist() == []
    d = route(np.array([0.9, 0.1, 0.2, 0.3, 0.4]), np.zeros(5), embeddings=z)
    assert d.chosen == 0 and d.fallbacks.tolist() == [4, 3, 2, 1]  # the neighbours, tried in ranking order
    near = route(np.array([0.9, 0.1, 0.2, 0.3, 0.4]), np.zeros(5), embeddings=z, n_fallbacks=2)
    assert near.fallbacks.tolist() == [4, 2]  # the two nearest (2 and 4), the better-scored first
    capped = route(
        np.array([0.9, 0.1, 0.2, 0.3, 0.4]), np.array([0, 0, 5, 0, 0.0]), RoutingPolicy(max_cost=1), embeddings=z
    )
    assert capped.fallbacks.tolist() == [4, 3, 1]  # the over-budget neighbour is not a fallback


def test_cost_table_prefers_cost_per_query_then_token_prices():
    t = cost_table(
        ["a", "b", "c"],
        {"a": {"cost_per_query": 0.01}, "b": {"price_input_per_mtok": 1.0, "price_output_per_mtok": 2.0}},
    )
    assert t.basis == "usd" and t.unknown == ("c",) and "unknown cost" in t.note
    # b: (1000 * 1 + 500 * 2) / 1e6; c: unknown, never a made-up cost
    np.testing.assert_allclose(t.costs(input_tokens=1000, output_tokens=500), [0.01, 0.002, np.nan])
    assert t.subset(["b", "a"]).costs(1000, 500).tolist() == pytest.approx([0.002, 0.01])
    assert t.known.tolist() == [True, True, False]


def test_cost_table_falls_back_to_parameter_counts_and_says_so():
    t = cost_table(["a", "b", "c"], {"a": {"params_b": 7}, "b": {"params_b": "70"}})
    assert t.basis == "params_b" and "parameter count" in t.note and t.unknown == ("c",)
    np.testing.assert_allclose(t.costs(10, 10), [7.0, 70.0, np.nan])
    none = cost_table(["a"], {})
    assert none.basis == "none" and none.costs().tolist() == [0.0]
    with pytest.raises(CostError, match=r"model 'a': cost_per_query=-1.0 must be a number >= 0"):
        cost_table(["a"], {"a": {"cost_per_query": -1}})


def test_estimate_tokens():
    assert [estimate_tokens(t) for t in ("", "abcdefgh", "abcdefghi")] == [1, 2, 3]


# model A: good and expensive; model B: cheap, right on query 0 only
PROBS = np.array([[0.9, 0.9, 0.9, 0.9], [0.95, 0.2, 0.2, 0.2]])
LABELS = np.array([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
COSTS = np.array([1.0, 0.1])


def test_route_many_and_unlabelled_models():
    assert route_many(PROBS, COSTS, RoutingPolicy(quality_weight=1.0)).tolist() == [1, 0, 0, 0]
    assert route_many(PROBS, COSTS, RoutingPolicy(quality_weight=0.0)).tolist() == [1, 1, 1, 1]
    known = np.array([[True, True, True, False], [True] * 4])
    assert route_many(PROBS, COSTS, RoutingPolicy(quality_weight=1.0), known=known).tolist() == [1, 0, 0, 1]


def test_cost_frontier_hand_checked():
    # A beats B on queries 1-3 iff 0.9 w - (1 - w) > 0.2 w - 0.1 (1 - w), i.e. w > 0.5625
    f = cost_frontier(PROBS, LABELS, COSTS, names=["A", "B"], weights=[0.0, 0.5, 0.6, 1.0])
    t = f.table.set_index("quality_weight")
    assert t.loc[0.0, "accuracy"] == 0.25 and t.loc[0.0, "mean_cost"] == pytest.approx(0.1)
    assert t.loc[0.5, "accuracy"] == 0.25
    assert t.loc[0.6, "accuracy"] == 0.75 and t.loc[0.6, "mean_cost"] == pytest.approx((0.1 + 3) / 4)
    assert t.loc[1.0, "accuracy"] == 0.75
    assert (f.best_single, f.best_single_accuracy, f.best_single_cost) == ("A", 0.75, 1.0)
    assert (f.cheapest, f.cheapest_accuracy, f.cheapest_cost) == ("B", 0.25, pytest.approx(0.1))
    assert f.cost_at_share == pytest.approx(0.775) and f.weight_at_share == 0.6
    assert t["pareto"].all()  # equal points do not dominate each other
    mix = f.random_mix(3)
    assert mix["accuracy"].tolist() == [0.25, 0.5, 0.75]
    assert "0.775" in f.summary()


def test_cost_frontier_never_reaching_the_share(tmp_path):
    # the router picks the cheaper, more confident, always wrong model: never 95% of the best single model
    f = cost_frontier(
        np.array([[0.1, 0.1], [0.9, 0.9]]), np.array([[1.0, 1.0], [0.0, 0.0]]), np.array([2.0, 1.0]), weights=[0.0, 1.0]
    )
    assert f.cost_at_share is None and "never reached" in f.summary()
    assert f.plot(tmp_path / "f.png").stat().st_size > 0


def test_a_model_of_unknown_size_is_unknown_and_a_size_in_its_name_is_read():
    names = ["big-70b", "acme/new-model-7b", "tiny-3.8b", "gemini-1.5-flash"]
    t = cost_table(names, {"big-70b": {"params_b": 70}})
    np.testing.assert_allclose(t.costs(), [70.0, 7.0, 3.8, np.nan])  # never the largest size for the unknown
    assert t.parsed == ("acme/new-model-7b", "tiny-3.8b") and t.unknown == ("gemini-1.5-flash",)
    assert "read from the name" in t.note and "unknown cost" in t.note
    p = np.array([0.5, 0.4, 0.3, 0.9])
    cheap = route(p, t.costs(), RoutingPolicy(quality_weight=0.5))
    assert cheap.unknown_cost.tolist() == [3] and cheap.ranking.tolist() == [1, 2, 0]
    plain = route(
        p, t.costs(), RoutingPolicy(quality_weight=1.0)
    )  # cost does not matter: the unknown-cost model competes
    assert plain.chosen == 3 and plain.unknown_cost.tolist() == []
    with pytest.raises(CostUnknown, match="every candidate's cost is unknown"):
        route(p[3:], t.costs()[3:], RoutingPolicy(quality_weight=0.5))


def test_a_size_cap_keeps_the_models_of_known_size_within_it():
    p, c = np.array([0.9, 0.8, 0.7, 0.95]), np.array([70.0, 7.0, 3.0, 1.0])
    params = np.array([70.0, 7.0, 3.0, np.nan])  # the last: a priced model of unknown size
    d = route(p, c, RoutingPolicy(max_params=8), params=params)
    assert d.ranking.tolist() == [1, 2] and d.over_params.tolist() == [0] and d.unknown_params.tolist() == [3]
    assert np.isnan(d.scores[[0, 3]]).all()
    both = route(p, c, RoutingPolicy(max_cost=5, max_params=8), params=params)  # the two caps together
    assert both.ranking.tolist() == [2] and both.over_cost.tolist() == [0, 1]
    with pytest.raises(NoCandidateWithinCap, match="max_params=2 .*the smallest over the size cap has 3B"):
        route(p, c, RoutingPolicy(max_params=2), params=params)
    with pytest.raises(CostUnknown, match="every candidate's parameter count is unknown"):
        route(p, c, RoutingPolicy(max_params=8), params=np.full(4, np.nan))


def test_an_unknown_cost_is_never_the_cheapest_on_a_tie():
    p, c = np.array([0.5, 0.5]), np.array([np.nan, 3.0])
    assert route(p, c).ranking.tolist() == [1, 0]  # w = 1: both ranked, the unknown after the known on a tie
    assert route_many(p[:, None], c).tolist() == [1]
    assert route_many(np.array([[0.9], [0.1]]), c, RoutingPolicy(quality_weight=0.5)).tolist() == [
        1
    ]  # w < 1: the unknown is left out
    assert route_many(np.array([[0.9], [0.1]]), c).tolist() == [0]  # w = 1: it competes on P(correct)
    with pytest.raises(CostUnknown, match="no candidate of known cost"):
        route_many(np.array([[0.9]]), np.array([np.nan]), RoutingPolicy(quality_weight=0.5))


def test_a_cost_aware_fallback_chain_never_makes_the_query_dearer_while_cheaper_neighbours_exist():
    # the chosen model (0, cost 10) has two near, dear variants (1, 2: cost 40) and two farther cheap ones (3, 4)
    z = np.array([[0.0, 0.0], [0.1, 0.0], [0.2, 0.0], [1.0, 0.0], [2.0, 0.0]])
    p = np.array([0.9, 0.85, 0.8, 0.6, 0.55])
    c = np.array([10.0, 40.0, 40.0, 5.0, 1.0])
    d = route(p, c, RoutingPolicy(quality_weight=0.99), embeddings=z, n_fallbacks=2)
    assert d.chosen == 0 and d.fallbacks.tolist() == [3, 4]  # not the nearest (dearer) variants
    filled = route(p, c, RoutingPolicy(quality_weight=0.99), embeddings=z, n_fallbacks=3)
    assert filled.fallbacks.tolist() == [3, 4, 1]  # fewer cheap ones than k: the nearest dearer one after them
    # cost has no weight at w = 1: the nearest neighbours, whatever they cost, best-scored first
    assert route(p, c, RoutingPolicy(quality_weight=1.0), embeddings=z, n_fallbacks=2).fallbacks.tolist() == [1, 2]


@pytest.mark.parametrize("w", [1.0, 0.7])
def test_route_many_chooses_what_route_chooses_query_by_query_ties_included(w: float) -> None:
    rng = np.random.default_rng(3)
    probs = rng.choice([0.2, 0.5, 0.8], size=(6, 40))  # many exact ties
    costs = rng.choice([1.0, 2.0, np.nan], size=6)
    costs[0] = 1.0  # one known cost at least
    many = route_many(probs, costs, RoutingPolicy(quality_weight=w))
    one = [route(probs[:, q], costs, RoutingPolicy(quality_weight=w)).chosen for q in range(probs.shape[1])]
    assert many.tolist() == one


def test_the_caps_rule_says_why_each_candidate_is_out_for_one_query_and_for_many():
    """apply_caps, the one caps rule route and route_many share: each candidate out for its first reason."""
    costs = np.array([np.nan, 5.0, 1.0, 1.0, 2.0])  # unknown cost, dear, then three within max_cost
    params = np.array([7.0, 7.0, np.nan, 70.0, 7.0])  # ..., size unknown, too big, within max_params
    caps = apply_caps(costs, RoutingPolicy(max_cost=3.0, max_params=10.0), params)
    assert caps.unknown_cost.tolist() == [True, False, False, False, False]
    assert caps.over_cost.tolist() == [False, True, False, False, False]
    assert caps.unknown_params.tolist() == [False, False, True, False, False]
    assert caps.over_params.tolist() == [False, False, False, True, False]
    assert caps.keep.tolist() == [False, False, False, False, True]
    many = apply_caps(np.stack([costs, costs[::-1]], axis=1), RoutingPolicy(max_cost=3.0, max_params=10.0), params)
    assert many.keep[:, 0].tolist() == caps.keep.tolist()  # (M, Q): the same rule per query, sizes per model
    assert many.keep[:, 1].tolist() == [True, True, False, False, False]  # second query: costs 2, 1, 1, 5, unknown
    quality_only = apply_caps(costs, RoutingPolicy(quality_weight=1.0))  # cost does not rank: nothing is out
    assert quality_only.keep.all()
    with pytest.raises(RoutingError, match="one entry per candidate"):
        apply_caps(costs, RoutingPolicy(max_params=10.0), params[:2])


def test_a_small_pools_chain_is_the_screened_search_s_own_answer():
    from locus_model.neighbours import nearest_neighbours

    rng = np.random.default_rng(3)
    z = np.round(rng.normal(size=(200, 8)), 1)  # rounded: ties among the distances
    among = np.arange(200)
    for chosen in range(0, 200, 17):
        others = among[among != chosen]
        screened = nearest_neighbours(z, 5, rows=np.array([chosen]), among=others)[0][0]
        assert fallback_chain(z, chosen, among, k=5).tolist() == screened.tolist()
