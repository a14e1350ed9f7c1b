"""The repository's dagster.yaml prints each run's start and end and each step's end beside the INFO lines."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

from locus_pipeline.home_location import REPO_ROOT

# A run in its own interpreter, as `dagster dev` and `make demo` start them: its stderr is the run's terminal, and no
# logging state left by other tests in this process (handlers, levels, captured streams) can reach it.
RUN = textwrap.dedent(
    """
    import sys, warnings
    import dagster as dg

    @dg.asset
    def tiny(context) -> int:
        context.log.info("working")
        return 1

    warnings.simplefilter("ignore")
    with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
        assert dg.materialize([tiny], instance=instance).success
    """
)


def test_a_run_prints_its_start_its_steps_and_its_end_but_no_debug_step_events(tmp_path) -> None:
    shutil.copyfile(REPO_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "RUN_START" in err and "STEP_SUCCESS" in err and "RUN_SUCCESS" in err and "working" in err, err
    assert "STEP_START" not in err and "HANDLED_OUTPUT" not in err  # the DEBUG events stay in the event log
