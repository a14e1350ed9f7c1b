"""The pipeline imports at the top; an import inside a function says why (`# why:`): it keeps torch, mlflow or
the gateway out of the code location's load, or keeps `locus --help` fast (tests/local_imports.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.local_imports import WHY, unexplained_local_imports

PIPELINE = Path(__file__).resolve().parents[2] / "locus_pipeline"
MODULES = sorted(PIPELINE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PIPELINE)))
def test_a_pipeline_function_local_import_says_why(path: Path) -> None:
    unexplained = unexplained_local_imports(path.read_text(encoding="utf-8"))
    assert not unexplained, (f"locus_pipeline/{path.relative_to(PIPELINE)}: function-local imports without a reason at "
                             f"lines {unexplained}: import at the top, or say why (`{WHY} ...`: torch out of the code "
                             f"location's load, mlflow, CLI start-up)")


def test_the_check_finds_an_import_without_a_reason() -> None:
    source = ("import os\n\n\ndef f():\n    import json\n\n    from locus_pipeline.storage import LocusHome\n"
              "def g():\n    # why: torch stays out of the code location's load\n    import torch\n\n"
              "    from locus_model.pool import pool_matrix\n"
              "def h():\n    x = 1\n    import numpy  # why: on its line\n"
              "async def k():\n    # a comment that is no reason\n    import httpx\n")
    assert unexplained_local_imports(source) == [5, 7, 18]
