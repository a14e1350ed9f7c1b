"""The pool's blocking reproducibility check after a rebuild: every row with new evaluations and a bounded sample
of the others are embedded again; a corrupted new row fails it."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

import locus_pipeline.defs.assets.pool as pool_asset
import locus_pipeline.defs.checks as checks


@pytest.fixture()
def home(materialized, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the session's materialized LOCUS_HOME, made this process's LOCUS_HOME."""
    _, _, source = materialized
    target = tmp_path / "home"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".locks", "dagster"))
    monkeypatch.setenv("LOCUS_HOME", str(target))
    return target


def rebuild(instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    from locus_pipeline.definitions import defs

    return (
        defs()
        .resolve_job_def("pool_job")
        .execute_in_process(instance=instance, asset_selection=[dg.AssetKey("model_embeddings")], raise_on_error=False)
    )


def check_of(result: dg.ExecuteInProcessResult):
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "pool_embeddings_reproducible"]
    return check


def test_a_rebuild_checks_its_new_rows_and_a_bounded_sample_and_catches_a_corrupted_new_row(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    pool = pd.read_parquet(pool_file)
    new, other = str(pool["model"].iloc[3]), str(pool["model"].iloc[5])
    pool[pool["model"] != new].to_parquet(pool_file, index=False)  # `new` was not in the pool before this rebuild
    monkeypatch.setattr(checks, "REPRODUCED_SAMPLE", 3)  # the tiny pool (24 rows) is smaller than the default sample
    with dg.instance_for_test() as instance:
        passed = rebuild(instance)
        meta = check_of(passed).metadata
        assert passed.success and check_of(passed).passed
        assert meta["models_checked"].value == 1 + 3 and meta["pool_rows"].value == len(
            pool
        )  # 4 of 24 rows re-embedded
        assert meta["share_of_rebuild"].value == pytest.approx(4 / len(pool), abs=1e-4)
        assert meta["scope"].value.startswith("rebuild: 1 of 1 rows with new evaluations, 3 sampled of the other 23")
        (event,) = [e.step_materialization_data.materialization for e in passed.get_asset_materialization_events()]
        assert (
            event.metadata[pool_asset.NEW_EVALUATIONS].value == [new]
            and event.metadata["rows_with_new_evaluations"].value == 1
        )

        pool[pool["model"] != new].to_parquet(pool_file, index=False)
        original = pool_asset.rebuild_change

        def corrupting(home_, changed):  # the rebuild writes a wrong embedding for one row; the check re-embeds right
            change = original(home_, changed)

            def corrupted(current):
                out = change(current)
                for name in (new, other):
                    i = out.index[out["model"] == name][0]
                    out.at[i, "embedding"] = out.at[i, "embedding"] + np.float32(1e-3)
                return out

            return corrupted

        monkeypatch.setattr(pool_asset, "rebuild_change", corrupting)
        failed = rebuild(instance)
    check = check_of(failed)
    assert not check.passed and check.metadata["differing_models"].value.split(", ")[0] == new
    assert check.metadata["models_differing"].value >= 1  # `other` only when the seeded sample drew it
