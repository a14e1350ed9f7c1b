"""bench_small_data's helpers: the draws, the held-out choices, the budget and the summary."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bench_small_data import cell_budget, draw_cell, held_out_rows, summarise


def test_a_draw_is_seeded_sorted_and_on_complete_questions():
    scores = np.random.default_rng(0).random((10, 50)).round()
    scores[3, :20] = np.nan  # model 3 misses the first 20 questions
    models, questions = draw_cell(scores, 4, 25, seed=[0, 4, 25, 0])
    again = draw_cell(scores, 4, 25, seed=[0, 4, 25, 0])
    assert np.array_equal(models, again[0]) and np.array_equal(questions, again[1])
    assert len(models) == 4 and len(questions) == 25 and (np.diff(models) > 0).all() and (np.diff(questions) > 0).all()
    assert not np.isnan(scores[np.ix_(models, questions)]).any()
    assert np.array_equal(draw_cell(scores, None, 10, seed=1)[0], np.arange(10))  # all models


def test_the_strongest_is_held_out_and_the_fraction_is_the_protocols():
    scores = np.array([[1, 0, 0], [1, 1, 1], [0, 1, np.nan], [0, 0, 0], [1, 0, 1]], float)
    assert held_out_rows(scores, "strongest", 0).tolist() == [1]
    assert len(held_out_rows(scores, "fraction", 0)) == 1  # round(0.2 * 5)
    with pytest.raises(ValueError, match="use one of"):
        held_out_rows(scores, "weakest", 0)


def test_the_budget_fits_the_training_queries():
    assert cell_budget(1500, 5) == 256
    assert cell_budget(200, 5) == 160 - 16 - 1  # 40 test, 16 validation: every remaining training query but one
    assert cell_budget(200, 5, budget=64) == 64


def test_summary_differences_are_paired_per_unit():
    units = [
        {
            "models": "8",
            "questions": 500,
            "holdout": "strongest",
            "routing": {"locus": a, "best_single": b, "per_benchmark": c, "oracle": 0.9},
        }
        for a, b, c in [(0.6, 0.5, 0.55), (0.7, 0.6, 0.65)]
    ]
    rows = {r["method"]: r for r in summarise(units)}
    assert rows["locus"]["vs_best_single"]["diff"] == pytest.approx(0.1)
    assert rows["locus"]["vs_per_benchmark"]["diff"] == pytest.approx(0.05) and rows["locus"]["units"] == 2
    assert "vs_best_single" not in rows["oracle"] and rows["best_single"]["routing"] == pytest.approx(0.55)
