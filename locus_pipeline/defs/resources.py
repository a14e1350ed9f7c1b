"""Resources, bound in one place: LOCUS_HOME (storage), the warehouse IO manager, query encoder, MLflow."""

import dataclasses
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import dagster as dg
import numpy as np
import pandas as pd
from pydantic import Field

from locus_model.data.encoders import DEFAULT_RUNTIME, RUNTIMES
from locus_model.data.encoding import encode_queries_with_summary
from locus_pipeline.defs.metadata import COLUMN_DOCS, home_path, table_schema
from locus_pipeline.storage import LocusHome


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Asset outputs as Parquet under ``LOCUS_HOME/warehouse``: ``<asset>.parquet``, or
    ``<asset>/<partition>.parquet`` for partitioned assets, written atomically through LocusHome.
    Readable with pandas or DuckDB."""

    home: LocusHome

    def _partition(self, context: dg.InputContext | dg.OutputContext) -> str | None:
        return context.partition_key if context.has_partition_key else None

    def handle_output(self, context: dg.OutputContext, obj: pd.DataFrame) -> None:
        if not isinstance(obj, pd.DataFrame):
            raise TypeError(
                f"asset {context.asset_key.to_user_string()} must return a pandas DataFrame, got {type(obj)}"
            )
        path = self.home.write_table(context.asset_key.to_user_string(), obj, partition=self._partition(context))
        self.home.upload_changes()  # a remote home: the reports and run files the asset wrote go to the bucket too
        context.add_output_metadata(
            {
                "path": home_path(self.home, path),
                "dagster/row_count": len(obj),
                "dagster/column_schema": table_schema(obj, COLUMN_DOCS.get(context.asset_key.to_user_string())),
            }
        )

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        return self.home.read_table(context.asset_key.to_user_string(), partition=self._partition(context))


class QueryEncoder(dg.ConfigurableResource):
    """Sentence encoder for query encodings (locus_model.data.encoding, through LocusHome.encode); the model
    loads once per process, encodings are cached under LOCUS_HOME/encodings/<encoder>/<runtime>/."""

    home: LocusHome
    runtime: str = Field(
        default="",
        description=f"Encoder runtime: one of {', '.join(RUNTIMES)} (torch = "
        f"sentence-transformers fp32, the reference); empty = the encoder's default ({DEFAULT_RUNTIME} "
        "for all-MiniLM-L6-v2, torch for all-mpnet-base-v2). Recorded in the checkpoint.",
    )
    device: str = Field(default="cpu", description="torch device for the sentence encoder (runtime torch only).")
    batch_size: int = Field(default=64, description="Sentences per encoder batch.")
    threads: int = Field(default=0, description="CPU threads of the encoder; 0 = torch's default.")

    def encode(self, texts: list[str], encoder: str, progress: bool = True) -> tuple[np.ndarray, Any]:
        return encode_queries_with_summary(
            texts,
            encoder=encoder,
            runtime=self.runtime or None,
            cache_dir=self.home.encoding_cache(encoder),
            batch_size=self.batch_size,
            progress=progress,
            device=self.device,
            threads=self.threads or None,
        )


def _default_tracking_uri() -> str:
    """$MLFLOW_TRACKING_URI when it names a server (http/https). Any other value is ignored: mlflow.set_tracking_uri
    writes the variable itself, so after a run in this process it holds some home's sqlite URI, not a choice."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    return uri if uri.startswith(("http://", "https://")) else ""


def ui_urls(home: LocusHome, ui_url: str = "", dagster_url: str = "") -> tuple[str, str]:
    """(MLflow UI, Dagster UI) base URLs for the links a process writes, one rule for every writer (the pipeline's
    assets, `locus onboard`, make dev's relinking): the resource's own field where set; else the environment
    ($LOCUS_MLFLOW_URL, an http $MLFLOW_TRACKING_URI or $MLFLOW_PORT; $LOCUS_DAGSTER_URL or $DAGSTER_PORT); else
    the home's UI configuration (``ui.json``, written by `make dev` with the ports its servers listen on, so that a
    process started in another shell links to them too); else 127.0.0.1:5000 and :3000."""
    configured = home.ui_config()
    server = _default_tracking_uri()
    mlflow = (
        ui_url
        or os.environ.get("LOCUS_MLFLOW_URL")
        or server
        or (f"http://127.0.0.1:{os.environ['MLFLOW_PORT']}" if os.environ.get("MLFLOW_PORT") else "")
        or configured.get("mlflow_url")
        or "http://127.0.0.1:5000"
    )
    dagster = (
        dagster_url
        or os.environ.get("LOCUS_DAGSTER_URL")
        or (f"http://127.0.0.1:{os.environ['DAGSTER_PORT']}" if os.environ.get("DAGSTER_PORT") else "")
        or configured.get("dagster_url")
        or "http://127.0.0.1:3000"
    )
    return mlflow.rstrip("/"), dagster.rstrip("/")


# MLflow 3 opens an experiment in its GenAI view unless told otherwise: the experiment tag says what kind it is,
# and the UI's links carry workflowType (the UI's own switch, which wins over the tag when present)
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
UI_QUERY = "?workflowType=machine_learning"


class MlflowTracking(dg.ConfigurableResource):
    """MLflow tracking: by default an sqlite backend and artifact root under LOCUS_HOME/mlflow (a home that was
    copied or moved is relocated on first use: stored artifact locations follow it, see ``relocate``); with
    ``tracking_uri`` (default $MLFLOW_TRACKING_URI) an MLflow server, reached through its API only (its own
    database and artifact store, e.g. Postgres and S3: docs/deploy.md)."""

    home: LocusHome
    tracking_uri: str = Field(
        default_factory=_default_tracking_uri,
        description="MLflow tracking server (http://...); default $MLFLOW_TRACKING_URI if it is one; empty = "
        "sqlite:///<LOCUS_HOME>/mlflow/mlflow.db.",
    )
    experiment: str = Field(default="locus", description="MLflow experiment for training runs.")
    registered_model: str = Field(default="locus", description="Registered model name for checkpoints.")
    ui_url: str = Field(
        default="",
        description="MLflow UI base URL for links in Dagster; empty = $LOCUS_MLFLOW_URL, else "
        "http://127.0.0.1:$MLFLOW_PORT, else the home's ui.json (make dev's ports), else :5000.",
    )
    dagster_url: str = Field(
        default="",
        description="Dagster UI base URL for the links back from MLflow; empty = $LOCUS_DAGSTER_URL, "
        "else http://127.0.0.1:$DAGSTER_PORT, else the home's ui.json, else :3000.",
    )

    @property
    def mlflow_ui_url(self) -> str:
        """The MLflow UI the links point at (:func:`ui_urls`)."""
        return ui_urls(self.home, self.ui_url, self.dagster_url)[0]

    @property
    def dagster_ui_url(self) -> str:
        """The Dagster UI the links back from MLflow point at (:func:`ui_urls`)."""
        return ui_urls(self.home, self.ui_url, self.dagster_url)[1]

    @property
    def db_path(self) -> Path:
        if self.home.remote and not self.tracking_uri:
            raise ValueError(
                f"LOCUS_HOME={self.home.location} is in object storage, where MLflow cannot keep an sqlite "
                "database. How to fix: set MLFLOW_TRACKING_URI to an MLflow server (docs/deploy.md)"
            )
        return self.home.dir("mlflow") / "mlflow.db"

    @property
    def uri(self) -> str:
        return self.tracking_uri or f"sqlite:///{self.db_path}"

    @property
    def artifact_root(self) -> Path:
        return self.home.dir("mlflow", "artifacts")

    def relocate(self) -> int:
        """Point every artifact location stored in the local database at this home's ``mlflow/artifacts``
        (a copied home would otherwise read and write the original's). Returns the rows changed. Only the home's
        own sqlite database is touched, and only when a location is not already this home's.

        The one place left where LOCUS edits MLflow's tables with SQL, because MLflow offers no other way: its
        sqlite store resolves every local artifact location to an absolute URI when the experiment or run is
        created (``resolve_uri_if_local``); relative locations exist only as ``mlflow-artifacts:`` URIs, which
        need a tracking server (``--serve-artifacts``), not the in-process default; and no API call or CLI
        command sets an experiment's ``artifact_location``, a run's ``artifact_uri``, a model version's
        ``source``/``storage_location`` or a logged model's ``artifact_location`` (``mlflow db move-resources
        --artifact-policy retarget`` moves an experiment's root between workspaces and keeps stored run and
        logged-model URIs). With a server (``tracking_uri``) nothing is stored that needs relocating."""
        if self.tracking_uri or not self.db_path.exists():
            return 0
        new = self.artifact_root.as_uri()
        changed = 0
        with sqlite3.connect(self.db_path) as db:
            tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
            if "experiments" not in tables:
                return 0
            for (location,) in db.execute("select artifact_location from experiments").fetchall():
                old = (
                    location.split("/mlflow/artifacts")[0] + "/mlflow/artifacts"
                    if "/mlflow/artifacts" in location
                    else None
                )
                if old is None or old == new:
                    continue
                for table, column in (
                    ("experiments", "artifact_location"),
                    ("runs", "artifact_uri"),
                    ("model_versions", "source"),
                    ("model_versions", "storage_location"),
                    ("logged_models", "artifact_location"),
                ):  # the pyfunc of each version
                    if table in tables and column in {c[1] for c in db.execute(f"pragma table_info({table})")}:
                        cur = db.execute(
                            f"update {table} set {column} = ? || substr({column}, ?) where substr({column}, 1, ?) = ?",
                            (new, len(old) + 1, len(old), old),
                        )
                        changed += cur.rowcount
        return changed

    def _local_store(self) -> None:
        """The home's sqlite store, made ready for a run: created by MLflow with this home's artifact root as its
        default (its Default experiment keeps artifacts under the home, not in ./mlruns of the working directory),
        or relocated when the home was copied or moved."""
        if self.tracking_uri:
            return
        if not self.db_path.exists():
            # why: mlflow (seconds to import) loads when a run logs, not with the code location
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            SqlAlchemyStore(self.uri, self.artifact_root.as_uri())  # creates the tables and the Default experiment
        self.relocate()

    def relink(self) -> int:
        """Point the Dagster links stored in the local MLflow store (each run's ``dagster.run_url`` tag and
        description, each model version's tag and description) at ``dagster_ui_url``: they were made with the ports
        of the process that trained, e.g. `make demo`'s defaults. Through MLflow's API (``set_tag``,
        ``set_model_version_tag``, ``update_model_version``); the runs of deleted experiments keep their links.
        Returns the values changed."""
        if self.tracking_uri or not self.db_path.exists():
            return 0
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        client = mlflow.MlflowClient(self.uri)
        experiments = [e.experiment_id for e in _all_pages(lambda token: client.search_experiments(page_token=token))]
        runs = list(_all_pages(lambda token: client.search_runs(experiments, max_results=1000, page_token=token)))
        versions = list(_all_pages(lambda token: client.search_model_versions(page_token=token)))
        new = self.dagster_ui_url
        old_bases = {
            url.rsplit("/runs/", 1)[0]
            for url in [r.data.tags.get("dagster.run_url") for r in runs]
            + [v.tags.get("dagster.run_url") for v in versions]
            if url and "/runs/" in url
        } - {new}

        def relinked(text: str) -> str:
            for old in sorted(old_bases):
                text = text.replace(f"{old}/runs/", f"{new}/runs/")
            return text

        changed = 0
        for run in runs:
            for key, value in run.data.tags.items():
                if relinked(value) != value:
                    client.set_tag(run.info.run_id, key, relinked(value))
                    changed += 1
        for version in versions:
            for key, value in version.tags.items():
                if relinked(value) != value:
                    client.set_model_version_tag(version.name, version.version, key, relinked(value))
                    changed += 1
            if version.description and relinked(version.description) != version.description:
                client.update_model_version(version.name, version.version, description=relinked(version.description))
                changed += 1
        return changed

    @contextmanager
    def start_run(self, run_name: str, tags: Mapping[str, str]) -> Iterator[Any]:
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        mlflow.set_tracking_uri(self.uri)
        self._local_store()
        experiment = mlflow.get_experiment_by_name(self.experiment)
        if experiment is None:  # a server chooses its own artifact location (its artifact store)
            location = None if self.tracking_uri else (self.artifact_root / "locus").as_uri()
            experiment_id = mlflow.create_experiment(self.experiment, artifact_location=location, tags=EXPERIMENT_KIND)
        else:
            experiment_id = experiment.experiment_id
            for key, value in EXPERIMENT_KIND.items():  # an experiment made before the tag existed
                if experiment.tags.get(key) != value:
                    mlflow.MlflowClient().set_experiment_tag(experiment_id, key, value)
        with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=dict(tags)) as run:
            yield run

    def register_version(
        self, logged: Any, *, run_id: str, alias: str, description: str, tags: dict[str, str], version_description: str
    ) -> str:
        """A new version of ``registered_model`` from a logged model (created, with ``description``, on first
        use), pointed to by ``alias``; returns the version number."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        client = mlflow.MlflowClient(self.uri)
        if client.search_registered_models(filter_string=f"name = '{self.registered_model}'") == []:
            client.create_registered_model(self.registered_model, description=description)
        elif not client.get_registered_model(self.registered_model).description:
            client.update_registered_model(self.registered_model, description=description)
        version = client.create_model_version(
            self.registered_model,
            source=logged.model_uri,
            model_id=logged.model_id,
            run_id=run_id,
            tags=tags,
            description=version_description,
        )
        client.set_registered_model_alias(self.registered_model, alias, version.version)
        return str(version.version)

    def run_url(self, experiment_id: str, run_id: str) -> str:
        return f"{self.mlflow_ui_url}/#/experiments/{experiment_id}/runs/{run_id}{UI_QUERY}"

    def experiment_url(self, experiment_id: str) -> str:
        return f"{self.mlflow_ui_url}/#/experiments/{experiment_id}{UI_QUERY}"

    def experiment_of_run(self, run_id: str) -> str | None:
        """The experiment id of a run, None when the tracking store does not hold it (e.g. a home copied without
        its mlflow/ folder). The home's own database is read directly: no mlflow import, onboarding runs stay fast."""
        if not self.tracking_uri:
            if not self.db_path.exists():
                return None
            with sqlite3.connect(self.db_path) as db:
                row = db.execute("select experiment_id from runs where run_uuid = ?", (run_id,)).fetchone()
            return None if row is None else str(row[0])
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        try:
            return mlflow.MlflowClient(self.uri).get_run(run_id).info.experiment_id
        except mlflow.exceptions.MlflowException:
            return None

    def artifact_page_url(self, run_id: str, path: str) -> str | None:
        """The run's artifact page with ``path`` selected (the MLflow UI previews HTML there); None when the
        tracking store does not hold the run."""
        experiment = self.experiment_of_run(run_id)
        if experiment is None:
            return None
        return f"{self.mlflow_ui_url}/#/experiments/{experiment}/runs/{run_id}/artifacts/{path}{UI_QUERY}"

    def log_artifact(self, run_id: str, local_path: Path, artifact_path: str) -> None:
        """Add (or replace) a file among a finished run's artifacts."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        mlflow.set_tracking_uri(self.uri)
        self._local_store()
        mlflow.MlflowClient(self.uri).log_artifact(run_id, str(local_path), artifact_path)

    def log_to_run(self, run_id: str, metrics: dict[str, float], tags: dict[str, str]) -> None:
        """Add metrics and tags to a finished run (e.g. the routing verdict on the checkpoint's training run)."""
        # why: mlflow (seconds to import) loads when a run logs, not with the code location
        import mlflow

        mlflow.set_tracking_uri(self.uri)
        self._local_store()
        client = mlflow.MlflowClient(self.uri)
        for key, value in metrics.items():
            client.log_metric(run_id, key, float(value))
        for key, text in tags.items():
            client.set_tag(run_id, key, text)

    def dagster_run_url(self, run_id: str) -> str:
        return f"{self.dagster_ui_url}/runs/{run_id}"


def _all_pages(fetch: Callable[[str | None], Any]) -> Iterator[Any]:
    """Every item of an MLflow search, page by page: ``fetch(page_token)`` returns a PagedList."""
    token = None
    while True:
        page = fetch(token)
        yield from page
        token = page.token
        if not token:
            return


class DropFolderIntake(dg.ConfigurableResource):
    """What one drop into LOCUS_HOME/incoming/ may declare (docs/onboarding.md, Limits): past either limit the drop is
    rejected with the limit in its reason, its size read from the file system before anything is hashed or read."""

    max_bytes: int = Field(
        default=16 << 30,
        description="Bytes of one drop (a file's size as the file system gives "
        "it, a sparse file's holes included; a folder: its files' sum).",
    )
    max_models: int = Field(default=1_000, description="Models in one drop (each becomes a pool row and a partition).")
    max_rows: int = Field(
        default=5_000_000,
        description="Evaluation rows of one drop, counted as it is read (a Parquet "
        "file's from its footer); ~270 bytes of memory each.",
    )

    def limits(self):
        # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
        from locus_pipeline.intake import IntakeLimits
        from locus_pipeline.intake.accept import DROP_LIMITS

        return IntakeLimits(
            max_bytes=self.max_bytes,
            max_models=self.max_models,
            read=dataclasses.replace(DROP_LIMITS, max_rows=self.max_rows),
        )


def resources_for(home: LocusHome) -> dict[str, Any]:
    """Every resource, bound to ``home`` (a run in this process on a home other than $LOCUS_HOME: locus onboard)."""
    return {
        "home": home,
        "io_manager": WarehouseIOManager(home=home),
        "query_encoder": QueryEncoder(home=home),
        "mlflow": MlflowTracking(home=home),
        "intake": DropFolderIntake(),
    }


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=resources_for(LocusHome()))
