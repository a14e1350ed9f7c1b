"""Onboarding runs in pytest, on a private copy of the tiny materialized home: sensor tick -> onboarding_job
(store -> pool materialization + its blocking check -> the model's neighbours), rebuilds racing onboardings,
reports refreshing while the pool changes, a copied home, a file of many models (estimates: test_newcomer.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from locus_model.data.contract import safe_model_key
from locus_pipeline.defs.assets.pool import onboard_change, rebuild_change
from locus_pipeline.defs.partitions import onboarded_models, run_model_keys
from locus_pipeline.intake import DropFolder
from locus_pipeline.storage import LocusHome
from tests.locus_pipeline.drops import (
    defs,
    drop_file,
    materializations,
    new_checkpoint,
    new_model_rows,
    number,
    partition,
    requests_of,
    run_onboarding,
    text,
)
from tests.locus_pipeline.drops import (
    onboarding_tick as tick,
)

# ---------------------------------------------------------------------------------------------- one onboarding run


def test_an_onboarding_run_materializes_the_pool_with_its_check_and_the_models_neighbours(home: Path) -> None:
    name = "newcomer/llama 3 ü"
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    trained_name = str(table["model"].iloc[0])
    drop_file(home, "two models.csv", pd.concat([new_model_rows(home, name), new_model_rows(home, trained_name, 5)]))
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    before = pd.read_parquet(pool_file)
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))  # one run for the file's two models
        result = run_onboarding(instance, request)
        assert result.success
        (pool_event,) = materializations(result, "model_embeddings")  # the pool, once
        meta = pool_event.metadata
        assert meta["models"].value == len(before) + 1 and meta["onboarded_models"].value == 1
        assert meta["actions"].value == {name: "new", trained_name: "kept-training"}
        (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "pool_embeddings_reproducible"]
        assert check.passed and check.metadata["models_checked"].value == 2
        assert text(check.metadata["scope"]).startswith("model key(s) ")
        views = {partition(v): v for v in materializations(result, "onboarded_model_embedding")}
        assert sorted(views) == sorted([safe_model_key(name), safe_model_key(trained_name)])  # one per model
        view = views[safe_model_key(name)]
        neighbours = pd.read_parquet(
            home / "warehouse" / "onboarded_model_embedding" / f"{safe_model_key(name)}.parquet"
        )
        assert (
            len(neighbours) == 5
            and neighbours["distance"].is_monotonic_increasing
            and name not in set(neighbours["model"])
        )
        assert neighbours["model"].iloc[0] == view.metadata["nearest_model"].value
        nearest = text(view.metadata["nearest_models"])
        assert "distance" in nearest and neighbours["model"].iloc[4] in nearest
        profile = text(view.metadata["per_benchmark_profile"])
        assert name in profile and all(b in profile for b in new_model_rows(home, name)["benchmark"].unique())
        counts = new_model_rows(home, name).groupby("benchmark").size()
        header, _, *body = [line.strip("|").split("|") for line in profile.split("\n\n")[0].splitlines()]
        assert [h.strip() for h in header] == ["benchmark", "model", "n", "#1", "#2", "#3", "#4", "#5"]  # narrow
        assert {r[0].strip(): int(r[2]) for r in body} == counts.to_dict()  # n per benchmark
        assert f"#1: {neighbours['model'].iloc[0]}" in profile
        checks = {(c.check_name, c.partition): c for c in result.get_asset_check_evaluations()}
        trust = checks["onboarded_model_trustworthy", safe_model_key(name)]  # each model its own check results
        assert trust.passed  # 128 evaluations of the pool's own queries
        precise = checks["onboarded_estimates_precise", safe_model_key(name)]
        assert precise.passed == (precise.metadata["wide_benchmarks"].value == "none")  # ~20 answers a benchmark: wide
        # the partition's warnings are every check's: "none" only when no check warns (issue 69)
        shown = text(view.metadata["warnings"])
        assert (shown == "none") == precise.passed
        if not precise.passed:
            assert "(check onboarded_estimates_precise)" in shown and "ask it more questions" in shown
        assert precise.metadata["widest_interval"].value == view.metadata["widest_interval"].value
        assert number(trust.metadata["query_overlap_ratio"]) >= 1.0 and view.metadata["routable"].value is True
        stability = number(view.metadata["nearest_model_stability"])
        assert 0.0 <= stability <= 1.0 and "bootstrap resamples" in text(view.metadata["neighbours_under_resampling"])
        assert str(before["checkpoint_id"].iloc[0]) == view.metadata["checkpoint_id"].value
        # the model of the training source: recorded, its training row kept (actions above), its own checks
        assert views[safe_model_key(trained_name)].metadata["source"].value == "training"
        assert checks["onboarded_estimates_precise", safe_model_key(trained_name)].passed
    after = pd.read_parquet(pool_file)
    assert len(after) == len(before) + 1
    row = after[after["model"] == name].iloc[0]
    assert row["source"] == "onboarded" and row["n_evaluations"] == 128
    pd.testing.assert_frame_equal(after[after["model"] != name].reset_index(drop=True), before)  # bit-identical
    assert len(pd.read_parquet(home / "onboarded" / f"{safe_model_key(trained_name)}.parquet")) == 5


def test_a_failing_run_shows_the_reason_and_leaves_the_pool(home: Path) -> None:
    drop_file(home, "solo.csv", new_model_rows(home, "solo", 4))
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))
        before = pool_file.read_bytes()
        stem = request.run_config["ops"]["onboarded_evaluations"]["config"]["accepted_file"]
        (home / "incoming" / "accepted" / f"{stem}.parts" / "solo.parquet").unlink()  # the file's rows went missing
        result = run_onboarding(instance, request)
        assert not result.success
        failure = result.get_step_failure_events()[0].step_failure_data
        assert failure.error is not None
        assert "model 'solo' has no rows in this accepted file" in failure.error.message
        assert "How to fix" in failure.error.message
        assert pool_file.read_bytes() == before


# ---------------------------------------------------------------------------------------------- no lost update


def embedding_of(storage: LocusHome, key: str, checkpoint: str) -> np.ndarray:
    from locus_model.pool import embed_models

    store = storage.read_store(key)
    encodings, _ = storage.encode(store, storage.load_checkpoint(checkpoint).encoder)
    return embed_models(
        storage.load_checkpoint(checkpoint).router, store, encodings, checkpoint=checkpoint, source="x"
    )["embedding"].iloc[0]


@pytest.mark.parametrize("order", ["rebuild first", "onboarding first", "interleaved"])
def test_an_onboarding_and_a_rebuild_end_with_every_model_from_one_checkpoint(
    home: Path, order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from locus_model.onboarding import as_store

    storage = LocusHome(root=str(home))
    key = safe_model_key("late/model")
    new_id = new_checkpoint(home)

    def record() -> None:
        storage.record_evaluations(
            key, as_store(new_model_rows(home, "late/model", 64), pd.Timestamp.now(tz="UTC"), "f")
        )

    def onboard() -> None:
        storage.update_pool(onboard_change(storage, [key], {}))

    if order == "rebuild first":
        storage.update_pool(rebuild_change(storage, {}))
        record()
        onboard()
    elif order == "onboarding first":
        record()
        onboard()
        storage.update_pool(rebuild_change(storage, {}))
    else:  # the rebuild has read the stores and is embedding when the onboarding records and asks for the pool
        reading, go_on = threading.Event(), threading.Event()
        inner = rebuild_change(storage, {})

        def slow_rebuild(current):
            out = inner(current)
            reading.set()
            go_on.wait(10)
            return out

        rebuild = threading.Thread(target=storage.update_pool, args=(slow_rebuild,))
        rebuild.start()
        assert reading.wait(60)
        record()
        asking, pool_lock = threading.Event(), LocusHome.lock

        @contextlib.contextmanager
        def lock(self, name: str, **kwargs):
            if name == "pool" and threading.current_thread() is onboarding:
                asking.set()
            with pool_lock(self, name, **kwargs) as held:
                yield held

        monkeypatch.setattr(LocusHome, "lock", lock)
        onboarding = threading.Thread(target=onboard)
        onboarding.start()
        assert asking.wait(60)  # the onboarding asks for the pool lock the rebuild holds
        assert onboarding.is_alive()  # waiting for the pool lock, not writing beside the rebuild
        go_on.set()
        rebuild.join(60)
        onboarding.join(60)
    pool = storage.read_pool()
    assert set(pool["checkpoint_id"]) == {new_id}
    assert "late/model" in set(pool["model"]) and pool["model"].is_unique
    row = pool.set_index("model").loc["late/model"]
    assert row["n_evaluations"] == 64
    assert np.array_equal(row["embedding"], embedding_of(storage, key, new_id))


# ---------------------------------------------------------------------------------------------- reports


def test_reports_refresh_while_models_are_onboarded_and_with_a_new_benchmark(home: Path) -> None:
    analyses = defs().resolve_job_def("reports_refresh_job")
    rows = new_model_rows(home, "brand/new", 64)
    novel = pd.DataFrame(
        {
            "model": "brand/new",
            "query_id": [f"novel-{i}" for i in range(20)],
            "query": [f"a question of a benchmark the pool never saw, number {i}" for i in range(20)],
            "benchmark": "never-seen-bench",
            "score": np.arange(20) % 2 * 1.0,
        }
    )
    fast = {"ops": {"near_duplicates": {"config": {"resamples": 2}}}}
    with dg.instance_for_test() as instance:
        first = analyses.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("test_query_predictions")])
        assert first.success
        drop_file(home, "brand new.csv", pd.concat([rows, novel]))
        (request,) = requests_of(tick(instance, home))
        assert run_onboarding(instance, request).success  # the pool changed after test_query_predictions read it
        group = dg.AssetSelection.groups("analyses").resolve(defs().resolve_asset_graph())
        rest = analyses.execute_in_process(
            instance=instance,
            asset_selection=[k for k in group if k.to_user_string() != "test_query_predictions"],
            run_config=fast,
            raise_on_error=False,
        )
        assert rest.success, [e.message for e in rest.all_events if e.is_failure]
        again = analyses.execute_in_process(
            instance=instance, run_config=fast, raise_on_error=False
        )  # the refresh after onboarding
        assert again.success, [e.message for e in again.all_events if e.is_failure]
    geometry = pd.read_parquet(home / "warehouse" / "model_atlas.parquet")
    assert "brand/new" in set(geometry["model"])


# ---------------------------------------------------------------------------------------------- a copied home


def test_a_copied_home_works_with_the_original_deleted(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    from locus_pipeline.defs.resources import MlflowTracking

    copy = tmp_path / "copy"
    shutil.copytree(home, copy)
    old_run = pd.read_parquet(home / "warehouse" / "locus_checkpoint.parquet")["mlflow_run_id"].iloc[0]
    shutil.rmtree(home)
    monkeypatch.setenv("LOCUS_HOME", str(copy))
    storage = LocusHome(root=str(copy))
    pool = storage.read_pool()
    assert storage.pool_checkpoint(pool).checkpoint_id == pool["checkpoint_id"].iloc[0]
    drop_file(copy, "after the move.csv", new_model_rows(copy, "moved/model", 32))
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, copy))
        assert run_onboarding(instance, request).success
    assert "moved/model" in set(storage.read_pool()["model"])
    tracking = MlflowTracking(home=storage)
    with tracking.start_run("after-move", tags={}) as run:
        mlflow.log_metric("x", 1.0)
    assert run.info.artifact_uri.startswith((copy / "mlflow" / "artifacts").as_uri())
    client = mlflow.MlflowClient(tracking.uri)
    assert client.get_run(old_run).info.artifact_uri.startswith((copy / "mlflow" / "artifacts").as_uri())
    files = client.list_artifacts(old_run, "checkpoint")
    assert files and mlflow.artifacts.download_artifacts(
        run_id=old_run, artifact_path=files[0].path, dst_path=str(tmp_path / "dl"), tracking_uri=tracking.uri
    )
    assert not home.exists()


def test_a_run_onboards_nothing_from_a_file_that_changed_after_intake(home: Path) -> None:
    drop_file(home, "growing.csv", new_model_rows(home, "grower", 8))
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))
        before = pool_file.read_bytes()
        stem = request.run_config["ops"]["onboarded_evaluations"]["config"]["accepted_file"]
        with open(home / "incoming" / "accepted" / stem, "a", encoding="utf-8") as writer:  # the writer goes on
            writer.write(new_model_rows(home, "grower", 12).tail(4).to_csv(index=False, header=False))
        result = run_onboarding(instance, request)
    assert not result.success
    error = result.get_step_failure_events()[0].step_failure_data.error
    assert error is not None
    message = error.message
    assert "growing.csv changed after it was taken in" in message and "Nothing was onboarded" in message
    assert pool_file.read_bytes() == before and not (home / "onboarded" / "grower.parquet").exists()


def test_corrupt_files_beside_good_ones_onboard_only_the_good_models(home: Path) -> None:
    """The drop folder end to end: cut, corrupt, fake-gzip and NUL-bearing copies of a good file dropped with two
    good files; every requested run succeeds, only the two good models join the pool, every other row stays bit for
    bit, and every bad file sits in rejected/ with its reason."""
    import gzip

    good = new_model_rows(home, "bad-copy", 40).to_csv(index=False).encode()
    packed = gzip.compress(good)
    bad = {
        "cut.csv.gz": packed[: len(packed) // 2],
        "flipped.csv.gz": packed[:20] + bytes([packed[20] ^ 0xFF]) + packed[21:],
        "not-gzip.csv.gz": good,
        "nul.csv": good.replace(b"bad-copy", b"bad\0copy", 3),
        "cut-row.csv": good[: len(good) - 7],
    }
    incoming = DropFolder.at(home).ensure().incoming
    for name, data in bad.items():
        (incoming / name).write_bytes(data)
        os.utime(incoming / name, (time.time() - 3600, time.time() - 3600))
    drop_file(home, "good-one.csv", new_model_rows(home, "good/one", 64))
    drop_file(home, "good-two.csv", new_model_rows(home, "good/two", 32))
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    before = pd.read_parquet(pool_file)
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))  # the two small good files of the tick share one run
        assert sorted(run_model_keys(instance, request.tags) or []) == sorted(
            safe_model_key(m) for m in ("good/one", "good/two")
        )
        assert len(request.run_config["ops"]["onboarded_evaluations"]["config"]["accepted_files"]) == 2
        result = run_onboarding(instance, request)
        assert result.success
        views = {v.partition: v for v in materializations(result, "onboarded_evaluations")}
        assert {k: v.metadata["new_evaluations_in_file"].value for k, v in views.items()} == {
            safe_model_key("good/one"): 64,
            safe_model_key("good/two"): 32,
        }  # each model from its own file
    after = pd.read_parquet(pool_file)
    assert sorted(set(after["model"]) - set(before["model"])) == ["good/one", "good/two"]
    pd.testing.assert_frame_equal(after[after["model"].isin(before["model"])].reset_index(drop=True), before)
    rejected = home / "incoming" / "rejected"
    for name in bad:
        (kept,) = [p for p in rejected.iterdir() if p.name.endswith(f"-{name}")]
        assert kept.read_bytes() == bad[name] and (rejected / f"{kept.name}.reason.txt").read_text().startswith(
            "REJECTED: "
        )
    assert not [p for p in (home / "incoming").iterdir() if p.is_file()]


def test_a_model_in_two_small_files_of_one_tick_gets_both_the_newer_winning(home: Path) -> None:
    """The tick's small files share one run; a model both hold records the older file's rows, then the newer's."""
    first = new_model_rows(home, "twice/m", 40)
    second = first.assign(score=1.0 - first["score"]).iloc[:20]  # the newer file changes 20 of its scores
    drop_file(home, "twice-1.csv", first)
    time.sleep(0.01)
    drop_file(home, "twice-2.csv", second)
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))
        assert len(request.run_config["ops"]["onboarded_evaluations"]["config"]["accepted_files"]) == 2
        assert run_onboarding(instance, request).success
    store = pd.read_parquet(home / "onboarded" / f"{safe_model_key('twice/m')}.parquet").set_index("query_id")
    assert len(store) == 40
    expected = first.set_index("query_id")["score"].copy()
    expected.loc[second["query_id"]] = second["score"].to_numpy()
    pd.testing.assert_series_equal(store["score"].sort_index(), expected.sort_index(), check_names=False)


# ---------------------------------------------------------------------------------------------- removal


def test_locus_pool_remove_is_a_pool_materialization_and_a_rebuild_does_not_bring_the_model_back(
    home, monkeypatch, capsys
):
    from locus_pipeline.cli import main
    from locus_pipeline.home_cli import remove_from_pool

    name = "ui-walk/onboarded model"
    drop_file(home, "walk.csv", new_model_rows(home, name))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))
        assert run_onboarding(instance, request).success
        refused = remove_from_pool(
            str(pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")["model"].iloc[0]), instance
        )
        assert not refused.success
        assert "training source" in refused.get_step_failure_events()[0].step_failure_data.error.message
    before = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    from locus_pipeline.instance import prepare_dagster_home

    with dg.DagsterInstance.from_config(str(prepare_dagster_home(home))) as instance:  # as the sensor left it there
        instance.add_dynamic_partitions(onboarded_models.name, [safe_model_key(name), "another"])
    assert main(["pool", "remove", name, "--home", str(home)]) == 0  # the home's own Dagster instance
    printed = capsys.readouterr().out
    assert f"removed {name!r} from the pool" in printed and "incoming/accepted/" in printed
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        (record,) = instance.fetch_materializations(dg.AssetKey("model_embeddings"), limit=1).records
        meta = record.asset_materialization.metadata
        assert meta["action"].value == "removed" and meta["model"].value == name
        assert meta["models"].value == len(before) - 1
        assert instance.get_dynamic_partitions(onboarded_models.name) == ["another"]  # the UI shows it no more
    after = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    pd.testing.assert_frame_equal(after, before[before["model"] != name].reset_index(drop=True))
    assert list((home / "incoming" / "accepted").glob("*walk.csv"))  # the evaluations as dropped stay
    assert len(list((home / "onboarded" / "removed").glob(f"{safe_model_key(name)}.*.parquet"))) == 1
    storage = LocusHome(root=str(home))
    assert name not in set(storage.update_pool(rebuild_change(storage, {}))["model"])


def test_locus_pool_remove_exits_0_after_the_removal_is_written_and_warns_of_a_failed_check(home, monkeypatch, capsys):
    """A blocking check failing on the new pool (here every re-embedded row made to differ) is a warning line on
    stderr, not a failure of the command: the removal was written. Float noise between processes passes the check."""
    import locus_pipeline.pool_rows as pool_rows
    from locus_pipeline.cli import main

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    names = ["walk/noise", "walk/changed"]
    drop_file(home, "walk2.csv", pd.concat([new_model_rows(home, n) for n in names]))
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))
        assert run_onboarding(instance, request).success
    original = pool_rows.embed_again

    def shifted(by):
        def embed_again(*args, **kwargs):
            again, pending = original(*args, **kwargs)
            again = again.copy()
            again["embedding"] = [np.asarray(e, np.float32) + np.float32(by) for e in again["embedding"]]
            return again, pending

        return embed_again

    monkeypatch.setattr(pool_rows, "embed_again", shifted(3.6e-7))  # another process's rounding
    assert main(["pool", "remove", names[0], "--home", str(home)]) == 0
    out, err = capsys.readouterr()
    assert f"removed {names[0]!r}" in out and "warning" not in err
    monkeypatch.setattr(pool_rows, "embed_again", shifted(1e-2))  # a real change: the check fails
    assert main(["pool", "remove", names[1], "--home", str(home)]) == 0
    out, err = capsys.readouterr()
    assert f"removed {names[1]!r}" in out
    warned = [line for line in err.splitlines() if "pool_embeddings_reproducible" in line]
    assert len(warned) == 1, err
    warning = warned[0]
    assert (
        warning.startswith("locus pool remove: warning: check pool_embeddings_reproducible failed")
        and "Traceback" not in err
    )
    assert "e-02" in warning  # the max_abs_diff beside the tolerance
    assert names[1] not in set(pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")["model"])
    assert main(["pool", "remove", "walk/never-there", "--home", str(home)]) == 2  # a refused removal still fails


# ---------------------------------------------------------------------------------------------- a file of many models


def test_a_file_of_40_models_is_onboarded_in_one_run_and_the_pool_holds_all_40(home: Path, monkeypatch) -> None:
    """One request for the file; its run materializes each model's two partitions with their own metadata and
    check results, and the pool once; a second tick and the same bytes dropped again request nothing."""
    import locus_pipeline.newcomers as newcomers

    real = newcomers.newcomer_estimates
    asked: list = []  # the estimates given, one per model

    def once(*args, **kwargs):  # the estimates (~2 s a model here) are the one-model tests' subject: computed once
        asked.append(asked[0] if asked else real(*args, **kwargs))
        return asked[-1]

    monkeypatch.setattr(newcomers, "newcomer_estimates", once)
    names = [f"batch/model {i:02d}" for i in range(40)]
    rows = pd.concat([new_model_rows(home, name, 16) for name in names])
    drop_file(home, "forty.csv", rows)
    before = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    keys = sorted(safe_model_key(n) for n in names)
    with dg.instance_for_test() as instance:
        first = tick(instance, home)
        assert isinstance(first, dg.SensorResult)
        (request,) = requests_of(first)
        result = run_onboarding(instance, request)
        assert result.success
        assert len(instance.get_runs()) == 1  # one run for 40 models
        (pool_event,) = materializations(result, "model_embeddings")  # the pool written once
        assert pool_event.metadata["actions"].value == {name: "new" for name in names}
        for asset in ("onboarded_evaluations", "onboarded_model_embedding"):
            events = materializations(result, asset)
            assert sorted(partition(e) for e in events) == keys  # each model its own partition's materialization
            assert {e.partition: e.metadata["model"].value for e in events} == {safe_model_key(n): n for n in names}
        evaluations = {e.partition: e for e in materializations(result, "onboarded_evaluations")}
        assert {e.metadata["new_evaluations_in_file"].value for e in evaluations.values()} == {16}
        checks = [(c.check_name, c.partition) for c in result.get_asset_check_evaluations() if c.partition]
        assert sorted(checks) == sorted(
            (name, key) for key in keys for name in ("onboarded_estimates_precise", "onboarded_model_trustworthy")
        )
        assert instance.get_materialized_partitions(dg.AssetKey("onboarded_model_embedding")) == set(keys)
        assert len(asked) == 40  # each model's estimates asked for
        assert not requests_of(tick(instance, home, cursor=first.cursor))
        drop_file(home, "forty again.csv", rows)  # the same bytes under another name
        assert not requests_of(tick(instance, home, cursor=first.cursor))
    after = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    assert set(after["model"]) == set(before["model"]) | set(names) and len(after) == len(before) + 40
    assert (after[after["model"].isin(names)]["n_evaluations"] == 16).all()


def test_one_bad_model_of_a_file_does_not_keep_the_others_out(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose embedding fails is left out of the pool and named (the pool's metadata, the run's failure);
    the file's other models are onboarded with their materializations; the bad one gets none."""
    import locus_pipeline.pool_rows as pool_rows

    real = pool_rows.onboarded_rows

    def failing(home_, checkpoint, stores, training):
        if any(str(s["model"].iloc[0]) == "batch/bad" for s in stores):
            raise ValueError("an embedding that cannot be made")
        return real(home_, checkpoint, stores, training)

    monkeypatch.setattr(pool_rows, "onboarded_rows", failing)
    names = ["batch/good one", "batch/bad", "batch/good two"]
    drop_file(home, "three.csv", pd.concat([new_model_rows(home, name, 16) for name in names]))
    with dg.instance_for_test() as instance:
        (request,) = requests_of(tick(instance, home))
        result = run_onboarding(instance, request)
    assert not result.success
    (pool_event,) = materializations(result, "model_embeddings")
    bad = safe_model_key("batch/bad")
    failed = pool_event.metadata["failed_models"].value
    assert isinstance(failed, dict) and list(failed) == [bad]
    assert "an embedding that cannot be made" in failed[bad]
    shown = sorted(partition(e) for e in materializations(result, "onboarded_model_embedding"))
    assert shown == sorted(safe_model_key(n) for n in ("batch/good one", "batch/good two"))
    (failure,) = result.get_step_failure_events()
    error, user = failure.step_failure_data.error, failure.step_failure_data.user_failure_data
    assert error is not None and user is not None
    assert failure.step_key == "onboarded_model_embedding" and "1 of 3 model(s)" in error.message
    named = user.metadata["failed_models"].value
    assert isinstance(named, dict) and bad in named
    pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    assert {"batch/good one", "batch/good two"} <= set(pool["model"]) and "batch/bad" not in set(pool["model"])
