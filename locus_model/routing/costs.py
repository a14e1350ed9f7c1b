"""What one query costs on each model: prices, or parameter counts as a proxy, and never a made-up figure.

Costs (:func:`cost_table`): a fixed ``cost_per_query``, else prices per million input/output tokens times token
estimates, else the parameter count (billions) as a proxy when no price is known (from the models table, else
read from the name, e.g. ``acme/new-model-7b``), which the cost table says (``basis``, ``note``). A model without
a cost on that basis has an unknown cost (NaN): it is never charged a made-up cost; a cost-aware ranking leaves it
out and says so (locus_model.routing.route).

:data:`COST_KEYS` are the per-model keys every reader of costs uses (the models config of ``locus serve``, the
model catalog read by the ``cost_frontier`` asset); :func:`check_cost` is the one rule for a cost, price, size or
cap: a finite number >= 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from locus_model.data.catalog import parse_params_b
from locus_model.data.long_format import COST_KEYS
from locus_model.routing.errors import CostError

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_OUTPUT_TOKENS = 256  # answer length assumed when the request does not say (max_tokens)
CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text with BPE tokenizers
BASIS_MEANS = {
    "usd": "USD per query",
    "params_b": "billions of parameters (a proxy: no price known)",
    "none": "none (no price or size known: every cost 0)",
}


def estimate_tokens(text: str) -> int:
    """Rough token count of a text: one token per 4 characters, at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def check_cost(value: object, key: str) -> float:
    """``value`` as a float when it is a finite number >= 0 (a cost, price, parameter count or cap); else a
    CostError naming ``key``."""
    if (
        not isinstance(value, (int, float, np.integer, np.floating))
        or isinstance(value, (bool, np.bool_))
        or not math.isfinite(value)
        or value < 0
    ):
        raise CostError(f"{key}={value!r} must be a number >= 0")
    return float(value)


@dataclass(frozen=True)
class CostTable:
    """Per-model cost of one query. ``basis`` is "usd" (prices or cost per query), "params_b" (parameter count as
    a proxy: no price known) or "none" (nothing known: every cost 0, routing by P(correct) only)."""

    names: tuple[str, ...]
    cost_per_query: np.ndarray  # (M,) fixed cost per query, NaN where priced by tokens
    price_input: np.ndarray  # (M,) per million input tokens (0 where cost_per_query is used)
    price_output: np.ndarray  # (M,) per million output tokens
    basis: str
    unknown: tuple[str, ...] = ()  # models without a cost on the basis: their cost is NaN (unknown)
    note: str = ""
    parsed: tuple[str, ...] = ()  # models whose size was read from their name
    params_b: np.ndarray | None = None  # (M,) parameter counts (billions) whatever the basis, NaN = unknown

    def costs(self, input_tokens: int = 0, output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> np.ndarray:  # (M,)
        """Expected cost of one query with these token counts, per model."""
        by_tokens = (self.price_input * input_tokens + self.price_output * output_tokens) / 1e6
        return np.where(np.isnan(self.cost_per_query), by_tokens, self.cost_per_query)

    def subset(self, names: Sequence[str]) -> "CostTable":
        idx = [self.names.index(n) for n in names]
        kept = set(names)
        return CostTable(
            tuple(names),
            self.cost_per_query[idx],
            self.price_input[idx],
            self.price_output[idx],
            self.basis,
            tuple(n for n in self.unknown if n in kept),
            self.note,
            tuple(n for n in self.parsed if n in kept),
            None if self.params_b is None else self.params_b[idx],
        )

    @property
    def known(self) -> np.ndarray:  # (M,) bool: the model has a cost on the basis
        return ~np.isin(np.array(self.names, dtype=object), np.array(self.unknown, dtype=object))

    @property
    def basis_means(self) -> str:
        """What the costs are, in words (the unit, or that they are a proxy)."""
        return BASIS_MEANS[self.basis]


def _number(value: Any) -> float:  # a table cell: anything
    """A table's value as a float; NaN where it is missing or not a number (unknown)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out if math.isfinite(out) else float("nan")


def _listed(names: Sequence[str]) -> str:
    return f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"


def cost_info(
    models: pd.DataFrame | None = None, overrides: Mapping[str, Mapping[str, object]] | None = None
) -> dict[str, dict]:
    """Per-model cost info for :func:`cost_table`: the :data:`COST_KEYS` columns a models table has (``model`` +
    any of them, e.g. the model catalog), then ``overrides`` (e.g. ``locus serve``'s models config) on top."""
    info: dict[str, dict] = {}
    if models is not None and len(models):
        columns = [k for k in COST_KEYS if k in models.columns]
        for row in models[["model", *columns]].itertuples(index=False):
            info[str(row[0])] = dict(zip(columns, row[1:]))
    for name, values in (overrides or {}).items():
        info.setdefault(str(name), {}).update(values)
    return info


def cost_table(names: Sequence[str], info: Mapping[str, Mapping[str, object]]) -> CostTable:
    """The cost table of ``names`` from per-model ``info`` (keys :data:`COST_KEYS`; any may be missing).

    A model has a dollar cost when it has ``cost_per_query`` or at least one token price (a missing one counts 0).
    The basis is dollars when any model has one, else parameter counts when any model has one (a missing
    ``params_b`` is read from the name, e.g. "acme/new-model-7b" -> 7, and listed in ``parsed``), else none.
    Models without a cost on that basis have cost NaN (unknown, never a made-up figure) and are listed in
    ``unknown``; negative costs are refused (:func:`check_cost`)."""

    names = [str(n) for n in names]
    values = {key: np.full(len(names), np.nan) for key in COST_KEYS}
    for i, name in enumerate(names):
        row = info.get(name, {}) or {}
        for key in COST_KEYS:
            x = _number(row.get(key))
            values[key][i] = x if np.isnan(x) else check_cost(x, f"model {name!r}: {key}")
    per_query, p_in, p_out, params = (values[key] for key in COST_KEYS)
    stated = ~np.isnan(params)
    params = np.where(stated, params, [parse_params_b(n) for n in names]) if len(names) else params
    parsed = [n for n, s, p in zip(names, stated, params) if not s and not np.isnan(p)]
    priced = ~np.isnan(p_in) | ~np.isnan(p_out)
    usd = ~np.isnan(per_query) | priced
    zeros = np.zeros(len(names))
    if usd.any():
        unknown = [n for n, k in zip(names, usd) if not k]
        note = "cost in USD per query (cost_per_query, or token prices x estimated tokens)"
        if unknown:
            note += (
                f"; {len(unknown)} model(s) without a price have an unknown "
                f"cost: left out of cost-aware routing ({_listed(unknown)})"
            )
        p_in, p_out = np.where(usd, np.nan_to_num(p_in), np.nan), np.where(usd, np.nan_to_num(p_out), np.nan)
        return CostTable(tuple(names), per_query, p_in, p_out, "usd", tuple(unknown), note, tuple(parsed), params)
    if (~np.isnan(params)).any():
        unknown = [n for n, p in zip(names, params) if np.isnan(p)]
        note = "no price known: the parameter count (billions) is the cost proxy, so costs are relative, not dollars"
        if parsed:
            note += f"; the size of {len(parsed)} model(s) is read from the name ({_listed(parsed)})"
        if unknown:
            note += (
                f"; {len(unknown)} model(s) of unknown size have an unknown cost: left out of cost-aware "
                f"routing ({_listed(unknown)})"
            )
        no_price = np.where(np.isnan(params), np.nan, 0.0)  # the unknown stay NaN in costs()
        return CostTable(
            tuple(names), params, no_price, no_price, "params_b", tuple(unknown), note, tuple(parsed), params
        )
    return CostTable(
        tuple(names),
        zeros.copy(),
        zeros,
        zeros,
        "none",
        tuple(names),
        "no price and no parameter count known: every cost is 0, routing by P(correct) only",
        (),
        params,
    )


__all__ = [
    "COST_KEYS",
    "BASIS_MEANS",
    "DEFAULT_OUTPUT_TOKENS",
    "CostTable",
    "cost_info",
    "cost_table",
    "check_cost",
    "estimate_tokens",
]
