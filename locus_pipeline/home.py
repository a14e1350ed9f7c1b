"""Where LOCUS_HOME is (no Dagster import: scripts/dev.sh asks this before anything else starts)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_home() -> Path:
    """``$LOCUS_HOME`` if set, else ``data/`` in the repository."""
    home = os.environ.get("LOCUS_HOME")
    return Path(home).expanduser().resolve() if home else REPO_ROOT / "data"
