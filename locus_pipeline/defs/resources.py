"""Resources, bound in one place: the LOCUS_HOME root, the warehouse IO manager, query encoder, MLflow."""


import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import dagster as dg
import numpy as np
import pandas as pd
from pydantic import Field

from locus_model.paths import locus_home


class LocusHome(dg.ConfigurableResource):
    """The one root the project writes under (``$LOCUS_HOME``, default ``data/`` in the repository)."""

    root: str = Field(default="", description="Folder for all outputs; empty = $LOCUS_HOME or <repo>/data.")

    @property
    def path(self) -> Path:
        return Path(self.root).expanduser().resolve() if self.root else locus_home()

    def dir(self, *parts: str) -> Path:
        folder = self.path.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Asset outputs as Parquet under ``LOCUS_HOME/warehouse``: ``<asset>.parquet``, or
    ``<asset>/<partition>.parquet`` for partitioned assets. Readable with pandas or DuckDB.
    Writes are atomic (temporary file + rename), so a failed run leaves the previous table intact."""

    home: LocusHome

    def _path(self, context: dg.InputContext | dg.OutputContext) -> Path:
        base = self.home.dir("warehouse").joinpath(*context.asset_key.path)
        return base / f"{context.partition_key}.parquet" if context.has_partition_key else base.with_suffix(".parquet")

    def handle_output(self, context: dg.OutputContext, obj: pd.DataFrame) -> None:
        from locus_model.pool import pool_lock, write_parquet_atomic

        if not isinstance(obj, pd.DataFrame):
            raise TypeError(f"asset {context.asset_key.to_user_string()} must return a pandas DataFrame, got {type(obj)}")
        path = self._path(context)
        with pool_lock(path):
            write_parquet_atomic(obj, path)
        context.add_output_metadata({"path": dg.MetadataValue.path(str(path)), "dagster/row_count": len(obj)})

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        path = self._path(context)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: materialize {context.asset_key.to_user_string()} first")
        return pd.read_parquet(path)


class QueryEncoder(dg.ConfigurableResource):
    """Sentence encoder for query encodings; the model loads once per process, encodings are cached."""

    home: LocusHome
    device: str = Field(default="cpu", description="torch device for the sentence encoder.")
    batch_size: int = Field(default=64, description="Sentences per encoder batch.")

    def encode(self, texts: list[str], encoder: str, progress: bool = True) -> tuple[np.ndarray, Any]:
        from locus_model.encoding import encode_queries_with_report, resolve_encoder

        spec = resolve_encoder(encoder)
        return encode_queries_with_report(
            texts, encoder=spec.name, cache_dir=self.home.dir("encodings", spec.name),
            batch_size=self.batch_size, progress=progress, device=self.device,
        )


class MlflowTracking(dg.ConfigurableResource):
    """MLflow tracking with an sqlite backend and artifact root under LOCUS_HOME/mlflow."""

    home: LocusHome
    tracking_uri: str = Field(default="", description="Empty = sqlite:///<LOCUS_HOME>/mlflow/mlflow.db.")
    experiment: str = Field(default="locus", description="MLflow experiment for training runs.")
    registered_model: str = Field(default="locus", description="Registered model name for checkpoints.")
    ui_url: str = Field(default="http://127.0.0.1:5000", description="MLflow UI base URL, for links in Dagster.")

    @property
    def uri(self) -> str:
        return self.tracking_uri or f"sqlite:///{self.home.dir('mlflow') / 'mlflow.db'}"

    @property
    def artifact_root(self) -> Path:
        return self.home.dir("mlflow", "artifacts")

    @contextmanager
    def start_run(self, run_name: str, tags: dict[str, str]) -> Iterator[Any]:
        import mlflow

        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        mlflow.set_tracking_uri(self.uri)
        experiment = mlflow.get_experiment_by_name(self.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment
            else mlflow.create_experiment(self.experiment, artifact_location=self.artifact_root.as_uri())
        )
        with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=tags) as run:
            yield run

    def run_url(self, experiment_id: str, run_id: str) -> str:
        return f"{self.ui_url}/#/experiments/{experiment_id}/runs/{run_id}"


@dg.definitions
def resources() -> dg.Definitions:
    home = LocusHome()
    return dg.Definitions(
        resources={
            "home": home,
            "io_manager": WarehouseIOManager(home=home),
            "query_encoder": QueryEncoder(home=home),
            "mlflow": MlflowTracking(home=home),
        }
    )
