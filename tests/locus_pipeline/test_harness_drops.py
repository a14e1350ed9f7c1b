"""What evaluation harnesses write, dropped into incoming/ as it is (a folder, an archive, an Inspect log): the sensor
takes it in, one run per model, the same query ids for both models of each fixture; bad drops get clear reasons;
one lm-eval folder onboarded end to end (sensor tick -> onboarding_job -> the pool)."""

from __future__ import annotations

import os
import shutil
import tarfile
import time
import zipfile
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

import locus_pipeline.intake.accept as accept  # where intake_file looks up sha256_entry
from locus_model.data.contract import safe_model_key
from locus_pipeline.intake import DropFolder, accepted_rows, intake_file, read_manifests, scan_incoming
from tests.locus_pipeline.drops import OLD, range_of
from tests.locus_pipeline.drops import sensor_tick as tick

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harnesses"


def settled(path: Path) -> Path:
    """Give a dropped entry (and everything in it) an old modification time: written long ago, complete."""
    for item in [*sorted(path.rglob("*"), reverse=True), path] if path.is_dir() else [path]:
        os.utime(item, (OLD, OLD))
    return path


def drop_folder(home: Path, harness: str, name: str, tmp_path: Path) -> Path:
    """Write the folder elsewhere, then move it into incoming/ (one rename): the documented protocol."""
    staged = shutil.copytree(FIXTURES / harness, tmp_path / "staging" / name)
    target = DropFolder.at(home).ensure().incoming / name
    os.replace(staged, target)
    return settled(target)


def drop_archive(home: Path, harness: str, name: str) -> Path:
    target = DropFolder.at(home).ensure().incoming / name
    if name.endswith(".zip"):
        with zipfile.ZipFile(target, "w") as z:
            for p in sorted((FIXTURES / harness).rglob("*")):
                z.write(p, Path(harness) / p.relative_to(FIXTURES / harness))
    else:
        with tarfile.open(target, "w:gz") as t:
            t.add(FIXTURES / harness, arcname=harness)
    return settled(target)


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "warehouse").mkdir(parents=True)
    pd.DataFrame({"model": ["x"], "model_key": ["x"]}).to_parquet(
        tmp_path / "home" / "warehouse" / "model_embeddings.parquet"
    )
    return tmp_path / "home"


def test_every_harness_format_is_taken_in_and_the_tick_s_small_drops_share_one_run(home: Path, tmp_path: Path) -> None:
    drop_folder(home, "lm_eval", "lm-eval-out", tmp_path)  # a folder
    drop_archive(home, "lighteval", "lighteval-out.tar.gz")  # an archive
    drop_archive(home, "helm", "helm-runs.zip")
    incoming = DropFolder.at(home).incoming
    for log in sorted((FIXTURES / "inspect").iterdir()):  # Inspect's own log files: .eval (a zip) and .json
        settled(Path(shutil.copy(log, incoming / log.name)))
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
    folder = DropFolder.at(home)
    assert not list(folder.rejected.iterdir()), [p.name for p in folder.rejected.iterdir()]
    (request,) = result.run_requests  # seven files of at most 16 models: one run (sensors.SMALL_DROP_MODELS)
    (add,) = result.dynamic_partitions_requests
    keys = list(add.partition_keys)
    assert sorted(keys) == sorted(
        safe_model_key(m)
        for m in ("dummy-a", "dummy-b", "simple/model1", "simple/model2", "mockllm/model-a", "mockllm/model-b")
    )
    assert range_of(request) == (keys[0], keys[-1])  # every model once, though two files hold dummy-a and dummy-b
    assert len(request.run_config["ops"]["onboarded_evaluations"]["config"]["accepted_files"]) == 7
    manifests = {m.original_name: m for m in read_manifests(folder)}
    assert len(manifests) == 7 and (folder.accepted / manifests["lm-eval-out"].stem).is_dir()
    for original, models in (
        ("lm-eval-out", ("dummy-a", "dummy-b")),
        ("lighteval-out.tar.gz", ("dummy-a", "dummy-b")),
        ("helm-runs.zip", ("simple/model1", "simple/model2")),
    ):
        stem = manifests[original].stem
        ids = [set(accepted_rows(folder, stem, m)["query_id"]) for m in models]
        assert ids[0] == ids[1] and ids[0], original  # the same queries from both models' files
    lm = accepted_rows(folder, manifests["lm-eval-out"].stem, "dummy-a")
    assert (
        sorted(lm["benchmark"].unique()) == ["locus_arithmetic", "locus_capitals"] and len(lm) == 9
    )  # two tasks, one model
    capitals = [m for name, m in manifests.items() if "_capitals_" in name]
    ids = [set(accepted_rows(folder, m.stem, m.models[0].model)["query_id"]) for m in capitals]
    assert len(capitals) == 2 and ids[0] == ids[1]  # model-a's .eval and model-b's .json log: the same queries


def test_a_folder_is_read_once_settled_and_a_bad_one_is_rejected_with_the_reason(home: Path, tmp_path: Path) -> None:
    folder = DropFolder.at(home).ensure()
    growing = shutil.copytree(FIXTURES / "lm_eval", folder.incoming / "still-writing")
    os.utime(next(growing.rglob("*.jsonl")), (time.time() + 60, time.time() + 60))  # one file still being written
    ready, settling = scan_incoming(folder, settle_seconds=60)
    assert ready == [] and settling == [growing]
    (folder.incoming / "photos").mkdir()
    (folder.incoming / "photos" / "cat.jpg").write_bytes(b"\xff\xd8")
    settled(folder.incoming / "photos")
    broken = drop_folder(home, "lm_eval", "broken-out", tmp_path)
    samples = next((broken / "dummy-b").glob("samples_locus_capitals_*.jsonl"))
    samples.write_text(samples.read_text().replace('"acc": 0.0', '"acc": "wrong"', 1))
    settled(broken)
    with dg.instance_for_test() as instance:
        result, _ = tick(instance, home)
    assert result.run_requests == []
    message = result.skip_reason.skip_message
    assert "rejected photos: a folder, but not an evaluation harness's output" in message
    assert (
        "rejected broken-out: row 1 (line 1), column 'acc': record 1: acc is 'wrong', not a score in [0, 1]" in message
    )
    assert "waiting for 1 file(s) to settle: still-writing" in message
    reasons = {p.name.split("-", 2)[2]: p.read_text() for p in folder.rejected.glob("*.reason.txt")}
    assert (
        "samples_locus_capitals_" in reasons["broken-out.reason.txt"]
        and "how to fix: lm-eval writes" in reasons["broken-out.reason.txt"]
    )
    assert (
        folder.rejected / next(p.name for p in folder.rejected.iterdir() if p.name.endswith("-broken-out"))
    ).is_dir()  # kept whole


def test_a_folder_that_changes_while_read_is_left_for_later(home: Path, tmp_path: Path, monkeypatch) -> None:
    path = drop_folder(home, "lm_eval", "lm-eval-out", tmp_path)
    real = accept.sha256_entry

    def sha_then_writer_adds_a_task(p: Path) -> str:
        digest = real(p)
        (p / "dummy-a" / "samples_locus_more_2026-12-01T00-00-00.000001.jsonl").write_text("{}\n")  # still writing
        return digest

    monkeypatch.setattr(accept, "sha256_entry", sha_then_writer_adds_a_task)
    result = intake_file(path, DropFolder.at(home))
    assert result.status == "changed" and path.is_dir()
    assert not any(DropFolder.at(home).accepted.iterdir()) and not any(DropFolder.at(home).rejected.iterdir())


def test_an_lm_eval_folder_is_onboarded_end_to_end(
    materialized, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.locus_pipeline.drops import materializations, run_onboarding
    from tests.locus_pipeline.drops import onboarding_tick as tick_and_add

    _, _, source = materialized
    home = tmp_path / "home"
    shutil.copytree(source, home, ignore=shutil.ignore_patterns(".locks", "dagster"))
    monkeypatch.setenv("LOCUS_HOME", str(home))
    drop_folder(home, "lm_eval", "lm-eval-out", tmp_path)
    with dg.instance_for_test() as instance:
        ticked = tick_and_add(instance, home)
        assert isinstance(ticked, dg.SensorResult)
        (request,) = ticked.run_requests or []  # the folder's two models, one run
        assert sorted(range_of(request)) == ["dummy-a", "dummy-b"]
        result = run_onboarding(instance, request)
        assert result.success
        (pool_event,) = materializations(result, "model_embeddings")
        assert pool_event.metadata["actions"].value == {"dummy-a": "new", "dummy-b": "new"}
        # 9 evaluations of arithmetic and capitals: kept, said to be untrustworthy, not routed to by default
        (view,) = [v for v in materializations(result, "onboarded_model_embedding") if v.partition == "dummy-a"]
        warnings = view.metadata["warnings"].value
        assert isinstance(warnings, str)
        assert "9 evaluations, under the pool's floor of 32" in warnings and "fewer than the 128 per model" in warnings
        assert view.metadata["routable"].value is False
        profile = view.metadata["per_benchmark_profile"].value
        assert isinstance(profile, str)
        assert "nan" not in profile.lower() and "—: that model has no evaluation on that benchmark" in profile
        (check,) = [
            c
            for c in result.get_asset_check_evaluations()
            if c.check_name == "onboarded_model_trustworthy" and c.partition == "dummy-a"
        ]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
        assert check.metadata["threshold_budget"].value == 128 and check.metadata["n_evaluations"].value == 9
        logged = [
            e.message for e in instance.all_logs(result.run_id) if isinstance(e.level, int) and e.level >= 30
        ]  # logging.WARNING and above
        assert any("dummy-a: 9 evaluations, under the pool's floor" in m for m in logged)
    pool = pd.read_parquet(home / "warehouse" / "model_embeddings.parquet")
    row = pool[pool["model"] == "dummy-a"].iloc[0]
    assert row["source"] == "onboarded" and row["n_evaluations"] == 9 and not row["routable"]
    store = pd.read_parquet(home / "onboarded" / "dummy-a.parquet")
    assert sorted(store["benchmark"].unique()) == ["locus_arithmetic", "locus_capitals"]
