"""Evaluation files written for the data tests, and the error reading one gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from locus_model.data.errors import EvaluationDataError
from locus_model.data.long_format import read_evaluations


def write(tmp_path: Path, text: str | bytes, name: str = "evals.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def error_of(path: Path) -> EvaluationDataError:
    with pytest.raises(EvaluationDataError) as info:
        read_evaluations(path)
    return info.value
