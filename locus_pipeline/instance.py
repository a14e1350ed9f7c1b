"""The Dagster instance of a LOCUS_HOME: DAGSTER_HOME=$LOCUS_HOME/dagster with the repository's dagster.yaml."""

from __future__ import annotations

import shutil
from pathlib import Path

from locus_pipeline.home import REPO_ROOT, default_home


def prepare_dagster_home(home: Path | None = None) -> Path:
    """Create ``<home>/dagster`` holding a link to the repository's dagster.yaml and return it (the caller sets
    DAGSTER_HOME to it for the processes that need it)."""
    dagster_home = (home or default_home()) / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    target = dagster_home / "dagster.yaml"
    source = REPO_ROOT / "dagster.yaml"
    if target.is_symlink() or not target.exists():
        target.unlink(missing_ok=True)
        try:
            target.symlink_to(source)
        except OSError:  # filesystems without symlinks
            shutil.copyfile(source, target)
    return dagster_home
