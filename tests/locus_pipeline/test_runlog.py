"""The repository's dagster.yaml prints each run's start and end and each step's end beside the INFO lines."""

from __future__ import annotations

import shutil
import warnings

import dagster as dg

from locus_pipeline.home import REPO_ROOT


def test_a_run_prints_its_start_its_steps_and_its_end_but_no_debug_step_events(tmp_path, capfd) -> None:
    shutil.copyfile(REPO_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")

    @dg.asset
    def tiny(context) -> int:
        context.log.info("working")
        return 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
            assert dg.materialize([tiny], instance=instance).success
    err = capfd.readouterr().err
    assert "RUN_START" in err and "STEP_SUCCESS" in err and "RUN_SUCCESS" in err and "working" in err, err
    assert "STEP_START" not in err and "HANDLED_OUTPUT" not in err  # the DEBUG events stay in the event log
