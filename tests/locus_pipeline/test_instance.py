"""The Dagster instance's profile: the repository's dagster.yaml (sqlite in DAGSTER_HOME) by default, the same
settings with Postgres storage when LOCUS_DAGSTER_PG_URL is set, and back."""

from __future__ import annotations

import yaml

from locus_pipeline.home_location import REPO_ROOT
from locus_pipeline.instance import prepare_dagster_home


def test_the_postgres_profile_keeps_the_settings_and_is_undone_when_the_variable_goes(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("LOCUS_DAGSTER_PG_URL", raising=False)
    folder = prepare_dagster_home(dagster_home=tmp_path / "dagster")
    assert (folder / "dagster.yaml").resolve() == (REPO_ROOT / "dagster.yaml").resolve()
    monkeypatch.setenv("LOCUS_DAGSTER_PG_URL", "postgresql+psycopg2://u:p@db:5432/dagster")
    config = yaml.safe_load((prepare_dagster_home(dagster_home=folder) / "dagster.yaml").read_text())
    assert config["storage"] == {"postgres": {"postgres_url": {"env": "LOCUS_DAGSTER_PG_URL"}}}
    repo = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text())
    assert {k: v for k, v in config.items() if k != "storage"} == repo  # pools, coordinator, monitoring unchanged
    monkeypatch.delenv("LOCUS_DAGSTER_PG_URL")
    assert (prepare_dagster_home(dagster_home=folder) / "dagster.yaml").is_symlink()
