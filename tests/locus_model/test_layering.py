"""The library knows nothing of the pipeline: no import of Dagster, MLflow or locus_pipeline, no name of the
pipeline's storage layout."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[2] / "locus_model"
MODULES = sorted(LIBRARY.rglob("*.py"))
FORBIDDEN_IMPORTS = ("dagster", "mlflow", "locus_pipeline")
PIPELINE_WORDS = re.compile(r"warehouse|materiali[sz]|LOCUS_HOME|dagster", re.IGNORECASE)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIBRARY)))
def test_a_library_module_imports_no_pipeline_and_names_no_storage(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"
    hits = [line for line in source.splitlines() if PIPELINE_WORDS.search(line)]
    assert not hits, f"{path.name} names the pipeline's storage: {hits[:3]}"
