"""The Dagster instance of a LOCUS_HOME: DAGSTER_HOME=$LOCUS_HOME/dagster with the repository's dagster.yaml
(sqlite storage in that folder), or, with LOCUS_DAGSTER_PG_URL set, the same settings with Postgres storage
(deploy/dagster-postgres.yaml)."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from pathlib import Path

from locus_pipeline.home_location import REPO_ROOT, default_home

POSTGRES_PROFILE = REPO_ROOT / "deploy" / "dagster-postgres.yaml"

# The environment of every process that creates Dagster runs (the daemon of dagster dev and of a deployment): a run
# over a range of partitions (one dropped file, all its models) records one "materialization planned" event per
# asset, not one per asset and partition. Dagster's own switch; without it a 1,000-model file's run took 216 s to
# create on sqlite (2,000 events, a commit each), holding the sensor and the drops behind it; with it 7 s. The cost:
# Dagster does not mark the run's partitions failed when it fails (the run and the onboarding's metadata name them).
RUN_CREATION_ENV = {"DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "true"}


def prepare_dagster_home(home: Path | None = None, *, dagster_home: Path | None = None) -> Path:
    """Create ``<home>/dagster`` (or ``dagster_home``) holding the repository's dagster.yaml and return it (the
    caller sets DAGSTER_HOME to it for the processes that need it): a link to it, or, when LOCUS_DAGSTER_PG_URL
    is set, a copy with the Postgres storage block appended."""
    dagster_home = dagster_home or (home or default_home()) / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    target = dagster_home / "dagster.yaml"
    source = REPO_ROOT / "dagster.yaml"
    if os.environ.get("LOCUS_DAGSTER_PG_URL"):
        target.unlink(missing_ok=True)
        target.write_text(source.read_text() + "\n" + POSTGRES_PROFILE.read_text())
        return dagster_home
    if target.is_symlink() or not target.exists() or "LOCUS_DAGSTER_PG_URL" in target.read_text():
        target.unlink(missing_ok=True)  # (a copy with the Postgres block, from a run with the variable set, too)
        try:
            target.symlink_to(source)
        except OSError:  # filesystems without symlinks
            shutil.copyfile(source, target)
    return dagster_home


# an MLflow UI link as stored in a serialized event: "url": "<base>/#/experiments/..." or "<base>/get-artifact?..."
_MLFLOW_LINK = re.compile(r'"url": "(https?://[^"#?]+?)/(?:#/experiments|get-artifact)')


def relink_mlflow_links(dagster_home: Path, mlflow_url: str) -> int:
    """Point the MLflow links stored in this Dagster instance's events (``mlflow_run``, ``mlflow_experiment``,
    ``atlas``, made with the ports of the process that materialized them, e.g. `make demo`'s defaults) at
    ``mlflow_url``, so that `make dev` on other ports (or a moved home) shows working links. Only the instance's
    own sqlite files are touched; run it while no Dagster process uses them. Returns the events changed."""
    new = mlflow_url.rstrip("/")
    changed = 0
    for db_path in sorted((Path(dagster_home) / "history").rglob("*.db")):
        with sqlite3.connect(db_path) as db:
            tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
            columns = [
                (t, c) for t, c in (("event_logs", "event"), ("asset_keys", "last_materialization")) if t in tables
            ]
            for table, column in columns:
                rows = db.execute(
                    f'select rowid, {column} from {table} where {column} like \'%"url": "http%\''
                ).fetchall()
                for rowid, text in rows:
                    fixed = _MLFLOW_LINK.sub(
                        lambda m: m.group(0).replace(m.group(1), new, 1) if m.group(1) != new else m.group(0), text
                    )
                    if fixed != text:
                        db.execute(f"update {table} set {column} = ? where rowid = ?", (fixed, rowid))
                        changed += 1
    return changed
