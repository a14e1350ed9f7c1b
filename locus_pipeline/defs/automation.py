"""The project's automation sensor: the declarative automation conditions (today ``traffic_model_embedding``'s, after
new graded traffic: defs/assets/traffic.py) are evaluated by this sensor, running from the daemon's start.

Dagster creates a ``default_automation_condition_sensor`` for assets that no automation sensor targets, stopped by
default (Dagster 1.13): under `make dev` relearning would never follow ``traffic_evaluations``. This sensor targets
every asset, so no default one is made, and is RUNNING by default (docs/deploy.md). What was materialized before its
first evaluation is caught up by the condition itself (traffic.AFTER_NEW_TRAFFIC, its initial-evaluation term).
"""

import dagster as dg

AUTOMATION_SENSOR = "locus_automation"
AUTOMATION_INTERVAL_S = 30  # seconds between evaluations (Dagster's default for automation sensors)

locus_automation = dg.AutomationConditionSensorDefinition(
    AUTOMATION_SENSOR,
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=AUTOMATION_INTERVAL_S,
    description="Evaluates the project's automation conditions (relearning after new graded traffic); running by "
    "default, so relearning follows traffic_evaluations under make dev and in every deployment with a daemon.",
)
