"""The learner: starts exactly at the router's P, moves with outcomes as far as the evidence allows, survives a
restart; who steers whom (graders, clients that agree), and its boundaries."""

import numpy as np
import pytest

from locus_model.learning import POOLED, Learner, LearningConfig


def _learner(**config) -> Learner:
    return Learner.start_from(["a", "b"], np.array([[0.6, 0.5], [0.55, 0.5]]), LearningConfig(**config))


def test_no_outcome_no_change_and_calibrated_outcomes_no_shift() -> None:
    learner = _learner()
    p = np.array([[0.6, 0.7, 0.2], [0.5, 0.4, 0.9]])
    groups = np.array([0, 0, 1])
    np.testing.assert_allclose(learner.proba(p, groups), p, atol=1e-9)
    for i in range(300):  # model 0 right exactly as often as the router said (P 0.6)
        learner.observe(0, 0, float(i % 5 < 3), 0.6)
    assert learner.proba(p, groups)[0, 0] == pytest.approx(0.6, abs=0.03)


def test_a_model_worse_than_predicted_moves_down_on_its_group_only() -> None:
    learner = _learner()
    p = np.array([[0.6, 0.7, 0.2], [0.5, 0.4, 0.9]])
    groups = np.array([0, 0, 1])
    for _ in range(100):
        learner.observe(0, 0, 0.0, 0.6)
    learned = learner.proba(p, groups)
    assert learned[0, 0] < 0.1 and learned[0, 1] < 0.1  # group 0: down
    assert learned[0, 2] == pytest.approx(0.2) and np.allclose(learned[1], p[1])  # elsewhere: untouched
    learner.reset(0)
    np.testing.assert_allclose(learner.proba(p, groups), p, atol=1e-9)


def test_forgetting_lets_a_changed_model_be_noticed() -> None:
    slow, fast = _learner(half_life=float("inf")), _learner(half_life=50.0)
    for learner in (slow, fast):
        for _ in range(1000):
            learner.observe(0, 0, 1.0, 0.6)
        for _ in range(100):
            learner.observe(0, 0, 0.0, 0.6)
    p, g = np.array([[0.6], [0.5]]), np.array([0])
    assert (
        fast.proba(p, g)[0, 0] < 0.4 < slow.proba(p, g)[0, 0]
    )  # 1000 right then 100 wrong: ~0.25 of the evidence right


def test_state_round_trip() -> None:
    learner = _learner()
    for i in range(50):
        learner.observe(i % 2, i % 2, float(i % 3 == 0), 0.5, client="judge")
    back = Learner.from_state(learner.state_dict())
    p, g = np.array([[0.6, 0.3], [0.5, 0.5]]), np.array([0, 1])
    np.testing.assert_allclose(back.proba(p, g), learner.proba(p, g))


def test_rows_read_only_those_models_cells_and_the_learned_profiles_follow_the_shift() -> None:
    learner = _learner()
    for _ in range(50):
        learner.observe(1, 1, 0.0, 0.5)
    p = np.array([[0.6, 0.7], [0.5, 0.4]])
    groups = np.array([1, 0])
    np.testing.assert_allclose(learner.proba(p[[1]], groups, rows=np.array([1])), learner.proba(p, groups)[[1]])
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    drawn = learner.draw(p[[1]], groups, rng_a, rows=np.array([1]))
    assert drawn.shape == (1, 2) and drawn[0, 0] < 0.4  # group 1 of model 1: graded 0, drawn low
    assert learner.draw(p[[1]], groups, rng_b, rows=np.array([1])).tolist() == drawn.tolist()  # seeded
    profiles = learner.profiles()
    np.testing.assert_allclose(profiles[0], [0.6, 0.5], atol=1e-9)  # no outcome: the starting profile
    assert profiles[1, 1] < 0.2 and profiles[1, 0] == pytest.approx(0.55)


def test_a_learner_remapped_to_another_pool_keeps_the_evidence_of_the_models_it_keeps() -> None:
    learner = _learner()
    for _ in range(20):
        learner.observe(0, 0, 0.0, 0.6, client="c", grader=False)
        learner.observe(1, 0, 1.0, 0.55)
    new = learner.remapped(["b", "new", "a"], np.array([[0.55, 0.5], [0.7, 0.7], [0.6, 0.5]]), keep=["a"])
    assert new.names == ("b", "new", "a")
    np.testing.assert_allclose(new.view("c").posterior.count[2], learner.view("c").posterior.count[0])  # a: kept
    assert new.posterior.count[[0, 1]].sum() == 0  # b (not in keep) and the newcomer start afresh
    np.testing.assert_allclose(new.clients["c"][:, 2], learner.clients["c"][:, 0])
    p = np.array([[0.6], [0.55], [0.6]])
    got = new.proba(p, np.array([0]), client="c")[2, 0]
    assert got == pytest.approx(learner.proba(p[[2, 0]], np.array([0]), client="c")[0, 0])


def test_a_grader_steers_everyone_a_lone_client_only_itself() -> None:
    p, g = np.array([[0.6], [0.5]]), np.array([0])
    judged = _learner()
    for _ in range(100):
        judged.observe(0, 0, 0.0, 0.6, client="judge", grader=True)
    assert judged.proba(p, g)[0, 0] < 0.1 and judged.proba(p, g, client="anyone")[0, 0] < 0.1
    alone = _learner()
    for _ in range(100):
        alone.observe(0, 0, 0.0, 0.6, client="team-a", grader=False)
    assert alone.proba(p, g, client="team-a")[0, 0] < 0.1  # its own routing moves
    np.testing.assert_array_equal(alone.proba(p, g), p)  # nobody else's: no second client agrees
    np.testing.assert_array_equal(alone.proba(p, g, client="team-b"), p)


def test_two_clients_that_agree_move_everyone_by_the_smaller_move() -> None:
    p, g = np.array([[0.6], [0.5]]), np.array([0])
    learner = _learner()
    for i in range(200):  # a: model 0 right 20% of the time; b: 40% (both below the router's 0.6)
        learner.observe(0, 0, float(i % 5 == 0), 0.6, client="a", grader=False)
        learner.observe(0, 0, float(i % 5 < 2), 0.6, client="b", grader=False)
    shared = learner.proba(p, g)[0, 0]
    assert learner.proba(p, g, client="a")[0, 0] < shared - 0.1  # a's own routing follows a
    assert shared == pytest.approx(learner.proba(p, g, client="b")[0, 0], abs=0.03)  # everyone: b's, the smaller
    assert 0.3 < shared < 0.5


def test_an_attacker_posting_four_times_the_honest_volume_moves_nobody_but_itself() -> None:
    """Two credentials: the honest one graded model 0 (the best) 1 and model 1 (the weakest) 0 on 100 pairs; the
    attacker then posts 400 pairs the other way. The honest client's learned P, and a third client's, stay put."""
    learner = Learner.start_from(["best", "weak"], np.array([[0.7, 0.7], [0.2, 0.2]]))
    for _ in range(100):
        learner.observe(0, 0, 1.0, 0.7, client="honest", grader=False)
        learner.observe(1, 0, 0.0, 0.2, client="honest", grader=False)
    p, g = np.array([[0.7], [0.2]]), np.array([0])
    before = learner.proba(p, g, client="honest"), learner.proba(p, g)
    for _ in range(400):
        learner.observe(0, 0, 0.0, 0.7, client="attacker", grader=False)
        learner.observe(1, 0, 1.0, 0.2, client="attacker", grader=False)
    np.testing.assert_allclose(learner.proba(p, g, client="honest"), before[0], atol=1e-12)
    np.testing.assert_allclose(learner.proba(p, g), before[1], atol=1e-12)
    assert learner.proba(p, g, client="attacker")[0, 0] < 0.1  # its own routing only
    assert len(learner.clients) == 2


def test_state_is_bounded_by_the_clients_held_apart() -> None:
    learner = _learner(max_clients=3)
    for i in range(50):
        learner.observe(0, 0, 1.0, 0.6, client=f"label-{i}", grader=False)
    assert len(learner.clients) == 3 and POOLED in learner.clients
    assert 40 < learner.clients[POOLED][1].sum() < 48  # the other 48 labels' answers, discounted by the half-life


def test_boundaries_refuse_what_does_not_fit_and_say_how_to_fix_it() -> None:
    learner = _learner()
    with pytest.raises(ValueError, match="model index -1 is not one of 0..1"):
        learner.observe(-1, 0, 1.0, 0.5)
    with pytest.raises(ValueError, match="group index 2"):
        learner.observe(0, 2, 1.0, 0.5)
    state = learner.state_dict()
    state["clients"] = {"a": np.zeros((3, 3, 2)).tolist()}
    with pytest.raises(ValueError, match=r"client 'a' has sums of shape \(3, 3, 2\), not \(3, 2, 2\).*delete"):
        Learner.from_state(state)
    state["clients"] = {"a": [[[2.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]], [[0.5, 0.0], [0.0, 0.0]]]}
    with pytest.raises(ValueError, match="more right answers than answers"):
        Learner.from_state(state)
    with pytest.raises(ValueError, match="not a learner's state"):
        Learner.from_state({"names": "a"})


def test_a_newcomer_prior_variance_lets_its_few_outcomes_move_it_further() -> None:
    narrow = _learner()
    wide = Learner.start_from(
        ["a", "b"],
        np.array([[0.6, 0.5], [0.55, 0.5]]),
        LearningConfig(),
        prior_var=np.array([[0.05, 0.05], [0.01, 0.01]]),
    )
    for learner in (narrow, wide):
        for i in range(15):  # 12 of 15 right where the prior says 0.6
            learner.observe(0, 0, float(i % 5 != 0), 0.6)
    p, g = np.array([[0.6], [0.5]]), np.array([0])
    assert wide.proba(p, g)[0, 0] > narrow.proba(p, g)[0, 0] + 0.04
    back = Learner.from_state(wide.state_dict())
    np.testing.assert_allclose(back.proba(p, g), wide.proba(p, g))


def test_a_state_written_before_the_per_client_sums_reads_back() -> None:
    learner = _learner()
    for i in range(40):
        learner.observe(0, 0, float(i % 4 == 0), 0.6)
    old = {
        "names": ["a", "b"],
        "config": learner.state_dict()["config"],
        "start": learner.start.tolist(),
        "right": learner.posterior.right.tolist(),
        "count": learner.posterior.count.tolist(),
        "expected": learner.view().expected.tolist(),  # view(None): the shared view
        "clients": {},
    }
    p, g = np.array([[0.6], [0.5]]), np.array([0])
    np.testing.assert_allclose(Learner.from_state(old).proba(p, g), learner.proba(p, g))
