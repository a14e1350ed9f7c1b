"""A command prints what its user needs: the libraries' notices for this code's maintainers (pandas' FutureWarning,
Dagster's BetaWarning and PreviewWarning) stay out of `locus`'s output (issue 58 item 15)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# each entry point runs a command whose work raises the warnings seen in `locus evaluate`, `locus onboard` and
# `locus pool remove` (a FutureWarning as pandas raises it: attributed to the caller's line)
NOISY = """
import sys, warnings
from locus_pipeline import cli
import {module} as owner

def noisy(args):
    import pandas as pd
    from dagster import BetaWarning, PreviewWarning
    warnings.warn("Downcasting object dtype arrays on .fillna is deprecated", FutureWarning)
    warnings.warn("Parameter `tags` of AssetSpec is currently in beta", BetaWarning)
    warnings.warn("asset checks are in preview", PreviewWarning)
    print("the command's own output")
    return 0

setattr(owner, "{patched}", noisy)  # the command the parser dispatches to
sys.exit(cli.main({argv!r}))
"""


@pytest.mark.parametrize(
    "module, patched, argv",
    [
        ("locus_model.cli", "run_evaluate", ["evaluate", "--evaluations", "x.csv", "--out", "r.json"]),
        ("locus_pipeline.home_cli", "run_pool_remove", ["pool", "remove", "acme/x"]),
        ("locus_pipeline.live_cli", "run_onboard", ["onboard", "--endpoint", "acme/x", "--models-config", "m.yaml"]),
    ],
)
def test_the_locus_command_prints_no_library_warnings(module, patched, argv) -> None:
    """`locus` (locus_pipeline.cli.main, the console script) around each command."""
    code = NOISY.format(module=module, patched=patched, argv=argv)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "default"}  # as a user's shell: shown by default
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "the command's own output"
    assert "Warning" not in done.stderr, done.stderr[-2000:]


def test_without_the_filters_the_same_warnings_are_printed() -> None:
    """The check above can fail: the same command called past the entry point prints them."""
    code = NOISY.format(module="locus_model", patched="run_evaluate", argv=[]).replace(
        "sys.exit(cli.main([]))", "sys.exit(noisy(None))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert "FutureWarning" in done.stderr and "BetaWarning" in done.stderr and "PreviewWarning" in done.stderr
