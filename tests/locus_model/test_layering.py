"""The library knows nothing of the pipeline: no import of Dagster, MLflow or locus_pipeline, no name of the
pipeline's storage layout."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.local_imports import WHY, package_imports, unexplained_local_imports

LIBRARY = Path(__file__).resolve().parents[2] / "locus_model"
MODULES = sorted(LIBRARY.rglob("*.py"))
FORBIDDEN_IMPORTS = ("dagster", "mlflow", "locus_pipeline")
PIPELINE_WORDS = re.compile(r"warehouse|materiali[sz]|LOCUS_HOME|dagster", re.IGNORECASE)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIBRARY)))
def test_a_library_module_imports_no_pipeline_and_names_no_storage(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"
    hits = [line for line in source.splitlines() if PIPELINE_WORDS.search(line)]
    assert not hits, f"{path.name} names the pipeline's storage: {hits[:3]}"


def _import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same packages it imports (at the top or inside a function)."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` imports the module pkg.sub when there is one
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt] if nxt in path else path + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


@pytest.mark.parametrize("package", ["locus_model", "locus_pipeline"])
def test_no_import_cycle(package: str) -> None:
    graph = _import_graph(LIBRARY.parent / package, package)
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# The library's package order, lowest first: a module may import only packages of its own rank or below (so no
# package cycle can hide behind a function-local import). Shared statistics and figures sit below everything that
# scores, trains or routes.
ORDER = (
    ("markdown", "model_config", "modules", "neighbours", "stats", "figures", "threads"),
    ("data",),
    ("model",),
    ("infer",),
    ("query_groups",),
    ("router",),  # the trained router: training's product
    ("training",),
    ("pool_schema", "pool", "onboarding", "estimates"),
    ("routing",),  # the cost-aware route, its curves and frontiers
    ("learning",),  # the online learner on the estimates' posterior, the routing strategies on route
    ("evaluation",),
    ("analysis",),
    ("cli",),
)
RANK = {name: rank for rank, names in enumerate(ORDER) for name in names}


def _package(path: Path) -> str:
    parts = path.relative_to(LIBRARY).with_suffix("").parts
    return parts[0] if len(parts) > 1 else parts[0]


def _imports(path: Path) -> tuple[list[tuple[int, str]], list[int]]:
    """(line, imported locus_model package) of every import in the module, and the lines of its function-local
    imports that do not say why (tests/local_imports.py)."""
    source = path.read_text(encoding="utf-8")
    return package_imports(source, "locus_model"), unexplained_local_imports(source)


def test_every_library_module_has_a_rank() -> None:
    assert {_package(p) for p in MODULES} - {"__init__"} <= set(RANK), sorted(
        {_package(p) for p in MODULES} - set(RANK)
    )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIBRARY)))
def test_a_module_imports_only_packages_at_or_below_its_own(path: Path) -> None:
    own = _package(path)
    if own == "__init__":
        return
    upward = [(line, pkg) for line, pkg in _imports(path)[0] if RANK[pkg] > RANK[own]]
    assert not upward, f"{path.relative_to(LIBRARY)} ({own}) imports packages above it: {upward}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIBRARY)))
def test_a_function_local_import_says_why(path: Path) -> None:
    unexplained = _imports(path)[1]
    assert not unexplained, (
        f"{path.relative_to(LIBRARY)}: function-local imports without a reason at lines "
        f"{unexplained}: import at the top, or say why (`{WHY} ...`: a heavy optional dependency)"
    )


def test_the_order_check_finds_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from locus_model.evaluation.protocol import evaluate\n")
    assert _imports(module) == ([(2, "evaluation")], [2])
    module.write_text(
        "def f():\n    # why: heavy\n    import torch\n\n    from locus_model.model import Locus\n"
        "def g():\n    import numpy  # why: also\n"
    )
    assert _imports(module)[1] == []
