"""The model catalog: one row per model with its safe key, parameter count and family."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from locus_model.evaluations import read_models_file, safe_model_key


def build_catalog(table: pd.DataFrame, models_file: Path | None = None) -> pd.DataFrame:
    """model, model_key, params_b, family, n_evaluations. The models file wins; params_b missing there is
    parsed from the name (``parse_params_b``: "7b", "1.5B", "8x7b" ...), NaN when the name says nothing."""
    from locus_model.analysis import parse_params_b

    counts = table.groupby(table["model"].astype(str)).size()
    catalog = pd.DataFrame({"model": counts.index.astype(str), "n_evaluations": counts.to_numpy()})
    catalog["model_key"] = catalog["model"].map(safe_model_key)
    if models_file is not None and Path(models_file).exists():
        info = read_models_file(models_file)
        catalog = catalog.merge(info, on="model", how="left")
    for column, default in (("params_b", np.nan), ("family", "")):
        if column not in catalog:
            catalog[column] = default
    parsed = catalog["model"].map(parse_params_b)
    catalog["params_b"] = catalog["params_b"].astype(float).fillna(parsed)
    catalog["family"] = catalog["family"].fillna("").astype(str)
    return catalog
