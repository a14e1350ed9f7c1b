"""Runs whose process died: failed, their concurrency slots freed, and asked for again (a few times at most).

Dagster's run monitoring (dagster.yaml: ``run_monitoring``) fails a run that never starts and frees the pool slots
of runs that ended, but the default run launcher that ``dagster dev`` uses cannot check a started run's worker, so
a run whose process was killed (``kill -9`` of ``dagster dev``, the OOM killer) would stay STARTED for good and keep
the only ``model_embeddings`` slot. Every run worker records its pid ("Started process for run (pid: N)"); on this
one machine a pid that no longer exists, or that a process started after the run now holds (pids are reused
after a restart), is a run that will never finish: :func:`fail_dead_runs` fails it with
``dagster/failure_reason=UNEXPECTED_TERMINATION`` and frees its slots. The sensors call it each tick, and
:func:`retry_request` gives the run of a crashed run again (a new run key per attempt, so one retry per crash).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from dagster._core.events import JobFailureData, RunFailureReason

ACTIVE = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
CRASH_REASONS = ("UNEXPECTED_TERMINATION", "START_TIMEOUT", "RUN_WORKER_RESTART")  # not a step that failed
FAILURE_REASON_TAG = "dagster/failure_reason"
RANGE_START_TAG = "dagster/asset_partition_range_start"  # Dagster's tags of a run over a range of partitions
RANGE_END_TAG = "dagster/asset_partition_range_end"
RUN_KEY_TAG = "dagster/run_key"
ATTEMPT_TAG = "locus/attempt"
MAX_ATTEMPTS = 3  # a run that crashes this often is left failed (the tick says so)


def pid_alive(pid: int, *, started_by: float | None = None) -> bool:
    """Whether a process with this pid exists on this machine, is not a zombie and, with ``started_by`` (a Unix
    time), had started by then: a process that started later only reuses the pid of the one we look for."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True  # no /proc to tell more
    if fields[0] == "Z":
        return False
    if started_by is None:
        return True
    return process_start_time(int(fields[19])) <= started_by + 1.0  # /proc's start time is in clock ticks


def process_start_time(ticks_since_boot: int) -> float:
    """The Unix time of a process start given in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    boot = next(
        float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
    )
    return boot + ticks_since_boot / os.sysconf("SC_CLK_TCK")


def run_worker_pid(instance: dg.DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """(the pid the run's worker reported when it started, when it reported it), None when it reported none (e.g.
    an in-process run)."""
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.engine_event_data if entry.dagster_event else None
        pid = (data.metadata or {}).get("pid") if data is not None else None
        if pid is not None and str(pid.value).isdigit():
            return int(str(pid.value)), entry.timestamp
    return None


def fail_dead_runs(instance: dg.DagsterInstance, job_names: list[str]) -> list[str]:
    """Fail every STARTED run of these jobs whose worker process is gone, and free its concurrency slots; returns
    their run ids. Runs without a recorded pid are left alone (nothing tells whether they are alive)."""
    failed = []
    for name in job_names:
        for record in instance.get_run_records(dg.RunsFilter(job_name=name, statuses=[dg.DagsterRunStatus.STARTED])):
            run = record.dagster_run
            worker = run_worker_pid(instance, run.run_id)
            if worker is None or pid_alive(worker[0], started_by=worker[1]):
                continue
            pid = worker[0]
            instance.report_run_failed(
                run,
                f"the run's process (pid {pid}) is gone: it was killed or crashed "
                "(e.g. dagster dev was stopped with kill -9); failed so that its "
                "concurrency slot is freed and the run can be requested again",
                JobFailureData(error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION),
            )
            if instance.event_log_storage.supports_global_concurrency_limits:
                instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            failed.append(run.run_id)
    return failed


def crashed(run: dg.DagsterRun) -> bool:
    """A run that failed because its process died or never started, not because a step failed."""
    return run.status == dg.DagsterRunStatus.FAILURE and run.tags.get(FAILURE_REASON_TAG) in CRASH_REASONS


def base_run_key(run: dg.DagsterRun) -> str:
    return run.tags.get(RUN_KEY_TAG, "").split(":attempt-")[0]


def retry_request(run: dg.DagsterRun) -> dg.RunRequest | None:
    """The same run again (config, partition or partition range, tags) under the run key ``<key>:attempt-<n>``, or None
    after
    MAX_ATTEMPTS attempts."""
    attempt = int(run.tags.get(ATTEMPT_TAG, "1"))
    if attempt >= MAX_ATTEMPTS or not base_run_key(run):
        return None
    kept = (RANGE_START_TAG, RANGE_END_TAG)  # a run over a range of partitions: the same range again
    tags = {k: v for k, v in run.tags.items() if not k.startswith("dagster/") or k in kept}
    return dg.RunRequest(
        run_key=f"{base_run_key(run)}:attempt-{attempt + 1}",
        run_config=run.run_config,
        partition_key=run.tags.get("dagster/partition"),
        tags={**tags, ATTEMPT_TAG: str(attempt + 1), "locus/retry_of": run.run_id},
    )


def retries_of_crashed_runs(
    instance: dg.DagsterInstance, job_name: str, *, limit: int = 200
) -> tuple[list[dg.RunRequest], list[str]]:
    """(a retry of the newest run of every run key of ``job_name`` that crashed, notes for the tick). A run key
    whose newest run succeeded, failed in a step or is still going is not retried."""
    newest: dict[str, dg.DagsterRun] = {}
    for run in instance.get_runs(dg.RunsFilter(job_name=job_name), limit=limit):  # newest first
        key = base_run_key(run)
        if key:
            newest.setdefault(key, run)
    requests, notes = [], []
    for key, run in newest.items():
        if not crashed(run):
            continue
        request = retry_request(run)
        if request is None:
            notes.append(f"run {run.run_id[:8]} ({key}) crashed {MAX_ATTEMPTS} times; not retried again: see its logs")
        else:
            requests.append(request)
            notes.append(f"run {run.run_id[:8]} ({key}) died with its process: requested again ({request.run_key})")
    return requests, notes
