"""LocusHome in object storage (moto's S3 server): tables, checkpoints, reports, the pool's read-modify-write
serialized across processes by a lease object (no local file lock), and the drop folder's upload protocol."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_pipeline.intake import DropFolder, intake_file, read_manifest, scan_incoming
from locus_pipeline.storage import LocusHome, StorageError
from tests.locus_pipeline.object_store import BUCKET, s3_endpoint

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def s3():
    with s3_endpoint() as env:
        yield env


@pytest.fixture
def home(s3, tmp_path, request) -> LocusHome:
    return LocusHome(root=f"s3://{BUCKET}/{request.node.name}", cache=str(tmp_path / "cache"))


def pool_rows(models: list[str], checkpoint: str = "c0") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": models,
            "model_key": models,
            "embedding": [np.zeros(4, np.float32) for _ in models],
            "group_profile": [np.zeros(0, np.float32) for _ in models],
            "n_evaluations": [1] * len(models),
            "evaluations_digest": ["f"] * len(models),
            "checkpoint_id": [checkpoint] * len(models),
            "source": ["onboarded"] * len(models),
            "embedded_at": [pd.Timestamp.now(tz="UTC")] * len(models),
            "routable": [True] * len(models),
        }
    )


def test_tables_are_objects_and_paths_stay_relative(home: LocusHome) -> None:
    assert home.remote
    with pytest.raises(StorageError, match="materialize things"):
        home.read_table("things")
    path = home.write_table("things", pd.DataFrame({"a": [1, 2]}))
    assert str(path) == f"s3://{BUCKET}/{home.root.rsplit('/', 1)[1]}/warehouse/things.parquet"
    assert home.relative(path) == "warehouse/things.parquet" and str(home.resolve("warehouse/things.parquet")) == str(
        path
    )
    assert home.read_table("things")["a"].tolist() == [1, 2]
    home.write_table("things", pd.DataFrame({"a": [3]}), partition="p1")
    assert home.read_table("things", partition="p1")["a"].tolist() == [3]


def test_a_pool_update_replaces_the_remote_pool(home: LocusHome) -> None:
    home.update_pool(lambda current: pool_rows(["a"]))
    home.update_pool(lambda current: pool_rows(["a", "b"]))
    assert home.read_pool()["model"].tolist() == ["a", "b"]


def test_a_checkpoint_is_published_whole_and_cached_locally(home: LocusHome) -> None:
    saved = home.save_checkpoint(lambda path: path.write_bytes(b"weights"))
    remote = home.resolve(saved.stored)
    assert saved.stored == f"checkpoints/locus-{saved.checkpoint_id}.pt" and remote.read_bytes() == b"weights"
    assert saved.local.read_bytes() == b"weights" and saved.local.is_relative_to(home.local_path)
    assert not [p for p in (home.local_path / "checkpoints").iterdir() if p.name.startswith(".")]  # no staging left


def test_reports_written_locally_are_uploaded_once(home: LocusHome) -> None:
    (home.dir("reports") / "a.md").write_text("# a")
    (home.run_file("run1", "training_curve.png")).write_bytes(b"png")
    assert sorted(home.upload_changes()) == ["reports/a.md", "reports/runs/run1/training_curve.png"]
    assert home.upload_changes() == []  # nothing changed since
    assert (home.path / "reports" / "runs" / "run1" / "training_curve.png").read_bytes() == b"png"
    # another machine (another local copy) finds the published reports in its reports folder
    other = LocusHome(root=home.root, cache=str(home.local_path.parent / "other"))
    assert (other.dir("reports") / "a.md").read_text() == "# a"


WRITER = textwrap.dedent("""
    import sys, numpy as np, pandas as pd
    sys.path.insert(0, sys.argv[3])
    from locus_pipeline.storage import LocusHome
    from tests.locus_pipeline.storage.test_remote import pool_rows

    home = LocusHome(root=sys.argv[1], cache=sys.argv[2])
    name = sys.argv[4]
    for i in range(int(sys.argv[5])):
        # read-modify-write: append one model; a lost update would drop another writer's model
        home.update_pool(lambda current: pd.concat([current, pool_rows([f"{name}-{i}"])], ignore_index=True)
                         if current is not None else pool_rows([f"{name}-{i}"]))
""")


def test_two_writers_in_separate_processes_lose_no_update(home: LocusHome, s3, tmp_path) -> None:
    n = 6
    env = {**os.environ, **s3, "PYTHONPATH": str(ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, home.root, str(tmp_path / f"cache-{w}"), str(ROOT), w, str(n)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in ("x", "y")
    ]
    for writer in writers:
        assert writer.stderr is not None  # piped
        assert writer.wait(timeout=240) == 0, writer.stderr.read()
    models = sorted(home.read_pool()["model"])
    assert models == sorted([f"x-{i}" for i in range(n)] + [f"y-{i}" for i in range(n)])
    assert not (home.path / ".locks" / "pool.lock").exists()  # released


def test_the_lock_is_exclusive_and_an_expired_lease_is_broken(home: LocusHome, monkeypatch) -> None:
    with home.lock("x") as mine:
        assert mine
        with home.lock("x", blocking=False) as other:
            assert not other
    monkeypatch.setenv("LOCUS_LOCK_TTL", "-1")  # every lease taken from now on is already expired (a dead holder)
    lease = home.path / ".locks" / "y.lock"
    lease.write_bytes(json.dumps({"holder": "dead", "expires": time.time() - 1}).encode())
    with home.lock("y", blocking=False) as mine:
        assert mine


def test_an_uploaded_file_is_taken_in_and_the_outcome_published(home: LocusHome, tmp_path) -> None:
    rows = pd.DataFrame(
        {
            "model": ["new-model"] * 3,
            "query_id": ["q0", "q1", "q2"],
            "query": ["a", "b", "c"],
            "benchmark": ["bench"] * 3,
            "score": [1.0, 0.0, 1.0],
        }
    )
    local = tmp_path / "evals.csv"
    rows.to_csv(local, index=False)
    remote = home.path / "incoming" / "evals.csv"
    remote.fs.put_file(str(local), remote.path)  # the writer protocol: one upload of the whole object
    (home.path / "incoming" / "half.csv.part").write_bytes(b"model,")  # an in-progress name: never read
    folder = DropFolder(home)
    with folder.intake_lock() as mine:
        assert mine
        ready, _ = scan_incoming(folder, now=time.time() + 10)
        assert [p.name for p in ready] == ["evals.csv"]
        result = intake_file(ready[0], folder)
    assert result.status == "accepted" and result.manifest is not None
    stem = result.manifest.stem
    incoming = home.path / "incoming"
    assert not (incoming / "evals.csv").exists() and (incoming / "half.csv.part").exists()
    assert (incoming / "accepted" / f"{stem}.manifest.json").exists()
    # an onboarding run on another machine reads the manifest and the model's rows from the bucket
    other = DropFolder(LocusHome(root=home.root, cache=str(tmp_path / "elsewhere")))
    from locus_pipeline.intake import accepted_rows

    assert read_manifest(other, stem).models[0].model == "new-model"
    assert accepted_rows(other, stem, "new-model")["query_id"].tolist() == ["q0", "q1", "q2"]


def test_capability_estimates_are_stored_per_model_and_read_back_together(home: LocusHome) -> None:
    assert home.capability_estimates().empty  # none stored: an empty frame, never an error
    for key, estimate in (("m-1", 0.4), ("m-2", 0.7)):
        home.write_capability_estimates(
            key, pd.DataFrame({"model": [key], "benchmark": ["law"], "estimate": [estimate]})
        )
    assert home.relative(home.estimates_path("m-1")) == "onboarded/estimates/m-1.parquet"
    both = home.capability_estimates()
    assert both.set_index("model")["estimate"].to_dict() == {"m-1": 0.4, "m-2": 0.7}
    assert home.onboarded_keys() == []  # not evaluation stores
