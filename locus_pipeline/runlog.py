"""The run lifecycle on the console: Dagster logs each run's start and end and each step's end at DEBUG, so an
INFO console (dagster.yaml ``python_log_level: INFO``) shows none of them. dagster.yaml adds one handler with this
filter: those events only, beside the INFO lines (no Dagster import: every process loading the instance reads it)."""

import logging

# (the run events keep their legacy PIPELINE_* values in the records); failures are ERROR: shown anyway
LIFECYCLE = frozenset(
    {
        "PIPELINE_START",
        "PIPELINE_SUCCESS",
        "PIPELINE_CANCELED",
        "RUN_START",
        "RUN_SUCCESS",
        "RUN_CANCELED",
        "STEP_SUCCESS",
    }
)


class RunLifecycleFilter(logging.Filter):
    """Pass the DEBUG records of run start/success/cancel and step success; drop everything else."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.INFO:
            return False  # the console logger prints those already
        event = (getattr(record, "dagster_meta", None) or {}).get("dagster_event")
        return getattr(event, "event_type_value", None) in LIFECYCLE


# A command's in-process run (locus pool remove, locus onboard): Dagster's event log stays in the run's record (the
# UI shows it), the terminal gets errors only and the command's own summary.
QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
