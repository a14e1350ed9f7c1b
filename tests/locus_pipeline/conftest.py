"""Shared fixtures: the whole graph materialized once on a tiny synthetic pool in a temporary LOCUS_HOME."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import dagster as dg
import pytest

from tests.locus_pipeline.tiny import TINY_RUN_CONFIG


@pytest.fixture(scope="session")
def locus_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary LOCUS_HOME for the whole test session (the pipeline reads $LOCUS_HOME)."""
    home = tmp_path_factory.mktemp("locus_home")
    old = os.environ.get("LOCUS_HOME")
    os.environ["LOCUS_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("LOCUS_HOME", None)
    else:
        os.environ["LOCUS_HOME"] = old


@pytest.fixture(scope="session")
def materialized(locus_home: Path) -> Iterator[tuple[dg.DagsterInstance, dg.ExecuteInJobResult, Path]]:
    """locus_job run once in pytest (instance_for_test) on the tiny pool: (instance, result, LOCUS_HOME)."""
    from locus_pipeline.definitions import defs

    with dg.instance_for_test() as instance:
        job = defs().resolve_job_def("locus_job")
        result = job.execute_in_process(instance=instance, run_config=TINY_RUN_CONFIG, raise_on_error=True)
        yield instance, result, locus_home
