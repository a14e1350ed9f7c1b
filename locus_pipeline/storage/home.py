"""LocusHome: the one owner of every path, lock and read-modify-write of the pipeline's data, on a local disk
(the default, ``data/`` in the repository) or in object storage (``LOCUS_HOME=s3://bucket/prefix``)."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_model.data.encoders import resolve_encoder
from locus_model.data.encoding import encode_queries_with_summary
from locus_pipeline.home_location import default_home_location
from locus_pipeline.storage.checkpoints import Checkpoints
from locus_pipeline.storage.files import (
    StorageError,
    as_path,
    is_remote,
    read_parquet,
    write_bytes_atomic,
    write_parquet_atomic,
)
from locus_pipeline.storage.live import LiveAnswers
from locus_pipeline.storage.locks import file_lock, object_lock
from locus_pipeline.storage.pool import PoolAndStores
from locus_pipeline.storage.traffic import TrafficLog

# the working folders of a remote home whose files are also kept in the bucket (the rest are per-machine caches
# and scratch: query encodings, generated sources, staged checkpoints)
PUBLISHED = ("reports",)
UI_KEYS = ("dagster_url", "mlflow_url")  # the home's ui.json: the UIs serving it (LocusHome.ui_config)
_mirrored: dict[str, dict[str, tuple[int, int]]] = {}  # local mirror folder -> file -> (mtime_ns, size) last synced


class LocusHome(Checkpoints, PoolAndStores, LiveAnswers, TrafficLog, dg.ConfigurableResource):
    """The one root the project writes under (``$LOCUS_HOME``, default ``data/`` in the repository; a URL such as
    ``s3://bucket/prefix`` puts it in object storage): every path, lock and read-modify-write of the pipeline's
    data goes through this resource."""

    root: str = Field(
        default="",
        description="Folder or URL (s3://bucket/prefix) for all outputs; empty = $LOCUS_HOME or <repo>/data.",
    )
    cache: str = Field(
        default="",
        description="Local folder for a remote home's working files (reports before "
        "upload, query-encoding cache, checkpoint copies); empty = "
        "$LOCUS_CACHE or ~/.cache/locus/<home>. Unused for a local home.",
    )

    # ------------------------------------------------------------------ paths

    @property
    def location(self) -> str:
        return self.root or default_home_location()

    @property
    def path(self) -> Any:
        """The home: a Path (local) or a UPath (object storage)."""
        return as_path(self.location)

    @property
    def remote(self) -> bool:
        return is_remote(self.path)

    @property
    def local_path(self) -> Path:
        """Where this process keeps the home's working files: the home itself when local, else a local mirror."""
        if not self.remote:
            return self.path
        base = self.cache or os.environ.get("LOCUS_CACHE") or str(Path.home() / ".cache" / "locus")
        slug = hashlib.sha256(self.location.encode()).hexdigest()[:12]
        return Path(base).expanduser().resolve() / slug if not self.cache else Path(base).expanduser().resolve()

    def dir(self, *parts: str) -> Path:
        """A local folder for files under the home, created on first use: the folder itself on a local home; on
        a remote home a local working copy (``reports/`` is filled from the bucket on first use and uploaded by
        ``upload_changes``; the rest are per-machine caches)."""
        folder = self.local_path.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        if self.remote and parts and parts[0] in PUBLISHED:
            self._mirror(parts[0])
        return folder

    def _mirror(self, top: str) -> None:
        local = self.local_path / top
        if str(local) in _mirrored:
            return
        remote = self.path / top
        seen: dict[str, tuple[int, int]] = {}
        if remote.exists():
            for item in remote.iterdir():  # the top level only: one run's files (reports/runs/<id>/) stay in the bucket
                if item.is_file():
                    target = local / item.name
                    remote.fs.get_file(item.path, str(target))
                    seen[item.name] = _stamp(target)
        _mirrored[str(local)] = seen

    def upload_changes(self) -> list[str]:
        """Upload the files this process wrote into a remote home's published working folders (``reports/``);
        returns their stored paths. A local home has nothing to upload."""
        if not self.remote:
            return []
        uploaded = []
        for top in PUBLISHED:
            local = self.local_path / top
            seen = _mirrored.setdefault(str(local), {})
            for file in (
                sorted(p for p in local.rglob("*") if p.is_file() and not p.name.startswith("."))
                if local.exists()
                else []
            ):
                name = file.relative_to(local).as_posix()
                if seen.get(name) != _stamp(file):
                    target = self.path / top / name
                    target.fs.put_file(str(file), target.path)
                    seen[name] = _stamp(file)
                    uploaded.append(f"{top}/{name}")
        return uploaded

    def relative(self, path: Any) -> str:
        """How a path under the home (or under its local working copy) is stored in tables: relative, '/'-separated."""
        if is_remote(path):
            return str(path).removeprefix(str(self.path).rstrip("/") + "/")
        path = Path(path).resolve()
        base = self.local_path if self.remote else self.path
        return path.relative_to(base).as_posix()

    def resolve(self, stored: str) -> Any:
        """A stored path back to a file: relative paths are under the home (absolute ones are kept as they are)."""
        path = Path(stored)
        return path if path.is_absolute() else self.path / stored

    def write_text(self, folder: str, name: str, text: str) -> Path:
        """A text file in one of the home's folders (``reports/``: a report, the reports index), written whole
        (readers never see half of one); on a remote home into the working copy that ``upload_changes`` publishes.
        Returns its local path."""
        path = self.dir(folder) / name
        write_bytes_atomic(text.encode("utf-8"), path)
        return path

    @property
    def routing_evaluation_path(self) -> Path:
        """``reports/routing_evaluation.json``: the routing_evaluation asset's result, whose verdict locus serve
        reads."""
        return self.dir("reports") / "routing_evaluation.json"

    @property
    def ui_config_path(self) -> Path:
        """``ui.json``: the base URLs of the UIs serving this home ({"dagster_url", "mlflow_url"}), written by
        `make dev` (scripts/dev.sh) with the ports its servers listen on; every process that writes a link between
        the UIs reads it (defs.resources.ui_urls). In the local working copy: the servers run on this machine."""
        return self.local_path / "ui.json"

    def ui_config(self) -> dict[str, str]:
        """The home's UI configuration (:attr:`ui_config_path`); {} when there is none. A file that is not a JSON
        object of URLs is an error naming the file and how to fix it, never silently ignored."""
        path = self.ui_config_path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            config = json.loads(text)
        except ValueError as err:
            raise StorageError(
                f"{path} is not JSON ({err}). How to fix: delete it (make dev writes it again) or "
                'write {"dagster_url": "http://127.0.0.1:3000", "mlflow_url": "http://127.0.0.1:5000"}'
            )
        bad = ([] if isinstance(config, dict) else ["the file"]) or [
            k
            for k, v in config.items()
            if k in UI_KEYS and not (isinstance(v, str) and v.startswith(("http://", "https://")))
        ]
        if bad:
            raise StorageError(
                f"{path}: {', '.join(bad)} must be a JSON object of http(s) URLs ({', '.join(UI_KEYS)}). "
                "How to fix: delete it (make dev writes it again)"
            )
        return {k: config[k] for k in UI_KEYS if k in config}

    def write_ui_config(self, **urls: str) -> Path:
        """Record the UIs serving this home (``dagster_url``, ``mlflow_url``; the others kept as they are)."""
        unknown = set(urls) - set(UI_KEYS)
        if unknown:
            raise ValueError(f"write_ui_config: unknown key(s) {sorted(unknown)}; expected {', '.join(UI_KEYS)}")
        config = {**self.ui_config(), **{k: v.rstrip("/") for k, v in urls.items()}}
        self.local_path.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(json.dumps(config, indent=1).encode("utf-8"), self.ui_config_path)
        return self.ui_config_path

    def run_file(self, run_id: str, name: str) -> Path:
        """A local file for one run's output under ``reports/runs/<run_id>/`` (published with the reports), so
        that concurrent runs never write the same file."""
        return self.dir("reports", "runs", run_id) / name

    def table_path(self, name: str, partition: str | None = None) -> Any:
        base = self.path / "warehouse" / name
        return base / f"{partition}.parquet" if partition is not None else base.parent / f"{name}.parquet"

    def read_table(self, name: str, *, partition: str | None = None, columns: list[str] | None = None) -> pd.DataFrame:
        return read_parquet(
            self.table_path(name, partition),
            what=f"the {name} table",
            columns=columns,
            fix=f"materialize {name} (make demo runs the whole graph)",
        )

    def write_table(self, name: str, frame: pd.DataFrame, *, partition: str | None = None) -> Any:
        path = self.table_path(name, partition)
        if self.remote:  # one PUT of the whole object: atomic, the last writer wins (as with a rename)
            write_parquet_atomic(frame, path)
            return path
        with self.lock(f"table-{name}" if partition is None else f"table-{name}-{partition}"):
            write_parquet_atomic(frame, path)
        return path

    # ------------------------------------------------------------------ locks

    @contextmanager
    def lock(self, name: str, *, blocking: bool = True) -> Iterator[bool]:
        """An exclusive lock across processes (``.locks/<name>.lock``: a file lock on a local home, a lease object
        created by a conditional write in S3, see storage/locks.py); yields False when ``blocking`` is off and
        another process holds it."""
        path = self.path / ".locks" / f"{name}.lock"
        with object_lock(path, blocking=blocking) if self.remote else file_lock(path, blocking=blocking) as mine:
            yield mine

    # ------------------------------------------------------------------ query encodings

    def encoding_cache(self, encoder: str) -> Path:
        """The encoder's cache folder (one subfolder per runtime, see locus_model.data.encoding_cache.open_cache); on a
        remote home a per-machine cache."""
        return self.dir("encodings", resolve_encoder(encoder).name)

    def encode(
        self,
        table: pd.DataFrame,
        encoder: str,
        *,
        runtime: str | None = None,
        progress: bool = False,
        batch_size: int = 64,
        device: str = "cpu",
        threads: int | None = None,
    ):
        """(query_id + encoding frame, EncodeSummary) for the table's distinct queries, through the cache of
        (encoder, runtime); runtime None: the library's default."""
        queries = table.drop_duplicates("query_id")
        vectors, report = encode_queries_with_summary(
            queries["query"].astype(str).tolist(),
            encoder=encoder,
            runtime=runtime,
            cache_dir=self.encoding_cache(encoder),
            progress=progress,
            batch_size=batch_size,
            device=device,
            threads=threads,
        )
        frame = pd.DataFrame({"query_id": queries["query_id"].astype(str).to_numpy(), "encoding": list(vectors)})
        return frame, report


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_size)
