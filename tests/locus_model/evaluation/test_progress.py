"""The evaluation's progress lines and their ETA, on a clock the test moves."""

from __future__ import annotations

import pytest

from locus_model.evaluation.progress import FitProgress, eta_seconds, format_duration


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0 s"),
        (44.6, "45 s"),
        (59.4, "59 s"),
        (60, "1 min 00 s"),
        (185, "3 min 05 s"),
        (3599, "59 min 59 s"),
        (3720, "1 h 02 min"),
        (-3, "0 s"),
    ],
)
def test_durations_read_at_a_glance(seconds, text):
    assert format_duration(seconds) == text


def test_the_eta_prices_each_remaining_fit_at_its_method_mean():
    assert eta_seconds({}, ["locus"]) is None
    done = {"locus": [100.0, 80.0], "irt": [10.0]}
    assert eta_seconds(done, ["locus", "irt", "irt"]) == pytest.approx(90 + 10 + 10)
    assert eta_seconds(done, ["knn"]) == pytest.approx(190 / 3)  # unseen: the mean of every finished fit
    assert eta_seconds(done, ["locus", "locus"], jobs=2) == pytest.approx(90)
    assert eta_seconds(done, []) == 0


def test_a_line_per_fit_with_the_count_and_eta():
    now = [0.0]
    lines = []
    tasks = [(0, "locus"), (0, "irt"), (1, "locus"), (1, "irt")]
    progress = FitProgress(tasks, total_folds=2, say=lines.append, clock=lambda: now[0])
    progress.started(0, "locus")
    now[0] = 120.0
    progress.finished(0, "locus", 120.0)
    now[0] = 130.0
    progress.finished(0, "irt", 10.0)
    now[0] = 250.0
    last = progress.finished(1, "locus", 120.0)
    now[0] = 262.0
    progress.finished(1, "irt", 12.0)
    assert lines == [
        "fold 1/2 locus: fitting ...",
        "fold 1/2 locus          120.0 s (1/4 fits, 2 min 00 s so far, ETA 6 min 00 s)",  # 3 left at 120 s (unseen irt)
        "fold 1/2 irt             10.0 s (2/4 fits, 2 min 10 s so far, ETA 2 min 10 s)",  # 120 + 10
        "fold 2/2 locus          120.0 s (3/4 fits, 4 min 10 s so far, ETA 10 s)",
        "fold 2/2 irt             12.0 s (4/4 fits, 4 min 22 s so far)",
    ]
    assert last == lines[3]
