"""An onboarded model's estimates in its partition's metadata (defs/assets/newcomer.py): a copy of a pool model is
recognised by its answers, its estimates reach MLflow and the atlas, and the models of one run share one fit of the
pool's low-rank prior."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from locus_pipeline.storage import LocusHome
from tests.locus_pipeline.drops import (
    COLUMNS,
    defs,
    drop_file,
    materializations,
    new_model_rows,
    number,
    requests_of,
    run_onboarding,
    text,
)
from tests.locus_pipeline.drops import (
    onboarding_tick as tick,
)


def test_a_copy_of_a_pool_model_is_recognised_by_its_answers_with_estimates_per_benchmark(
    home: Path, monkeypatch
) -> None:
    """... and its estimates are in its MLflow run and in the atlas's panel for it; the links go to the UIs the home
    is configured for (make dev on ports 3300 / 5300, this process started elsewhere: no port in its environment)."""
    import json

    import mlflow

    from locus_pipeline.defs.resources import MlflowTracking, resources_for

    for name in ("MLFLOW_PORT", "DAGSTER_PORT", "LOCUS_MLFLOW_URL", "LOCUS_DAGSTER_URL", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    LocusHome(root=str(home)).write_ui_config(dagster_url="http://127.0.0.1:3300", mlflow_url="http://127.0.0.1:5300")
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    source = str(table["model"].iloc[0])
    rows = table[table["model"] == source].sample(64, random_state=0).assign(model="copy/of-a-pool-model")[COLUMNS]
    drop_file(home, "copy.csv", rows)
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))
        result = run_onboarding(instance, request)
        assert result.success
        (view,) = materializations(result, "onboarded_model_embedding")
    assert view.metadata["answers_like_most"].value == source  # it answers as its source did on every shared question
    like = text(view.metadata["answers_like"])
    assert like.splitlines()[2].startswith(f"| {source}") and "100.0% of 64" in like
    capability = text(view.metadata["capability_estimates"])
    benchmarks = table["benchmark"].unique()
    assert all(b in capability for b in benchmarks) and "90% interval" in capability
    widest = number(view.metadata["widest_interval"])
    assert 0.0 < widest < 1.0
    storage = LocusHome(root=str(home))
    stored = storage.capability_estimates()
    assert set(stored["model"]) == {"copy/of-a-pool-model"} and set(stored["benchmark"]) == set(benchmarks)
    mlflow_run = text(view.metadata["mlflow_run"])
    assert mlflow_run.startswith("http://127.0.0.1:5300/#/experiments/")
    assert text(view.metadata["atlas"]).startswith("http://127.0.0.1:5300/#/experiments/")
    run_id = mlflow_run.split("/runs/")[1].split("?")[0]
    logged = mlflow.MlflowClient(MlflowTracking(home=storage).uri).get_run(run_id).data
    assert logged.tags["dagster.run_url"] == f"http://127.0.0.1:3300/runs/{result.run_id}"
    first = stored.iloc[0]
    assert [logged.metrics[f"capability/{first['benchmark']}/{k}"] for k in ("estimate", "lo", "hi")] == pytest.approx(
        [first["estimate"], first["lo"], first["hi"]]
    )
    assert logged.tags["answers_like_most"] == source and logged.metrics["widest_interval"] == pytest.approx(
        widest, abs=1e-3
    )
    assert dg.materialize(
        list(defs().assets), selection=dg.AssetSelection.assets("model_atlas"), resources=resources_for(storage)
    ).success
    page = (home / "reports" / "atlas.html").read_text(encoding="utf-8")
    data = json.loads(page.split('<script id="atlas-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    shown = data["estimates"][data["names"].index("copy/of-a-pool-model")]
    assert [r[0] for r in shown] == stored["benchmark"].tolist() and shown[0][1:] == [
        round(float(first[k]), 4) for k in ("estimate", "lo", "hi")
    ] + ["estimate"]
    assert data["estimates"][data["names"].index(source)] is None  # a trained model: its observed accuracy instead


def test_the_newcomers_of_one_run_share_one_estimator_and_get_its_estimates(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training source's estimator is fitted once for the run's three newcomers (its 1 + 10 LowRank fits, not
    three times that), and each newcomer's estimates are the frame an estimator fitted afresh on the source gives."""
    import locus_pipeline.newcomers as newcomers
    from locus_model.estimates import LowRank

    real_fit, fits = vars(LowRank)["fit"].__func__, []  # the classmethod's function
    real_estimates, calls = newcomers.newcomer_estimates, []

    def counted(cls, *args, **kwargs):
        fits.append(1)
        return real_fit(cls, *args, **kwargs)

    def recorded(store, store_encodings, source, pool, **kwargs):
        calls.append((store, store_encodings, source, real_estimates(store, store_encodings, source, pool, **kwargs)))
        return calls[-1][-1]

    monkeypatch.setattr(LowRank, "fit", classmethod(counted))
    monkeypatch.setattr(newcomers, "newcomer_estimates", recorded)
    names = [f"batch/prior {i}" for i in range(3)]
    drop_file(home, "three.csv", pd.concat([new_model_rows(home, name, 24 + 8 * i) for i, name in enumerate(names)]))
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))
        assert run_onboarding(instance, request).success
    assert sorted(str(store["model"].iloc[0]) for store, *_ in calls) == names
    assert len(fits) == 11 and len({id(source) for *_, source, _ in calls}) == 1  # one source, one estimator
    monkeypatch.setattr(LowRank, "fit", classmethod(real_fit))
    for store, store_encodings, source, estimates in calls:
        afresh = newcomers.NewcomerSource(source.table, source.encodings)
        _, capability = afresh.estimate(store, store_encodings)
        pd.testing.assert_frame_equal(estimates.capability, capability.frame(0))
