"""The tests mirror the packages and share helpers through conftest.py or helper modules, never through another
test module (importing a test module runs its tests' imports and fixtures twice, under two names)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def other_test_modules(source: str, own: str) -> list[str]:
    """The test modules other than ``own`` that ``source`` imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        modules = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.module
            else []
        )
        found += [m for m in modules if m.startswith("tests.") and m.split(".")[-1].startswith("test_") and m != own]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        own = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)
        if found := other_test_modules(path.read_text(encoding="utf-8"), own):
            offenders[str(path.relative_to(TESTS))] = found
    assert not offenders, (
        f"tests importing other test modules (move the helpers to a helpers module or conftest): {offenders}"
    )


def test_the_finder_tells_a_test_module_from_a_helper_and_from_itself() -> None:
    source = (
        "from tests.locus_pipeline.defs.test_sensors import drop\nfrom tests.locus_pipeline.drops import drop\n"
        "import tests.locus_model.test_cli\nfrom tests.locus_model.test_x import y\n"
    )
    assert other_test_modules(source, "tests.locus_model.test_x") == [
        "tests.locus_pipeline.defs.test_sensors",
        "tests.locus_model.test_cli",
    ]
