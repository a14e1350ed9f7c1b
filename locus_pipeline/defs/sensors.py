"""Sensors: the onboarding drop folder, and the report refresh after the pool changed.

``onboarding_drop_folder`` (every 2 s, running by default) takes complete files from LOCUS_HOME/incoming/,
validates each in one streamed pass, moves it to accepted/ or rejected/ (+ .reason.txt), adds one dynamic
partition per model and requests one onboarding run per (file, model). The cursor is the stem of the last
accepted file whose runs were requested; run_key = "<sha256 of the file>:<model key>", so the same bytes never
onboard twice. ``reports_after_pool_change`` requests one run of the analyses once the pool is newer than the
reports (the last report, analysis_reports, is older than the pool's latest materialization) and no onboarding,
rebuild or refresh is queued or running (so 50 onboarded models refresh once).
Both fail runs whose process died and request them again (locus_pipeline/runs.py), so a killed run neither holds
a concurrency slot nor blocks the reports for good.
"""

import time

import dagster as dg

from locus_pipeline.defs.checks import REJECTION_CHECK
from locus_pipeline.defs.jobs import locus_job, onboarding_job, pool_job, pool_removal_job, reports_refresh_job
from locus_pipeline.defs.partitions import onboarded_models
from locus_pipeline.runs import fail_dead_runs, retries_of_crashed_runs
from locus_pipeline.storage import LocusHome

MAX_FILES_PER_TICK = 20  # the rest waits for the next tick, so one tick stays well inside the sensor timeout
MAX_SECONDS_PER_TICK = 30.0
WATCHED_JOBS = [onboarding_job.name, locus_job.name, pool_job.name, pool_removal_job.name, reports_refresh_job.name]
ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def run_requests_for(manifest) -> tuple[list[dg.RunRequest], list[str]]:
    """(one RunRequest per model of an accepted file, the partition keys to add)."""
    requests, keys = [], []
    for entry in manifest.models:
        keys.append(entry.model_key)
        requests.append(
            dg.RunRequest(
                run_key=f"{manifest.sha256}:{entry.model_key}",
                partition_key=entry.model_key,
                run_config={"ops": {"onboarded_evaluations": {"config": {"accepted_file": manifest.stem, "model": entry.model}}}},
                tags={"locus/accepted_file": manifest.stem[:255], "locus/model": entry.model[:255], "locus/sha256": manifest.sha256[:16]},
            )
        )
    return requests, keys


REJECTIONS_ASSET = dg.AssetKey("onboarded_evaluations")  # where a rejected file shows: a failed check of it


def rejection(name: str, why: str, reason_file: str) -> dg.AssetCheckEvaluation:
    """A rejected file as a failed evaluation (severity WARN) of onboarded_evaluations' check REJECTION_CHECK: the
    asset's page (Checks) shows every rejection in amber with its reason, even in a tick that also requested runs
    for other files."""
    return dg.AssetCheckEvaluation(asset_key=REJECTIONS_ASSET, check_name=REJECTION_CHECK, passed=False,
                                   severity=dg.AssetCheckSeverity.WARN, description=f"rejected {name}: {why}"[:1000],
                                   metadata={"rejected_file": name, "reason": why, "reason_file": f"incoming/rejected/{reason_file}"})


def take_in(context: dg.SensorEvaluationContext, home: LocusHome, folder,
            rejected: list[dg.AssetCheckEvaluation] | None = None) -> list[str]:
    """Intake of the ready files (oldest first, bounded per tick); returns notes for the tick's message and
    appends one observation per rejected file to ``rejected``."""
    rejected = [] if rejected is None else rejected
    from locus_pipeline.intake import (changed_accepted_files, claimed_keys, in_progress_entries, intake_file, read_manifests,
                                       reason_summary, recover_orphans, reject_unusable, retake, scan_incoming,
                                       unusable_entries)

    notes = []
    for path, why in unusable_entries(folder):
        target = reject_unusable(folder, path, why)
        context.log.warning(f"REJECTED {path.name}: {why}")
        notes.append(f"rejected {path.name}: {why} (see rejected/{target.name}.reason.txt)")
        rejected.append(rejection(path.name, why, f"{target.name}.reason.txt"))
    manifests = read_manifests(folder)  # once per tick
    claimed = claimed_keys(home, folder, manifests)
    for item in recover_orphans(folder, claimed=claimed):
        notes.append(f"recovered {item.stored.name if item.stored else item.source.name}: {item.status}")
        if item.manifest is not None:
            claimed.update({m.model_key: m.model for m in item.manifest.models})
    for manifest in changed_accepted_files(folder, manifests):  # a writer kept writing in place after intake
        result = retake(folder, manifest, claimed=claimed)
        if result is None:
            notes.append(f"accepted/{manifest.stem} is still being written after intake; it is taken in again once it settles")
            continue
        context.log.warning(f"accepted/{manifest.stem} changed after intake ({manifest.rows} rows onboarded from it): "
                            f"taken in again: {result.status} (see accepted/{manifest.stem}.changed.txt)")
        notes.append(f"{manifest.original_name} changed after intake: taken in again, {result.status}"
                     + (f": {reason_summary(result.reason)}" if result.reason else ""))
        if result.manifest is not None:
            claimed.update({m.model_key: m.model for m in result.manifest.models})
        if result.status == "rejected" and result.stored is not None:
            rejected.append(rejection(manifest.original_name, reason_summary(result.reason), f"{result.stored.name}.reason.txt"))
    waiting = in_progress_entries(folder)
    if waiting:
        notes.append(f"{len(waiting)} file(s) with in-progress names are read once renamed (names starting with '.' or "
                     f"ending in .part, .tmp, ...): {', '.join(p.name for p in waiting[:5])}")
    ready, settling = scan_incoming(folder)
    if settling:
        notes.append(f"waiting for {len(settling)} file(s) to settle: {', '.join(p.name for p in settling[:5])}")
    start = time.monotonic()
    for n, path in enumerate(ready):
        if n >= MAX_FILES_PER_TICK or time.monotonic() - start > MAX_SECONDS_PER_TICK:
            notes.append(f"{len(ready) - n} file(s) left for the next tick")
            break
        try:
            result = intake_file(path, folder, claimed=claimed)
        except OSError as err:  # unreadable (permissions), vanished, disk full: say so, keep going, retry next tick
            context.log.warning(f"cannot take {path.name} in: {err}")
            notes.append(f"cannot read {path.name} ({err.strerror or err}); check its permissions; retrying next tick")
            continue
        if result.status == "rejected":
            context.log.warning(f"REJECTED {path.name} -> rejected/{result.stored.name}\n{result.reason}")
            notes.append(f"rejected {path.name}: {reason_summary(result.reason)} (see rejected/{result.stored.name}.reason.txt)")
            rejected.append(rejection(path.name, reason_summary(result.reason), f"{result.stored.name}.reason.txt"))
        elif result.status == "duplicate":
            context.log.info(f"{path.name}: same bytes as accepted/{result.manifest.duplicate_of}; nothing to onboard")
            notes.append(f"{path.name} was already onboarded (accepted/{result.manifest.duplicate_of}); nothing to do")
        elif result.status == "changed":
            notes.append(f"{path.name}: {result.reason}" if result.reason else f"{path.name} changed while being read; retrying next tick")
        else:
            claimed.update({m.model_key: m.model for m in result.manifest.models})
            models = ", ".join(f"{m.model} ({m.evaluations})" for m in result.manifest.models[:10])
            context.log.info(f"accepted {path.name} -> accepted/{result.stored.name}: {result.manifest.rows} rows; {models}")
    return notes


@dg.sensor(
    job=onboarding_job,
    minimum_interval_seconds=2,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Drop folder LOCUS_HOME/incoming/: new complete evaluation files -> one onboarding run per model (docs/onboarding.md).",
)
def onboarding_drop_folder(context: dg.SensorEvaluationContext, home: LocusHome) -> dg.SensorResult | dg.SkipReason:
    from locus_pipeline.intake import DropFolder, manifest_stems, read_manifest

    folder = DropFolder(home).ensure()
    notes: list[str] = []
    rejected: list[dg.AssetCheckEvaluation] = []  # shown on onboarded_evaluations' page, whatever else the tick does
    with folder.intake_lock() as mine:
        if mine:
            notes += take_in(context, home, folder, rejected)
        else:
            notes.append("an earlier tick is still taking files in; waiting for it")

    cursor = context.cursor or ""
    pending = [s for s in manifest_stems(folder) if s > cursor]
    if pending and not home.has_pool():
        notes.append(f"{len(pending)} accepted file(s) wait for the model embedding pool: materialize locus_job first")
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(notes)), asset_events=rejected) if rejected else dg.SkipReason("; ".join(notes))
    requests, keys = [], []
    for stem in pending:
        r, k = run_requests_for(read_manifest(folder, stem))
        requests += r
        keys += k
    if context.instance is not None:  # an onboarding whose process died is failed and requested again
        for run_id in fail_dead_runs(context.instance, WATCHED_JOBS):
            notes.append(f"run {run_id[:8]} had lost its process: marked failed, its concurrency slot freed")
        retries, retry_notes = retries_of_crashed_runs(context.instance, onboarding_job.name)
        requests += retries
        notes += retry_notes
    for note in notes:
        context.log.info(note)
    if not requests:
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(notes) or "no new files in incoming/"), asset_events=rejected,
                               cursor=pending[-1] if pending else (cursor or None))
    new_keys = sorted(set(keys) - set(context.instance.get_dynamic_partitions(onboarded_models.name))) if context.instance else sorted(set(keys))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[onboarded_models.build_add_request(new_keys)] if new_keys else [],
        asset_events=rejected,
        cursor=pending[-1] if pending else (cursor or None),  # retries only: the cursor stays
    )


REPORTS_DONE = dg.AssetKey("analysis_reports")  # the last asset of a refresh: it follows every report


def latest_pool_and_reports(instance: dg.DagsterInstance):
    """(the pool's latest materialization record, the reports index's), either None when never materialized. The
    reports follow the pool when the index's storage id is the larger: a refresh killed or failed half-way (after
    test_query_predictions, before the index) leaves them behind, so the sensor asks again."""
    return tuple(next(iter(instance.fetch_materializations(key, limit=1).records), None)
                 for key in (dg.AssetKey("model_embeddings"), REPORTS_DONE))


def reports_lag(instance: dg.DagsterInstance) -> str:
    """Why the pool or the reports may still change ("" when the reports follow the pool and nothing that changes
    either is queued or running): what a user or a script waits on before reading the reports."""
    active = {job.name: instance.get_runs_count(dg.RunsFilter(job_name=job.name, statuses=ACTIVE))
              for job in (onboarding_job, locus_job, pool_job, pool_removal_job, reports_refresh_job)}
    if any(active.values()):
        return "runs queued or running: " + ", ".join(f"{n} {name}" for name, n in active.items() if n)
    pool, reports = latest_pool_and_reports(instance)
    if pool is not None and (reports is None or reports.storage_id < pool.storage_id):
        return "the reports are older than the pool (reports_after_pool_change requests the refresh)"
    return ""


@dg.sensor(
    job=reports_refresh_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="When the pool is newer than the reports (onboarding, a rebuild) and nothing that changes either is "
                "queued or running, refresh the analyses once.",
)
def reports_after_pool_change(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    instance = context.instance
    pool, reports = latest_pool_and_reports(instance)
    if pool is None:
        return dg.SkipReason("no pool yet")
    if reports is not None and reports.storage_id > pool.storage_id:
        return dg.SkipReason("the reports are up to date with the pool (refreshed after its last change)")
    dead = fail_dead_runs(instance, WATCHED_JOBS)  # a killed run is not waited on
    died = f" ({len(dead)} run(s) whose process died were marked failed)" if dead else ""
    active = {job.name: instance.get_runs_count(dg.RunsFilter(job_name=job.name, statuses=ACTIVE))
              for job in (onboarding_job, locus_job, pool_job, pool_removal_job, reports_refresh_job)}
    key = f"reports-for-pool-{pool.storage_id}"
    request = dg.RunRequest(run_key=key, tags={"locus/trigger": "pool-change"})
    if context.cursor and int(context.cursor) >= pool.storage_id:
        if active[reports_refresh_job.name]:
            return dg.SkipReason(f"a reports refresh is running ({active[reports_refresh_job.name]} "
                                 f"{reports_refresh_job.name} run(s)); the reports follow the pool once it ends")
        retries = [r for r in retries_of_crashed_runs(instance, reports_refresh_job.name)[0] if r.run_key.startswith(f"{key}:")]
        if not retries:
            last = next(iter(instance.get_runs(dg.RunsFilter(job_name=reports_refresh_job.name, tags={"dagster/run_key": key}), limit=1)), None)
            if last is not None and last.status == dg.DagsterRunStatus.FAILURE:
                return dg.SkipReason(f"the refresh for this pool failed (run {last.run_id[:8]}): see its logs; the reports "
                                     "stay behind the pool until the next pool change or a launch of reports_refresh_job")
            return dg.SkipReason("a refresh for this pool was already requested" + died)
        request = retries[0]  # that refresh died with its process: once more
    for name, n in active.items():
        if n:
            return dg.SkipReason(f"waiting for {n} {name} run(s) to finish before refreshing the reports" + died)
    return dg.SensorResult(run_requests=[request], cursor=str(pool.storage_id))
