"""The README is read in ten minutes and every relative link of it and of docs/ leads to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_at_most_150_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move detail into docs/ and link it"


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
