"""The guard (locus_model.guard): another model than the one of highest standing wins only by the margin;
route and route_many apply it alike; the router carries its margin through a checkpoint and ranks standing by the
groups' shares."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from locus_model.query_groups import Blend, QueryGroups, fit_query_groups
from locus_model.router import Router
from locus_model.routing import GUARD_MARGIN, Guard, route, route_many
from tests.locus_model.tiny_locus import tiny_model

STANDING = np.array([0.60, 0.72, 0.65])  # model 1 is the most accurate on its own evaluations


def test_only_the_reference_is_spared_the_handicap():
    guard = Guard(STANDING, 0.05)
    assert guard.reference() == 1
    np.testing.assert_allclose(guard.handicap(), [0.05, 0.0, 0.05])
    assert guard.reference(np.array([0, 2])) == 2  # among candidates without model 1
    np.testing.assert_allclose(guard.handicap(np.array([2, 0])), [0.0, 0.05])
    np.testing.assert_allclose(guard.scores(np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.2]])),
                               [[0.85, 0.05], [0.5, 0.5], [0.15, 0.15]])


@pytest.mark.parametrize("bad", [-0.1, 1.0, "0.02", True, float("nan")])
def test_a_margin_outside_zero_to_one_is_refused(bad):
    with pytest.raises(ValueError, match=r"guard margin .* \[0, 1\)"):
        Guard(STANDING, bad)


def test_another_model_wins_a_query_only_by_more_than_the_margin():
    costs = np.zeros(3)
    assert route(np.array([0.70, 0.69, 0.10]), costs).chosen == 0  # no guard: the highest P
    assert route(np.array([0.70, 0.69, 0.10]), costs, guard=Guard(STANDING, 0.02)).chosen == 1  # 0.01 < margin
    assert route(np.array([0.75, 0.69, 0.10]), costs, guard=Guard(STANDING, 0.02)).chosen == 0  # 0.06 > margin
    assert route(np.array([0.70, 0.69, 0.10]), costs, guard=Guard(STANDING, 0.0)).chosen == 0  # margin 0: no guard


def test_the_reference_is_the_best_candidate_left_after_the_caps():
    probs, costs = np.array([0.70, 0.69, 0.695]), np.array([1.0, 5.0, 1.0])
    # model 1 (the most accurate) costs over the cap: the reference is then model 2, whose 0.695 is within 0.02
    d = route(probs, costs, max_cost=2.0, guard=Guard(STANDING, 0.02))
    assert d.chosen == 2 and 1 in d.over_cost
    np.testing.assert_allclose(d.scores[[0, 2]], [0.68, 0.695])


def test_route_many_routes_each_query_as_route_does():
    rng = np.random.default_rng(0)
    probs, costs = rng.uniform(0.4, 0.8, size=(3, 200)), rng.uniform(0, 1, size=(3, 1)).repeat(200, axis=1)
    known = rng.uniform(size=(3, 200)) < 0.8
    known[0] = True
    guard = Guard(STANDING, 0.05)
    for w in (1.0, 0.7):
        many = route_many(probs, costs, w, known, guard=guard)
        for q in range(200):
            rows = np.flatnonzero(known[:, q])
            one = route(probs[rows, q], costs[rows, q], quality_weight=w,
                        guard=Guard(STANDING[rows], 0.05)).chosen
            assert many[q] == rows[one]
    assert (route_many(probs, costs, 1.0, guard=guard) != route_many(probs, costs, 1.0)).any()


def test_the_router_ranks_standing_by_the_groups_shares_and_keeps_its_margin(tmp_path):
    rng = np.random.default_rng(1)
    enc = rng.normal(size=(40, 32)).astype(np.float32)
    labels = np.array(["maths"] * 30 + ["law"] * 10)
    groups = fit_query_groups(enc, labels)
    np.testing.assert_allclose(groups.shares(), [0.25, 0.75])  # law, maths: sorted names
    router = Router(tiny_model(), groups, Blend(), guard_margin=0.05)
    # b is better at law, a at maths, the larger group: a stands higher
    profiles = np.array([[0.5, 0.9], [0.9, 0.6]])
    np.testing.assert_allclose(router.standing(profiles), [0.25 * 0.5 + 0.75 * 0.9, 0.25 * 0.9 + 0.75 * 0.6])
    pool = pd.DataFrame({"model": ["a", "b"], "embedding": list(np.zeros((2, 32), np.float32)),
                         "group_profile": list(profiles.astype(np.float32))})
    guard = router.scorer(pool).guard()
    assert guard.reference() == 0 and guard.margin == 0.05
    router.save(tmp_path / "r.pt", encoder="x")
    back, _ = Router.load(tmp_path / "r.pt")
    assert back.guard_margin == 0.05 and "0.05 of P(correct)" in back.describe()
    np.testing.assert_allclose(back.groups.shares(), groups.shares())
    assert "no guard" in replace(router, guard_margin=0.0).describe()


def test_a_checkpoint_from_before_the_guard_gets_the_default_margin_and_equal_shares(tmp_path):
    groups = fit_query_groups(np.random.default_rng(2).normal(size=(20, 32)).astype(np.float32),
                              np.array(["a", "b"] * 10))
    old = groups.to_dict()
    del old["share"]
    router = Router(tiny_model(), QueryGroups.from_dict(old), Blend())
    router.save(tmp_path / "old.pt")
    saved = torch.load(tmp_path / "old.pt", weights_only=True)
    del saved["router"]["guard_margin"]
    torch.save(saved, tmp_path / "old.pt")
    back, _ = Router.load(tmp_path / "old.pt")
    assert back.guard_margin == GUARD_MARGIN
    np.testing.assert_allclose(back.groups.shares(), [0.5, 0.5])
