"""Exploration only where someone grades: no outcome in a group, no exploration there; then a budget in proportion."""

import numpy as np

from locus_model.learning import Exploration


def test_no_outcome_no_exploration_then_in_proportion_to_the_outcomes_and_the_width() -> None:
    ex = Exploration(0.1, groups=2)
    assert ex.allows(0, 1.0) == (False, ex.allows(0, 1.0)[1]) and "nobody grades" in ex.allows(0, 1.0)[1]
    for _ in range(50):
        ex.outcome(0)
    explored = 0
    for _ in range(1000):
        ok, _ = ex.allows(0, 0.5)
        ex.record(0, ok)
        explored += ok
    assert explored == 2  # 0.1 x 50 outcomes x 0.5 of the prior's width left: 2.5 requests, whole ones
    assert not ex.allows(1, 1.0)[0]  # the other group: nobody graded it
    assert not Exploration(0.0, groups=1).allows(0, 1.0)[0]
    back = Exploration.from_state(0.1, 2, ex.state_dict())
    np.testing.assert_array_equal(back.graded, ex.graded)
    np.testing.assert_array_equal(back.explored, ex.explored)
