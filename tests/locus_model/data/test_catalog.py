"""The model catalog: the models file wins, parameter counts are parsed from names where it says nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from locus_model.data.catalog import build_catalog
from locus_model.data.contract import safe_model_key


def table() -> pd.DataFrame:
    return pd.DataFrame(
        {"model": ["org/llama-7b", "org/llama-7b", "phi-2", "mixtral-8x7b"], "query_id": ["a", "b", "a", "a"]}
    )


def test_without_a_models_file_sizes_come_from_the_names() -> None:
    catalog = build_catalog(table()).set_index("model")
    assert catalog.loc["org/llama-7b", "n_evaluations"] == 2 and catalog.loc["phi-2", "n_evaluations"] == 1
    assert catalog.loc["org/llama-7b", "params_b"] == 7.0 and catalog.loc["mixtral-8x7b", "params_b"] == 56.0
    assert np.isnan(catalog.loc["phi-2", "params_b"]) and set(catalog["family"]) == {""}
    assert catalog.loc["org/llama-7b", "model_key"] == safe_model_key("org/llama-7b")


def test_the_models_file_wins_and_fills_the_family(tmp_path: Path) -> None:
    models = tmp_path / "models.csv"
    models.write_text("model,params_b,family\norg/llama-7b,6.7,llama\nphi-2,2.7,phi\nmixtral-8x7b,,mistral\n")
    catalog = build_catalog(table(), models).set_index("model")
    assert catalog.loc["org/llama-7b", "params_b"] == 6.7 and catalog.loc["phi-2", "params_b"] == 2.7
    assert catalog.loc["mixtral-8x7b", "params_b"] == 56.0  # empty in the file: parsed from the name
    assert catalog["family"].to_dict() == {"mixtral-8x7b": "mistral", "org/llama-7b": "llama", "phi-2": "phi"}


def test_a_missing_models_file_is_ignored(tmp_path: Path) -> None:
    assert build_catalog(table(), tmp_path / "absent.csv")["params_b"].notna().sum() == 2
