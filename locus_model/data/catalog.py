"""The model catalog: one row per model with its safe key, parameter count and family, from the models file
(``model, params_b, family``) and, where it says nothing, the model's name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from locus_model.data.contract import safe_model_key
from locus_model.data.long_format import read_models_file

# "<a>x<b>b" (mixture of experts, e.g. 8x7b) or "<n>b"/"<n>m", as its own token of the name: preceded by the
# start or a separator and followed by the end or a separator, so "v2" / "gpt2" / "e5" are not read as sizes.
_SIZE = re.compile(r"(?<![a-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")


def parse_params_b(name: str) -> float:
    """Parameter count in billions read from a model name; NaN when the name states none.

    "Llama-2-7b-chat" -> 7, "Qwen1.5-1.8B" -> 1.8, "SOLAR-10.7B" -> 10.7, "opt-125m" -> 0.125,
    "Mixtral-8x7B" -> 56 (experts x size: the naive total, the real model shares attention and has 46.7B),
    "gpt2-xl" -> NaN. The first size token in the name wins (case-insensitive; the basename after the last '/').
    """
    base = str(name).rsplit("/", 1)[-1].lower()
    m = _SIZE.search(base)
    if m is None:
        return float("nan")
    experts = float(m.group(1)) if m.group(1) else 1.0
    size = float(m.group(2)) * (1e-3 if m.group(3) == "m" else 1.0)
    return experts * size


def params_for_models(names: Sequence[str], models: pd.DataFrame | None = None) -> np.ndarray:
    """(M,) parameter counts in billions: the models table's `params_b` where known, else parse_params_b(name)."""
    known: dict[str, float] = {}
    if models is not None:
        if not {"model", "params_b"} <= set(models.columns):
            raise ValueError(
                f"params_for_models: models table has columns {list(models.columns)}, needs "
                "'model' and 'params_b'. How to fix: pass the validated models table."
            )
        known = {str(m): float(p) for m, p in zip(models["model"], models["params_b"]) if pd.notna(p)}
    return np.array([known.get(str(n), parse_params_b(n)) for n in names], dtype=np.float64)


def build_catalog(table: pd.DataFrame, models_file: Path | None = None) -> pd.DataFrame:
    """model, model_key, params_b, family, n_evaluations. The models file wins; params_b missing there is
    parsed from the name (``parse_params_b``: "7b", "1.5B", "8x7b" ...), NaN when the name says nothing."""
    counts = table.groupby(table["model"].astype(str)).size()
    catalog = pd.DataFrame({"model": counts.index.astype(str), "n_evaluations": counts.to_numpy()})
    catalog["model_key"] = catalog["model"].map(safe_model_key)
    if models_file is not None and Path(models_file).exists():
        info = read_models_file(models_file)
        catalog = catalog.merge(info, on="model", how="left")
    for column, default in (("params_b", np.nan), ("family", "")):
        if column not in catalog:
            catalog[column] = default
    catalog["params_b"] = params_for_models(catalog["model"], catalog)
    catalog["family"] = catalog["family"].fillna("").astype(str)
    return catalog
