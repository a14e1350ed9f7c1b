"""The MLflow run of a live onboarding links to its Dagster run, as training's run does."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from locus_pipeline.live.onboard import OnboardConfig, OnboardResult, log_to_mlflow
from locus_pipeline.storage import LocusHome


def test_the_mlflow_run_of_an_onboarding_links_to_its_dagster_run(tmp_path: Path) -> None:
    import mlflow

    from locus_pipeline.defs.resources import MlflowTracking

    home = LocusHome(root=str(tmp_path))
    answers = pd.DataFrame(
        {
            "query_id": ["q1"],
            "benchmark": ["law"],
            "prompt": ["p"],
            "answer": ["The answer is (C)."],
            "letter": ["C"],
            "gold": ["C"],
            "score": [1.0],
            "reason": ["correct"],
            "cost_usd": [0.0],
        }
    )
    result = OnboardResult(
        model="my-copy",
        answers=1,
        asked_now=1,
        resumed=0,
        failed_calls=0,
        accuracy=1.0,
        cost_usd=0.0,
        stopped_by="budget",
        seconds=1.0,
        run_id="0123456789abcdef",
    )
    logged = log_to_mlflow(
        MlflowTracking(home=home), OnboardConfig(endpoint="my-copy"), answers, {}, result, dagster_run_id="ignored"
    )
    tags = mlflow.MlflowClient(MlflowTracking(home=home).uri).get_run(logged).data.tags
    assert tags["dagster.run_id"] == "0123456789abcdef"  # the onboarding run, when this process ran one
    assert tags["dagster.run_url"] == MlflowTracking(home=home).dagster_run_url("0123456789abcdef")
    result.run_id = None  # left for the sensor (live_onboarding_job): the job's own run
    again = log_to_mlflow(
        MlflowTracking(home=home), OnboardConfig(endpoint="my-copy"), answers, {}, result, dagster_run_id="fedcba98"
    )
    assert mlflow.MlflowClient(MlflowTracking(home=home).uri).get_run(again).data.tags["dagster.run_id"] == "fedcba98"


def test_the_mlflow_run_says_how_questions_were_chosen_and_why_the_asking_stopped(tmp_path: Path) -> None:
    import mlflow

    from locus_pipeline.defs.resources import MlflowTracking

    home = LocusHome(root=str(tmp_path))
    answers = pd.DataFrame(
        {
            "query_id": ["q1"],
            "benchmark": ["law"],
            "prompt": ["p"],
            "answer": ["(C)"],
            "letter": ["C"],
            "gold": ["C"],
            "score": [1.0],
            "reason": ["correct"],
            "cost_usd": [0.0],
        }
    )
    result = OnboardResult(
        model="my-copy",
        answers=1,
        asked_now=1,
        resumed=0,
        failed_calls=0,
        accuracy=1.0,
        cost_usd=0.0,
        stopped_by="until",
        seconds=1.0,
        choice="adaptive",
    )
    config = OnboardConfig(endpoint="my-copy", choice="adaptive", until=10.0)
    logged = log_to_mlflow(MlflowTracking(home=home), config, answers, {"stopped_by": "until"}, result)
    run = mlflow.MlflowClient(MlflowTracking(home=home).uri).get_run(logged)
    assert run.data.tags["locus/choice"] == "adaptive" and run.data.tags["locus/stopped_by"] == "until"
    assert run.data.params["choice"] == "adaptive" and float(run.data.params["until"]) == 10.0
