"""Live onboarding as a Dagster job (``live_onboarding_job``, launchpad config below): ask an endpoint of the models
config MMLU-Pro questions, grade them, and hand the graded answers to the drop folder's intake, whose sensor
requests their onboarding run (onboarding_job: the pool row, its check, its nearest models). Same steps as ``locus
onboard`` (locus_pipeline/live/onboard.py); the options are declared once (locus_pipeline/live/options.py)."""

from dataclasses import MISSING
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field, create_model

from locus_model.markdown import escape_frame
from locus_pipeline.defs.metadata import OWNERS
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.live.options import config_from, options
from locus_pipeline.storage import LocusHome


def _config_fields() -> dict:
    """The run config's fields: every live onboarding option (locus_pipeline.live.options, described by its help)
    and the models config it reads."""
    fields: dict[str, tuple[object, Any]] = {  # name -> (its type, its pydantic Field)
        "models_config": (
            str,
            Field(description="Path of the YAML or JSON models config (locus serve's --models-config)."),
        )
    }
    for name, kind, default, help in options():
        fields[name] = (
            (kind, Field(description=help))
            if default is MISSING
            else (kind | None if default is None else kind, Field(default=default, description=help))
        )
    return fields


if TYPE_CHECKING:  # the model built below, as the checker can see it: the op reads models_config by name, the
    # options' fields through model_dump()

    class LiveOnboardingConfig(dg.Config):
        models_config: str

        def __init__(self, **values: Any) -> None: ...

else:
    LiveOnboardingConfig = create_model(
        "LiveOnboardingConfig",
        __base__=dg.Config,
        __module__=__name__,
        __doc__="What ``locus onboard`` takes on its command line.",
        **_config_fields(),
    )


@dg.op(
    description="Ask the endpoint, grade, log to MLflow, and hand the graded answers to the drop folder's intake; "
    "its sensor requests the onboarding run; what was asked shows as an observation of "
    "onboarded_evaluations."
)
def ask_and_drop(
    context: dg.OpExecutionContext, config: LiveOnboardingConfig, home: LocusHome, mlflow: MlflowTracking
) -> None:
    # why: torch and the gateway (FastAPI) stay out of the code location's load
    from locus_pipeline.live.onboard import OnboardError, onboard_endpoint, per_category
    from locus_pipeline.serve.config import read_models_config

    try:
        result, answers = onboard_endpoint(
            home,
            config_from(config.model_dump()),
            read_models_config(config.models_config),
            tracking=mlflow,
            with_answers=True,
            dagster_run_id=context.run_id,
        )
    except (OnboardError, TimeoutError) as err:
        raise dg.Failure(description=str(err)) from err
    context.log_event(
        dg.AssetObservation(
            asset_key="onboarded_evaluations",
            description=(
                f"live answers of {result.model}: {result.answers}, taken in as {result.evaluation_file}; the "
                "drop-folder sensor requests its onboarding run"
            ),
            metadata={
                "model": result.model,
                "answers": result.answers,
                "resumed": result.resumed,
                "failed_calls": result.failed_calls,
                "accuracy": round(result.accuracy, 4),
                "cost_usd": round(result.cost_usd, 6),
                "stopped_by": result.stopped_by,
                "choice": result.choice,
                "per_category": dg.MetadataValue.md(escape_frame(per_category(answers)).to_markdown()),
                "evaluation_file": result.evaluation_file,
                "mlflow_run_id": result.mlflow_run_id or "",
            },
        )
    )


@dg.job(
    description="Onboard a live OpenAI-compatible endpoint: MMLU-Pro questions -> graded answers -> the "
    "drop folder's intake (its sensor runs onboarding_job). Launchpad: "
    "ops.ask_and_drop.config.endpoint and models_config.",
    tags={"locus/kind": "live-onboarding", "owner": OWNERS[0]},
)
def live_onboarding_job():
    ask_and_drop()
