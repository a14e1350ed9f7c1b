"""The pool's removal of an onboarded model (LocusHome.remove_onboarded): the row leaves the pool, the store is set
aside (a rebuild does not bring the model back), a training-source model and an unknown name are refused."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from locus_model.data.contract import safe_model_key
from locus_model.onboarding import as_store
from locus_pipeline.storage import StorageError
from tests.locus_pipeline.serve.helpers import NAMES
from tests.locus_pipeline.serve_home import build_home, evaluations, onboard, queries


@pytest.fixture()
def built(tmp_path: Path) -> dict:
    built = build_home(tmp_path / "home", NAMES)
    onboard(built, "ui-walk/onboarded model")
    key = safe_model_key("ui-walk/onboarded model")
    rows = evaluations(["ui-walk/onboarded model"], queries(8), seed=1).assign(benchmark="b")
    built["home"].record_evaluations(key, as_store(rows, pd.Timestamp.now(tz="UTC"), "a-file.csv"))
    return built


def test_removing_an_onboarded_model_takes_its_row_out_and_sets_its_store_aside(built):
    home, name = built["home"], "ui-walk/onboarded model"
    before = home.read_pool()
    pool, kept = home.remove_onboarded(name)
    assert name not in set(pool["model"]) and len(pool) == len(before) - 1 == len(NAMES)
    pd.testing.assert_frame_equal(home.read_pool(), before[before["model"] != name].reset_index(drop=True))
    assert home.onboarded_keys() == []  # a rebuild embeds only the stores left: not this model
    assert kept.startswith(f"onboarded/removed/{safe_model_key(name)}.") and len(pd.read_parquet(home.path / kept)) == 8


def test_removing_an_onboarded_model_drops_its_estimates_from_what_the_atlas_reads(built):
    home, name = built["home"], "ui-walk/onboarded model"
    estimates = pd.DataFrame(
        {
            "model": [name],
            "checkpoint_id": ["c"],
            "benchmark": ["b"],
            "estimate": [0.5],
            "lo": [0.3],
            "hi": [0.7],
            "observed": [0.5],
            "n": [8],
        }
    )
    home.write_capability_estimates(safe_model_key(name), estimates)
    assert list(home.capability_estimates()["model"]) == [name]
    home.remove_onboarded(name)
    assert home.capability_estimates().empty


@pytest.mark.parametrize(
    "name, message",
    [
        ("alpha-7b", "is a model of the training source (training)"),
        ("ui-walk/onboarded modle", "nearest names: ['ui-walk/onboarded model'"),
    ],
)
def test_a_training_model_or_an_unknown_name_is_refused_and_nothing_changes(built, name, message):
    home = built["home"]
    before = home.pool_path.read_bytes()
    with pytest.raises(StorageError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        home.remove_onboarded(name)
    assert home.pool_path.read_bytes() == before and home.onboarded_keys() == [
        safe_model_key("ui-walk/onboarded model")
    ]
