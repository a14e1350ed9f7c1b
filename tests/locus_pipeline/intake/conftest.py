from __future__ import annotations

from pathlib import Path

import pytest

from locus_pipeline.intake import DropFolder


@pytest.fixture()
def folder(tmp_path: Path) -> DropFolder:
    return DropFolder.at(tmp_path).ensure()
