"""The pipeline's package order holds (ORDER below: no package cycle); an import inside a function says why
(`# why:`): it keeps torch, mlflow or the gateway out of the code location's load, or keeps `locus --help` fast
(tests/local_imports.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.local_imports import WHY, package_imports, unexplained_local_imports

PIPELINE = Path(__file__).resolve().parents[2] / "locus_pipeline"
MODULES = sorted(PIPELINE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PIPELINE)))
def test_a_pipeline_function_local_import_says_why(path: Path) -> None:
    unexplained = unexplained_local_imports(path.read_text(encoding="utf-8"))
    assert not unexplained, (
        f"locus_pipeline/{path.relative_to(PIPELINE)}: function-local imports without a reason at "
        f"lines {unexplained}: import at the top, or say why (`{WHY} ...`: torch out of the code "
        f"location's load, mlflow, CLI start-up)"
    )


def test_the_check_finds_an_import_without_a_reason() -> None:
    source = (
        "import os\n\n\ndef f():\n    import json\n\n    from locus_pipeline.storage import LocusHome\n"
        "def g():\n    # why: torch stays out of the code location's load\n    import torch\n\n"
        "    from locus_model.pool import pool_matrix\n"
        "def h():\n    x = 1\n    import numpy  # why: on its line\n"
        "async def k():\n    # a comment that is no reason\n    import httpx\n"
    )
    assert unexplained_local_imports(source) == [5, 7, 18]


# The pipeline's package order, lowest first: a module may import only packages (and root modules) of its own rank
# or below, at the top, inside a function or under TYPE_CHECKING, so no package cycle hides behind a late import. The
# method's plumbing sits below the Dagster adapters (defs/) that call it; the command line and the dev server on top.
ORDER = (
    ("home_location", "runlog", "runs", "tables", "pyfunc"),  # where the home is; Dagster run tags; the MLflow pyfunc
    ("instance", "storage"),  # the Dagster instance's folder; the home's one owner of paths and locks
    ("intake", "serve", "newcomers", "pool_rows", "reports"),  # the drop folder; locus serve; what assets compute
    ("tracking",),  # MLflow runs (through a Tracking protocol: no resource imported)
    ("live",),  # live onboarding: asking, grading, handing the answers to the intake
    ("defs",),  # the Dagster definitions: assets, checks, jobs, resources, sensors
    ("definitions",),  # the code location's entry point
    ("home_cli", "live_cli"),  # commands that change a home or onboard a live endpoint (they start runs in-process)
    ("cli", "demo", "devserver"),  # the command line and the dev stack
)
RANK = {name: rank for rank, names in enumerate(ORDER) for name in names}


def _package(path: Path) -> str:
    return path.relative_to(PIPELINE).with_suffix("").parts[0]


def _pipeline_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported locus_pipeline package or root module) of every import in the module."""
    return package_imports(path.read_text(encoding="utf-8"), "locus_pipeline")


def test_every_pipeline_package_has_a_rank() -> None:
    assert {_package(p) for p in MODULES} - {"__init__"} <= set(RANK), sorted(
        {_package(p) for p in MODULES} - set(RANK)
    )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PIPELINE)))
def test_a_pipeline_module_imports_only_packages_at_or_below_its_own(path: Path) -> None:
    own = _package(path)
    if own == "__init__":
        return
    upward = [(line, pkg) for line, pkg in _pipeline_imports(path) if RANK[pkg] > RANK[own]]
    assert not upward, f"locus_pipeline/{path.relative_to(PIPELINE)} ({own}) imports packages above it: {upward}"


def test_the_order_check_sees_an_import_under_type_checking_and_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from locus_pipeline.defs.resources "
        "import MlflowTracking\n\n\ndef f():\n    import locus_pipeline.live.onboard  # why: late\n"
    )
    assert _pipeline_imports(module) == [(3, "defs"), (7, "live")]
