"""bench/diag/newcomer_offsets.py's candidates on hand-checked numbers."""

from __future__ import annotations

import numpy as np
import pytest

from bench.diag.newcomer_offsets import accuracy_offsets, guarded, with_offsets


def test_accuracy_offsets_bring_the_mean_to_the_record_shrunk_by_evidence():
    """A newcomer right on 9 of its 10 evaluations, scored 0.5: its offset is logit(9.5/11) - logit(0.5) at full
    weight, half of it with 10 pseudo-counts; a model the router already matches moves not at all."""
    scores = np.array([[1.0] * 9 + [0.0], [1.0] * 5 + [0.0] * 5])
    p = np.full(scores.shape, 0.5)
    p[1] = 5.5 / 11  # its smoothed record
    full = accuracy_offsets(p, scores, strength=0.0)
    assert full[0] == pytest.approx(np.log(9.5 / 1.5), rel=1e-5) and full[1] == pytest.approx(0.0, abs=1e-6)
    assert accuracy_offsets(p, scores, strength=10.0)[0] == pytest.approx(0.5 * full[0], rel=1e-5)
    assert with_offsets(p, full)[0, 0] == pytest.approx(9.5 / 11, rel=1e-5)


def test_the_guard_keeps_the_routers_choice_only_above_the_margin():
    router = np.array([[0.9, 0.52], [0.5, 0.5]])  # best single: row 1 (constant rows of the baseline)
    best = np.array([[0.4, 0.4], [0.6, 0.6]])
    out = guarded(router, best, margin=0.1)
    assert np.argmax(out, axis=0).tolist() == [0, 1]  # 0.9 - 0.5 > 0.1 keeps model 0; 0.52 - 0.5 does not
