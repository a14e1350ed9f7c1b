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


def test_a_run_over_a_range_of_partitions_is_created_with_one_planned_event_per_asset(monkeypatch) -> None:
    """RUN_CREATION_ENV, which dagster dev (devserver, scripts/dev.sh) and the image get: creating the run of a file of
    many models records a few events, not one per model and asset (2,000 commits for 1,000 models: 216 s)."""
    import dagster as dg

    from locus_pipeline.definitions import defs
    from locus_pipeline.defs.partitions import ONBOARDED_MODELS, range_tags
    from locus_pipeline.devserver import start_dagster_dev  # noqa: F401  (the env it passes is RUN_CREATION_ENV)
    from locus_pipeline.instance import RUN_CREATION_ENV

    dev = (REPO_ROOT / "scripts" / "dev.sh").read_text()
    assert all(f"export {k}={v}" in dev for k, v in RUN_CREATION_ENV.items())
    assert all(f"{k}={v}" in (REPO_ROOT / "Dockerfile").read_text() for k, v in RUN_CREATION_ENV.items())
    job = defs().resolve_job_def("onboarding_job")
    keys = [f"m{i:03d}" for i in range(40)]
    planned = {}
    for switched in (False, True):
        for k, v in RUN_CREATION_ENV.items():
            monkeypatch.setenv(k, v) if switched else monkeypatch.delenv(k, raising=False)
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(ONBOARDED_MODELS, keys)
            run = instance.create_run_for_job(
                job_def=job,
                tags=range_tags(keys[0], keys[-1]),
                run_config={"ops": {"onboarded_evaluations": {"config": {"accepted_file": "x"}}}},
            )
            planned[switched] = len(
                instance.get_records_for_run(
                    run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED
                ).records
            )
    assert planned[False] >= 2 * len(keys) and planned[True] <= 3  # per asset, whatever the file's models
