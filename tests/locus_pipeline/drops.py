"""The drop folder and onboarding runs as the pipeline's tests drive them: a file dropped with an old mtime, one
sensor tick (for the onboarding tests: with its dynamic partitions added, as Dagster does), an onboarding run in
process and what it materialized, a new model's rows, a retrained checkpoint."""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import torch

from locus_model.model import load_checkpoint, save_checkpoint
from locus_pipeline.defs.resources import DropFolderIntake
from locus_pipeline.defs.sensors import onboarding_drop_folder
from locus_pipeline.intake import DropFolder
from locus_pipeline.storage import LocusHome, checkpoint_id

COLUMNS = ["model", "query_id", "query", "benchmark", "score"]
HEADER = "model,query_id,query,benchmark,score\n"
OLD = time.time() - 3600


def drop(home: Path, name: str, content: str, *, mtime: float = OLD) -> Path:
    folder = DropFolder.at(home).ensure()
    path = folder.incoming / name
    path.write_text(content, encoding="utf-8")
    os.utime(path, (mtime, mtime))
    return path


def sensor_tick(instance: dg.DagsterInstance, home: Path, cursor: str | None = None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"home": LocusHome(root=str(home)), "intake": DropFolderIntake()}
    )
    return onboarding_drop_folder(context), context


def defs():
    from locus_pipeline.definitions import defs as load

    return load()


def onboarding_tick(
    instance: dg.DagsterInstance, home: Path, cursor: str | None = None
) -> dg.SensorResult | dg.SkipReason:
    result = onboarding_drop_folder(
        dg.build_sensor_context(
            instance=instance,
            cursor=cursor,
            resources={"home": LocusHome(root=str(home)), "intake": DropFolderIntake()},
        )
    )
    assert isinstance(result, (dg.SensorResult, dg.SkipReason))  # the sensor returns one of the two
    for add in (result.dynamic_partitions_requests if isinstance(result, dg.SensorResult) else None) or []:
        instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
    return result


def requests_of(result: object) -> list[dg.RunRequest]:
    """The runs a tick requested (a tick that skipped fails the test)."""
    assert isinstance(result, dg.SensorResult), result
    return list(result.run_requests or [])


def text(value: dg.MetadataValue) -> str:
    """A text or markdown metadata value's text."""
    assert isinstance(value.value, str), value
    return value.value


def number(value: dg.MetadataValue) -> float:
    """A numeric metadata value."""
    assert isinstance(value.value, (int, float)), value
    return value.value


def partition(event: dg.AssetMaterialization) -> str:
    """The partition of a materialization of a partitioned asset."""
    assert event.partition is not None, event
    return event.partition


def run_onboarding(instance: dg.DagsterInstance, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """The request's run in process, as the daemon launches it: its partition or its range of partitions (tags)."""
    return (
        defs()
        .resolve_job_def("onboarding_job")
        .execute_in_process(
            instance=instance,
            partition_key=request.partition_key,
            run_config=request.run_config,
            tags={**request.tags, "dagster/run_key": request.run_key},
            raise_on_error=False,
        )
    )


def range_of(request: dg.RunRequest) -> tuple[str, str]:
    """(first, last) model key of the range of partitions a run request covers."""
    return request.tags["dagster/asset_partition_range_start"], request.tags["dagster/asset_partition_range_end"]


def request_key(request: dg.RunRequest) -> str:
    """The one model key a run request of a one-model file covers."""
    first, last = range_of(request)
    assert first == last, f"a range of several models: {first}...{last}"
    return first


def by_model(requests: list[dg.RunRequest]) -> dict[str, dg.RunRequest]:
    """The requests of one-model files by their model key."""
    return {request_key(r): r for r in requests}


def materializations(result, asset: str) -> list[dg.AssetMaterialization]:
    return [
        e.event_specific_data.materialization
        for e in result.get_asset_materialization_events()
        if e.event_specific_data.materialization.asset_key.to_user_string() == asset
    ]


def new_model_rows(home: Path, name: str, n: int = 128) -> pd.DataFrame:
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    queries = table.drop_duplicates("query_id").head(n)
    return queries.assign(model=name, score=(np.arange(len(queries)) % 3 == 0).astype(float))[COLUMNS]


def drop_file(home: Path, name: str, rows: pd.DataFrame) -> None:
    drop(home, name, rows.to_csv(index=False))


def new_checkpoint(home: Path) -> str:
    """Another checkpoint (perturbed weights) recorded as the current locus_checkpoint: what a retraining leaves."""
    storage = LocusHome(root=str(home))
    record = storage.current_checkpoint()
    model, extra = load_checkpoint(storage.resolve(record.path))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    staging = home / "checkpoints" / "staging.pt"
    save_checkpoint(staging, model, **extra)
    new_id = checkpoint_id(staging)
    staging.rename(storage.checkpoint_file(new_id))
    table = storage.read_table("locus_checkpoint").assign(checkpoint_id=new_id, path=f"checkpoints/locus-{new_id}.pt")
    storage.write_table("locus_checkpoint", table)
    return new_id
