"""The routing policy (locus_model.routing.policy): validated once when made; its guard lets another model than the
one of highest standing win only by the margin; route and route_many apply it alike; the router ranks standing by
the groups' shares, and a checkpoint carries no policy (an older one that saved a margin still loads)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from locus_model.query_groups import Blend, QueryGroups, fit_query_groups
from locus_model.router import Router, measure_noise
from locus_model.routing import (
    GUARD_MARGIN,
    CostError,
    QualityWeightError,
    RoutingError,
    RoutingPolicy,
    incumbent,
    route,
    route_many,
    routing_scores,
)
from locus_model.routing.policy import DEFAULT_GUARD, GUARD_Z
from tests.locus_model.tiny_locus import tiny_model

STANDING = np.array([0.60, 0.72, 0.65])  # model 1 is the most accurate on its own evaluations


def test_only_the_incumbent_is_spared_the_handicap():
    assert incumbent(STANDING) == 1
    np.testing.assert_allclose(routing_scores(np.array([0.5, 0.5, 0.5]), STANDING, 0.05), [0.45, 0.5, 0.45])
    assert incumbent(STANDING, np.array([0, 2])) == 2  # among candidates without model 1
    np.testing.assert_allclose(
        routing_scores(np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.2]]), STANDING, 0.05),
        [[0.85, 0.05], [0.5, 0.5], [0.15, 0.15]],
    )
    np.testing.assert_allclose(routing_scores(np.array([0.9, 0.5]), None, 0.05), [0.9, 0.5])  # no standing: P


def test_each_query_s_incumbent_is_the_best_standing_among_its_candidates():
    known = np.array([[True, True, True], [True, False, False], [True, False, True]])  # (M, Q)
    scores = routing_scores(np.full((3, 3), 0.5), STANDING, 0.1, known)
    # query 0: model 1 (0.72) is a candidate; query 1: only model 0; query 2: model 0 or 2, and 2 stands higher
    np.testing.assert_allclose(scores, [[0.4, 0.5, 0.4], [0.5, 0.4, 0.4], [0.4, 0.4, 0.5]])
    none = routing_scores(np.full((3, 1), 0.5), STANDING, 0.1, np.zeros((3, 1), bool))
    np.testing.assert_allclose(none, [[0.4], [0.4], [0.4]])  # no candidate, no incumbent


@pytest.mark.parametrize("bad", [-0.1, 1.0, "0.02", True, float("nan")])
def test_a_margin_outside_zero_to_one_is_refused_when_the_policy_is_made(bad):
    with pytest.raises(RoutingError, match=r"guard margin .* \[0, 1\)"):
        RoutingPolicy(guard_margin=bad)


@pytest.mark.parametrize(
    "field, bad, error",
    [
        ("quality_weight", 1.5, QualityWeightError),
        ("max_cost", -1.0, CostError),
        ("max_params", float("inf"), CostError),
    ],
)
def test_a_policy_refuses_a_bad_weight_or_cap(field, bad, error):
    with pytest.raises(error, match=field):
        RoutingPolicy(**{field: bad})
    assert replace(RoutingPolicy(), **{field: 0.5}).__dict__[field] == 0.5  # replace validates again
    with pytest.raises(error):
        replace(RoutingPolicy(), **{field: bad})


def test_another_model_wins_a_query_only_by_more_than_the_margin():
    costs = np.zeros(3)
    assert route(np.array([0.70, 0.69, 0.10]), costs).chosen == 0  # no standing: the highest P
    assert route(np.array([0.70, 0.69, 0.10]), costs, standing=STANDING).chosen == 1  # 0.01 < the default 0.02
    assert route(np.array([0.75, 0.69, 0.10]), costs, standing=STANDING).chosen == 0  # 0.06 > margin
    assert route(np.array([0.70, 0.69, 0.10]), costs, RoutingPolicy(guard_margin=0.0), standing=STANDING).chosen == 0


def test_the_incumbent_is_the_best_candidate_left_after_the_caps():
    probs, costs = np.array([0.70, 0.69, 0.695]), np.array([1.0, 5.0, 1.0])
    # model 1 (the most accurate) costs over the cap: the incumbent is then model 2, whose 0.695 is within 0.02
    d = route(probs, costs, RoutingPolicy(max_cost=2.0), standing=STANDING)
    assert d.chosen == 2 and 1 in d.over_cost
    np.testing.assert_allclose(d.scores[[0, 2]], [0.68, 0.695])


def test_route_many_routes_each_query_as_route_does():
    rng = np.random.default_rng(0)
    probs, costs = rng.uniform(0.4, 0.8, size=(3, 200)), rng.uniform(0, 1, size=(3, 1)).repeat(200, axis=1)
    known = rng.uniform(size=(3, 200)) < 0.8
    known[0] = True
    for w in (1.0, 0.7):
        policy = RoutingPolicy(guard_margin=0.05, quality_weight=w)
        many = route_many(probs, costs, policy, known=known, standing=STANDING)
        for q in range(200):
            rows = np.flatnonzero(known[:, q])
            one = route(probs[rows, q], costs[rows, q], policy, standing=STANDING[rows]).chosen
            assert many[q] == rows[one]
    assert (route_many(probs, costs, standing=STANDING) != route_many(probs, costs)).any()


def test_route_many_applies_the_policy_s_caps_as_route_does():
    probs = np.array([[0.9, 0.2], [0.5, 0.6], [0.1, 0.1]])
    costs, params = np.array([3.0, 1.0, 1.0]), np.array([70.0, 7.0, np.nan])
    policy = RoutingPolicy(max_cost=2.0, max_params=10.0)
    many = route_many(probs, costs, policy, params=params)
    assert many.tolist() == [1, 1]  # model 0 over the cost cap, model 2 of unknown size
    assert many.tolist() == [route(probs[:, q], costs, policy, params=params).chosen for q in range(2)]


def test_the_router_ranks_standing_by_the_groups_shares():
    rng = np.random.default_rng(1)
    enc = rng.normal(size=(40, 32)).astype(np.float32)
    labels = np.array(["maths"] * 30 + ["law"] * 10)
    groups = fit_query_groups(enc, labels)
    np.testing.assert_allclose(groups.shares(), [0.25, 0.75])  # law, maths: sorted names
    router = Router(tiny_model(), groups, Blend())
    # b is better at law, a at maths, the larger group: a stands higher
    profiles = np.array([[0.5, 0.9], [0.9, 0.6]])
    np.testing.assert_allclose(router.standing(profiles), [0.25 * 0.5 + 0.75 * 0.9, 0.25 * 0.9 + 0.75 * 0.6])
    pool = pd.DataFrame(
        {
            "model": ["a", "b"],
            "embedding": list(np.zeros((2, 32), np.float32)),
            "group_profile": list(profiles.astype(np.float32)),
        }
    )
    assert incumbent(router.scorer(pool).standing) == 0


def test_a_checkpoint_carries_no_policy_and_an_older_one_with_a_margin_still_loads(tmp_path):
    groups = fit_query_groups(
        np.random.default_rng(2).normal(size=(20, 32)).astype(np.float32), np.array(["a", "b"] * 10)
    )
    old = groups.to_dict()
    del old["share"]
    router = Router(tiny_model(), QueryGroups.from_dict(old), Blend())
    router.save(tmp_path / "r.pt")
    saved = torch.load(tmp_path / "r.pt", weights_only=True)
    assert "guard_margin" not in saved["router"]
    saved["router"]["guard_margin"] = 0.05  # as the checkpoints of the guard's first version saved it
    torch.save(saved, tmp_path / "old.pt")
    back, _ = Router.load(tmp_path / "old.pt")
    assert "guard" not in back.describe()
    np.testing.assert_allclose(back.groups.shares(), [0.5, 0.5])  # before group shares: equal
    assert RoutingPolicy().guard_margin == GUARD_MARGIN == 0.02
    assert "0.05 of P(correct)" in RoutingPolicy(guard_margin=0.05).describe_guard()
    assert "no guard" in RoutingPolicy(guard_margin=0.0).describe_guard()


# ---------------------------------------------------------------------------------------------- the measured guard


def test_the_noise_is_the_root_mean_square_of_each_models_mean_error_per_group():
    # group 0: model 0 right 1 of 2 at P 0.5 (error 0), model 1 right 2 of 2 at P 0.5 (error +0.5): sqrt(0.25 / 2)
    # group 1: model 0 right 0 of 1 at P 0.2 (error -0.2), model 1 has no cell there: 0.2
    probs = np.array([[0.5, 0.5, 0.2], [0.5, 0.5, 0.9]])
    labels = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, np.nan]])
    membership = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(measure_noise(probs, labels, membership), [np.sqrt(0.125), 0.2])
    # a group without a cell takes the others' mean
    three = np.c_[membership, np.zeros(3)]
    np.testing.assert_allclose(measure_noise(probs, labels, three)[2], (np.sqrt(0.125) + 0.2) / 2)


def test_the_measured_margin_follows_each_querys_noise_and_a_fixed_one_overrides_it():
    noise = np.array([0.0, 0.01, 0.1])
    measured = RoutingPolicy(guard_margin="measured")
    np.testing.assert_allclose(measured.margins(noise), GUARD_Z * np.sqrt(2) * noise)
    assert measured.margins(None) == GUARD_MARGIN  # a router without measured noise (an older checkpoint)
    assert RoutingPolicy(guard_margin=0.05).margins(noise) == 0.05
    assert RoutingPolicy().guard_margin == DEFAULT_GUARD and RoutingPolicy(guard_margin=None).margins(noise) == 0.02
    assert "95% probability" in measured.describe_guard()
    # per query: model 0 (P 0.70) beats the incumbent (model 1, P 0.66) where the margin is under 0.04 only
    p = np.array([[0.70, 0.70, 0.70], [0.66, 0.66, 0.66], [0.1, 0.1, 0.1]])
    chosen = np.argmax(routing_scores(p, STANDING, measured.margins(noise)), axis=0)
    np.testing.assert_array_equal(chosen, [0, 0, 1])
    np.testing.assert_array_equal(route_many(p, np.zeros(3), measured, standing=STANDING, noise=noise), [0, 0, 1])


def test_a_router_measures_its_noise_and_keeps_it_in_its_checkpoint(tmp_path):
    rng = np.random.default_rng(3)
    enc = rng.normal(size=(40, 32)).astype(np.float32)
    groups = fit_query_groups(enc, np.array(["a", "b"] * 20))
    router = Router(tiny_model(), groups, Blend())
    scores = (rng.random((3, 40)) < 0.6).astype(np.float32)
    embeddings, profiles = router.pool_rows(enc, scores)
    val = np.full_like(scores, np.nan)
    val[:, :20] = scores[:, :20]
    measured = router.with_noise(enc, val, embeddings, profiles)
    assert measured.noise is not None and len(measured.noise) == 2 and all(x > 0 for x in measured.noise)
    assert router.with_noise(enc, np.full_like(scores, np.nan), embeddings, profiles) is router  # no cell: unmeasured
    measured.save(tmp_path / "r.pt")
    back, _ = Router.load(tmp_path / "r.pt")
    assert back.noise == measured.noise
    np.testing.assert_allclose(back.query_noise(enc[:3]), groups.membership(enc[:3]) @ np.asarray(measured.noise))
    router.save(tmp_path / "old.pt")  # a checkpoint from before the noise
    assert Router.load(tmp_path / "old.pt")[0].query_noise(enc) is None


def test_one_querys_guard_is_the_many_queries_guard_of_one_column():
    rng = np.random.default_rng(5)
    for _ in range(50):
        p, standing = rng.uniform(0, 1, 9), np.round(rng.uniform(0, 1, 9), 1)  # rounded: equal standings
        one = routing_scores(p, standing, 0.03)
        many = routing_scores(p[:, None], standing, np.array([0.03]))[:, 0]
        assert np.array_equal(one, many)
