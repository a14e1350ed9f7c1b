"""The router's tests run on a tiny untrained home (tests/locus_pipeline/serve_home.py): a random checkpoint with the
hashing encoder and a pool of five models embedded with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.locus_pipeline.serve.helpers import NAMES
from tests.locus_pipeline.serve_home import build_home


@pytest.fixture()
def built(tmp_path: Path) -> dict:
    return build_home(tmp_path / "home", NAMES)
