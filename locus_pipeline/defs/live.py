"""Live onboarding as a Dagster job (``live_onboarding_job``, launchpad config below): ask an endpoint of the models
config MMLU-Pro questions, grade them, and leave the graded answers in the drop folder, whose
sensor onboards them (onboarding_job: the pool row, its check, its nearest models). Same steps as ``locus onboard``
(locus_pipeline/live/onboard.py)."""

import dagster as dg
from pydantic import Field

from locus_model.markdown import escape_frame
from locus_pipeline.defs.metadata import OWNERS
from locus_pipeline.storage import LocusHome


class LiveOnboardingConfig(dg.Config):
    """What ``locus onboard`` takes on its command line."""

    endpoint: str = Field(description="The models config entry to onboard (its name becomes the pool model's name).")
    models_config: str = Field(description="Path of the YAML or JSON models config (locus serve's --models-config).")
    budget: int = Field(default=64, description="Answers to collect.")
    max_cost: float = Field(default=0.0, description="USD: stop before the spend could pass it (0 = no limit).")
    concurrency: int = Field(default=8, description="Calls in flight at once.")
    retries: int = Field(default=2, description="Retries of a failed call (timeout, connection, 5xx / 429).")
    # the library's DEFAULT_CHOICE (locus_model.estimates.questions imports torch; the code location loads without it)
    choice: str = Field(default="random", description="random | adaptive: how each round's questions are chosen.")
    until: float = Field(default=0.0, description="Points: stop once every 90% interval is narrower (0 = at the budget).")


@dg.op(description="Ask the endpoint, grade, log to MLflow, and drop the graded answers for the onboarding "
                    "sensor; what was asked shows as an observation of onboarded_evaluations.")
def ask_and_drop(context: dg.OpExecutionContext, config: LiveOnboardingConfig, home: LocusHome) -> None:
    # why: torch and the gateway (FastAPI) stay out of the code location's load
    from locus_pipeline.live.onboard import OnboardConfig, OnboardError, onboard_endpoint, per_category
    from locus_pipeline.serve.config import read_models_config

    try:
        result, answers = onboard_endpoint(
            home, OnboardConfig(endpoint=config.endpoint, budget=config.budget, max_cost=config.max_cost or None,
                                concurrency=config.concurrency, retries=config.retries,
                                choice=config.choice, until=config.until or None, via_sensor=True),
            read_models_config(config.models_config), with_answers=True, dagster_run_id=context.run_id)
    except OnboardError as err:
        raise dg.Failure(description=str(err)) from err
    context.log_event(dg.AssetObservation(asset_key="onboarded_evaluations", description=(
        f"live answers of {result.model}: {result.answers}, dropped for onboarding as {result.evaluation_file}"),
        metadata={
        "model": result.model, "answers": result.answers, "resumed": result.resumed,
        "failed_calls": result.failed_calls, "accuracy": round(result.accuracy, 4),
        "cost_usd": round(result.cost_usd, 6), "stopped_by": result.stopped_by, "choice": result.choice,
        "per_category": dg.MetadataValue.md(escape_frame(per_category(answers)).to_markdown()),
        "evaluation_file": result.evaluation_file, "mlflow_run_id": result.mlflow_run_id or "",
    }))


@dg.job(description="Onboard a live OpenAI-compatible endpoint: MMLU-Pro questions -> graded answers -> the "
                    "drop folder (its sensor runs onboarding_job). Launchpad: ops.ask_and_drop.config.endpoint and "
                    "models_config.", tags={"locus/kind": "live-onboarding", "owner": OWNERS[0]})
def live_onboarding_job():
    ask_and_drop()
