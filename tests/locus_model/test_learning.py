"""The learner: starts exactly at the router's P, moves with outcomes as far as the evidence allows, survives a restart."""

import numpy as np
import pytest

from locus_model.learning import ExplorationBudget, Learner, LearningConfig


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


def test_the_budget_bounds_the_explored_share() -> None:
    budget = ExplorationBudget(0.1)
    for _ in range(1000):
        budget.record(budget.allows())
    assert budget.explored == 100
    off = ExplorationBudget(0.0)
    assert not off.allows()


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
    learner = _learner(client_share=0.5)
    for _ in range(20):
        learner.observe(0, 0, 0.0, 0.6, client="c")
        learner.observe(1, 0, 1.0, 0.55)
    new = learner.remapped(["b", "new", "a"], np.array([[0.55, 0.5], [0.7, 0.7], [0.6, 0.5]]), keep=["a"])
    assert new.names == ("b", "new", "a")
    np.testing.assert_allclose(new.posterior.count[2], learner.posterior.count[0])  # a: kept
    assert new.posterior.count[[0, 1]].sum() == 0  # b (not in keep) and the newcomer start afresh
    np.testing.assert_allclose(new.clients["c"][:, 2], learner.clients["c"][:, 0])
    p = np.array([[0.6], [0.55], [0.6]])
    assert new.proba(p, np.array([0]))[2, 0] == pytest.approx(learner.proba(p[[2, 0]], np.array([0]))[0, 0])


def test_a_single_honest_judge_teaches_at_full_weight() -> None:
    learner = _learner(client_share=0.5)
    weights = [learner.observe(0, 0, 0.0, 0.6, client="judge") for _ in range(100)]
    assert min(weights) == 1.0  # no other client to disagree with, no share to exceed
    assert learner.proba(np.array([[0.6], [0.5]]), np.array([0]))[0, 0] < 0.1


def test_a_client_that_contradicts_the_others_is_down_weighted_and_its_past_with_it() -> None:
    """The judge sees model 0 right 60% of the time, as the router predicts; a poisoner reports 0 for every answer
    on a tenth of the traffic. Its weight falls, and the cell's estimate stays near the judge's."""
    rng = np.random.default_rng(0)
    bounded, unbounded = _learner(), _learner(client_z=float("inf"))
    for learner in (bounded, unbounded):
        for i in range(1000):
            poison = i % 10 == 0
            learner.observe(
                0, 0, 0.0 if poison else float(rng.random() < 0.6), 0.6, client="poisoner" if poison else "judge"
            )
    p, g = np.array([[0.6], [0.5]]), np.array([0])
    assert bounded.observe(0, 0, 0.0, 0.6, client="poisoner") < 0.2  # ~50 effective reports 0.6 off: ~7 count
    assert abs(bounded.proba(p, g)[0, 0] - 0.6) < 0.03 < abs(unbounded.proba(p, g)[0, 0] - 0.6)


def test_two_honest_clients_keep_full_weight() -> None:
    rng = np.random.default_rng(1)
    learner = _learner()
    weights = [learner.observe(0, 0, float(rng.random() < 0.6), 0.6, client=("a", "b")[i % 2]) for i in range(1000)]
    assert np.mean(np.asarray(weights[100:]) == 1.0) > 0.95


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
        "expected": learner.expected.tolist(),
        "clients": {},
    }
    p, g = np.array([[0.6], [0.5]]), np.array([0])
    np.testing.assert_allclose(Learner.from_state(old).proba(p, g), learner.proba(p, g))
