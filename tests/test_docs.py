"""Every relative link of the README and of docs/ leads to a file that exists; docs/architecture.md has a row for
every module of the two packages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    targets = [
        t for t in LINK.findall(page.read_text(encoding="utf-8")) if "://" not in t and not t.startswith("mailto:")
    ]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_link_finder_finds_links() -> None:
    assert LINK.findall("see [a](docs/a.md#x) and [b](https://x.org) and [c](b.md)") == [
        "docs/a.md",
        "https://x.org",
        "b.md",
    ]


COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def test_experiments_keeps_one_short_line_per_experiment_and_no_commit() -> None:
    lines = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8").splitlines()
    long = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > 200]
    assert not long, f"docs/experiments.md: lines over 200 characters (line, length): {long[:5]}; one short line each"
    hashes = [(n, m.group()) for n, line in enumerate(lines, 1) for m in COMMIT_HASH.finditer(line)]
    assert not hashes, f"docs/experiments.md names commits {hashes[:5]}: say what was tried, not where it lived"
    assert sum(line.startswith("- 20") for line in lines) >= 200, "docs/experiments.md lost experiments"


def test_the_commit_finder_finds_commits_and_spares_words_and_numbers() -> None:
    assert COMMIT_HASH.findall("at 626f560 and 0cc1227d, not 1e-5 or 2,001 or defaced or 1234567") == [
        "626f560",
        "0cc1227d",
    ]


def test_the_diagnostics_readme_lists_every_script() -> None:
    text = (ROOT / "bench" / "diag" / "README.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "bench" / "diag").glob("*.py") if p.name != "__init__.py")
    missing = [s for s in scripts if f"`{s}`" not in text]
    assert not missing, f"bench/diag/README.md does not list {missing}: add a row (question, command) for each"


def _expand(name: str) -> list[str]:
    """`a_{x,y}.json` -> [a_x.json, a_y.json] (one brace group at a time)."""
    m = re.search(r"\{([^{}]*)\}", name)
    if not m:
        return [name]
    return [e for part in m.group(1).split(",") for e in _expand(name[: m.start()] + part + name[m.end() :])]


def test_every_result_file_the_bench_index_names_exists() -> None:
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    names = re.findall(r"`([\w{},*.-]+\.(?:json|png|log))`", text)
    assert len(names) >= 20, "bench/README.md names too few result files: each figure names its file"
    results = ROOT / "bench" / "results"
    missing = [n for name in names if not name.startswith(".") for n in _expand(name) if not list(results.glob(n))]
    assert not missing, f"bench/README.md names result files that are not in bench/results: {missing}"


def test_the_brace_expansion() -> None:
    assert _expand("a_{x,y}_b{1,2}.json") == ["a_x_b1.json", "a_x_b2.json", "a_y_b1.json", "a_y_b2.json"]


# docs/architecture.md: the code's map, one table per package under these headings
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SECTIONS = {"locus_model": "## locus_model/", "locus_pipeline": "## locus_pipeline/"}
TICKED = re.compile(r"`([^`]+)`")


def package_rows(text: str, heading: str) -> list[tuple[list[str], list[str]]]:
    """The rows of the table under ``heading``: (the first cell's backticked names, every backticked name of the
    row)."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [(TICKED.findall(row.split(" | ", 1)[0]), TICKED.findall(row)) for row in rows]


def has_row(module: str, rows: list[tuple[list[str], list[str]]], package_root: Path) -> bool:
    """Whether ``module`` (a path under its package, e.g. ``data/contract.py``) has a row: named in a first cell
    (a bare name after ``dir/x.py`` is in ``dir/``), or its folder is (``storage/``, ``defs/assets/*.py``) and the row
    names the module (``traffic``, ``traffic.py`` or ``storage/traffic``)."""
    folder, stem = module.rpartition("/")[0], Path(module).stem
    for first, ticked in rows:
        context = ""
        for item in first:
            item = item.split(" ", 1)[0]
            if "/" in item and not (package_root / item.split("/", 1)[0]).exists():
                item = context + item  # a folder below the one named before it (`harnesses/` after `data/x.py`)
            elif "/" not in item:
                item = context + item
            context = item if item.endswith("/") else item.rpartition("/")[0] + "/" if "/" in item else context
            if item == module:
                return True
            covers = item.removesuffix("*.py").rstrip("/")
            if (item.endswith("/") or item.endswith("*.py")) and covers == folder:
                names = {t.split(" ", 1)[0].rpartition("/")[2].removesuffix(".py") for t in ticked}
                if stem in names:
                    return True
    return False


MODULES = [
    (package, path.relative_to(ROOT / package).as_posix())
    for package in SECTIONS
    for path in sorted((ROOT / package).rglob("*.py"))
    if path.name != "__init__.py" and "__pycache__" not in path.parts
]


@pytest.mark.parametrize("package, module", MODULES, ids=[f"{p}/{m}" for p, m in MODULES])
def test_every_module_has_its_row_in_the_architecture(package: str, module: str) -> None:
    rows = package_rows(ARCHITECTURE.read_text(encoding="utf-8"), SECTIONS[package])
    assert has_row(module, rows, ROOT / package), (
        f"docs/architecture.md has no row for {package}/{module}. How to fix: add a row naming `{module}` to the "
        f"table under '{SECTIONS[package]}' (what it owns, what it imports), or name `{Path(module).stem}` in the "
        f"row of its folder `{module.rpartition('/')[0] or '.'}/`."
    )


def test_the_row_finder_reads_folders_bare_names_and_package_rows(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    rows = package_rows(
        "## locus_model/: x\n| module | owns |\n|---|---|\n"
        "| `data/a.py`, `b.py`, `harnesses/` (`lm_eval`) | x |\n| `stats/` | `bootstrap`, `stats/metrics` |\n"
        "| `threads.py` | x |\n\n## locus_pipeline/: y\n| `c.py` | y |\n",
        "## locus_model/",
    )
    found = {
        m
        for m in (
            "data/a.py",
            "data/b.py",
            "data/harnesses/lm_eval.py",
            "stats/bootstrap.py",
            "stats/metrics.py",
            "threads.py",
        )
        if has_row(m, rows, tmp_path)
    }
    assert found == {
        "data/a.py",
        "data/b.py",
        "data/harnesses/lm_eval.py",
        "stats/bootstrap.py",
        "stats/metrics.py",
        "threads.py",
    }
    assert not has_row("data/harnesses/helm.py", rows, tmp_path)  # its folder's row does not name it
    assert not has_row("stats/logistic.py", rows, tmp_path)
    assert not has_row("c.py", rows, tmp_path)  # another package's section
    assert not has_row("b.py", rows, tmp_path)  # b.py is data/'s
