"""Where LOCUS_HOME is (no Dagster import: scripts/dev.sh asks this before anything else starts)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_home_location() -> str:
    """``$LOCUS_HOME`` as given (a folder, or a URL such as ``s3://bucket/prefix``), else ``data/`` in the
    repository."""
    return os.environ.get("LOCUS_HOME") or str(REPO_ROOT / "data")


def default_home() -> Path:
    """The local home folder: ``$LOCUS_HOME`` if set, else ``data/`` in the repository. A URL home has no local
    folder: the Dagster instance and MLflow then live elsewhere (DAGSTER_HOME, LOCUS_MLFLOW_URL; docs/deploy.md)."""
    home = default_home_location()
    if "://" in home and not home.startswith("file://"):
        raise ValueError(
            f"LOCUS_HOME={home} is a URL, which has no local folder for the Dagster instance. How to "
            "fix: set DAGSTER_HOME to a folder holding a dagster.yaml (docs/deploy.md has a Postgres "
            "profile) and LOCUS_MLFLOW_URL to an MLflow server"
        )
    return Path(home.removeprefix("file://")).expanduser().resolve()
