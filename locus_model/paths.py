"""Where the project writes: one root, ``LOCUS_HOME`` (default: ``data/`` in the repository).

Everything the project writes lives under it: the drop folder ``incoming/`` with ``accepted/`` and
``rejected/``, the ``warehouse/`` of asset outputs (Parquet), the query-encoding cache ``encodings/``,
``reports/``, and the MLflow database and artifacts under ``mlflow/``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def locus_home() -> Path:
    """The project root for outputs: ``$LOCUS_HOME`` if set, else ``<repo>/data``."""
    home = os.environ.get("LOCUS_HOME")
    return Path(home).expanduser().resolve() if home else REPO_ROOT / "data"


def home_dir(*parts: str, home: Path | None = None) -> Path:
    """A folder under LOCUS_HOME, created on first use (``home_dir("warehouse")``)."""
    path = (home or locus_home()).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
