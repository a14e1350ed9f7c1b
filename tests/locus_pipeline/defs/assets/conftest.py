"""The onboarding assets' tests' home: a private copy of the session's materialized home."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture()
def home(materialized, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the session's materialized LOCUS_HOME (these tests change the pool; others must not see it),
    made this process's LOCUS_HOME so that the code location's resources use it."""
    _, _, source = materialized
    target = tmp_path / "home"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".locks", "dagster"))
    monkeypatch.setenv("LOCUS_HOME", str(target))
    return target
