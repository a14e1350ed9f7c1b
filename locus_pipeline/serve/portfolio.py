"""A portfolio from the ``portfolios`` asset served as the candidate set (``locus serve --portfolio k-center-15``).

The asset's table has one row per portfolio: ``method`` (k_center, k_medoids, coverage_greedy), ``x`` (its size k,
or its parameter budget in billions) and ``portfolio`` (the member names, ", "-joined). A portfolio is named
``<method with dashes>-<x>``: ``k-center-15``, ``k-medoids-8``, ``coverage-greedy-140``.
"""

from __future__ import annotations

import pandas as pd

from locus_pipeline.storage import LocusHome, StorageError


def portfolio_name(method: str, x: float) -> str:
    return f"{str(method).replace('_', '-')}-{float(x):g}"


def named_portfolios(table: pd.DataFrame) -> dict[str, tuple[str, ...]]:
    """{name: member names} of every portfolio in the ``portfolios`` table."""
    return {
        portfolio_name(m, x): tuple(n for n in str(members).split(", ") if n)
        for m, x, members in zip(table["method"], table["x"], table["portfolio"])
    }


def _available(names: list[str]) -> str:
    """The names grouped by method: "k-center-1 ... k-center-50 (50)"."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(n.rsplit("-", 1)[0], []).append(n)
    return "; ".join(f"{g[0]}" if len(g) == 1 else f"{g[0]} ... {g[-1]} ({len(g)})" for g in groups.values())


def read_portfolio(home: LocusHome, name: str) -> tuple[str, ...]:
    """The members of portfolio ``name`` as the home's ``portfolios`` table has it; a StorageError naming the
    available portfolios when there is no such one, or telling to materialize the asset when there is no table."""
    if not home.table_path("portfolios").exists():
        raise StorageError(
            f"--portfolio {name}: {home.table_path('portfolios')} does not exist. How to fix: "
            "materialize the portfolios asset (make demo, or the analyses group), or serve the whole pool"
        )
    found = named_portfolios(home.read_table("portfolios", columns=["method", "x", "portfolio"]))
    if name not in found:
        raise StorageError(
            f"--portfolio {name!r} is not in the portfolios table. Available: {_available(sorted(found, key=_order))}"
        )
    return found[name]


def _order(name: str) -> tuple[str, float]:
    method, x = name.rsplit("-", 1)
    return method, float(x)


__all__ = ["portfolio_name", "named_portfolios", "read_portfolio"]
