"""`locus learn show`: what the gateways learned, per model, read from the home's saved learner state."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from locus_model.learning import Learner, LearningConfig
from locus_pipeline.cli import main as cli_main
from locus_pipeline.home_cli import learned_standing
from tests.locus_pipeline.serve.helpers import NAMES
from tests.locus_pipeline.serve_home import build_home


def _learner(names, k: int = 2) -> Learner:
    """Every model at 0.7 on every group; the first model graded 0 on 30 answers of group 0 (nothing forgotten)."""
    learner = Learner.start_from(list(names), np.full((len(names), k), 0.7), LearningConfig(half_life=math.inf))
    for _ in range(30):
        learner.observe(0, 0, 0.0, 0.7)
    return learner


def test_the_learned_standing_moves_with_the_outcomes_and_stays_inside_its_interval() -> None:
    rows = learned_standing({"learner": _learner(["a", "b"]).state_dict()}, [0.5, 0.5])
    a, b = rows
    assert a["model"] == "a" and a["outcomes"] == pytest.approx(30.0) and a["trained"] == pytest.approx(0.7)
    assert a["learned"] < a["trained"] - 0.1 and a["lo"] <= a["learned"] <= a["hi"]
    assert b["outcomes"] == 0.0 and b["learned"] == pytest.approx(b["trained"])  # no outcome: as trained
    assert b["lo"] < b["learned"] < b["hi"]


def test_learn_show_prints_each_model_of_the_saved_state(tmp_path: Path, capsys) -> None:
    built = build_home(tmp_path / "home", NAMES)
    home = built["home"]
    k = len(home.pool_checkpoint().router.groups.names)
    home.write_learner_state(
        {"checkpoint_id": home.pool_checkpoint().checkpoint_id, "learner": _learner(NAMES, k).state_dict()}
    )
    assert cli_main(["learn", "show", "--home", str(home.path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["model", "outcomes", "trained"]
    assert len(out) == 1 + len(NAMES)
    rows = {n: next(line for line in out[1:] if line.startswith(f"{n} ")) for n in NAMES}
    assert rows[NAMES[0]].split()[1] == "30.0" and rows[NAMES[0]].rstrip().endswith("never")


def test_learn_show_says_when_nothing_was_learned(tmp_path: Path, capsys) -> None:
    built = build_home(tmp_path / "home", NAMES)
    assert cli_main(["learn", "show", "--home", str(built["home"].path)]) == 0
    assert "no learner state" in capsys.readouterr().out
