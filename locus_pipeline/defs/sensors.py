"""Sensors: the onboarding drop folder, the report refresh after the pool changed, and locus serve's graded traffic.

``onboarding_drop_folder`` (every 2 s, running by default) takes complete files from LOCUS_HOME/incoming/,
validates each in one streamed pass, moves it to accepted/ or rejected/ (+ .reason.txt), adds one dynamic
partition per model and requests onboarding runs over the range of their models' partitions: one per file
(run_requests_for), the small files of a tick sharing one (coalesced_requests; the queue's order:
SMALL_DROP_MODELS). The cursor is the stem of the last accepted file whose runs were requested; run_key = "<sha256
of the file>", so the same bytes never onboard twice. ``reports_after_pool_change`` requests one run of the analyses
once the pool is newer than the reports (the last report, analysis_reports, is older than the pool's latest
materialization) and no onboarding, rebuild or refresh is queued or running (so 50 onboarded models refresh once).
``traffic_sensor`` (every 30 s) reads the outcome log from its cursor and requests ``traffic_evaluations[key]`` for
a model that gained ``MIN_NEW_ANSWERS`` graded answers (defs/assets/traffic.py). The first two fail runs whose
process died and request them again (locus_pipeline/runs.py), so a killed run neither holds
a concurrency slot nor blocks the reports for good.
"""

import hashlib
import json
from collections.abc import Sequence

import dagster as dg

from locus_model.data.contract import safe_model_key
from locus_pipeline.defs.assets import traffic
from locus_pipeline.defs.checks import REJECTION_CHECK
from locus_pipeline.defs.jobs import locus_job, onboarding_job, pool_job, pool_removal_job, reports_refresh_job
from locus_pipeline.defs.partitions import (
    ONBOARDED_MODELS,
    TRAFFIC_MODELS,
    key_ranges,
    onboarded_models,
    range_tags,
    traffic_models,
)
from locus_pipeline.defs.resources import DropFolderIntake
from locus_pipeline.runs import fail_dead_runs, retries_of_crashed_runs
from locus_pipeline.storage import LocusHome
from locus_pipeline.storage.traffic import before_reset

WATCHED_JOBS = [onboarding_job.name, locus_job.name, pool_job.name, pool_removal_job.name, reports_refresh_job.name]

# The onboarding queue: a drop of at most SMALL_DROP_MODELS models is "small", a larger one
# "large". Large drops each get their own run, at most one of them running at a time (dagster.yaml's
# tag_concurrency_limits on DROP_SIZE_TAG), dequeued after small ones (dagster/priority); the small drops of a tick
# share one run, and while a small run is queued (not started) the sensor requests none: the drops that arrive
# meanwhile join one run once it starts. So a good drop waits behind the runs already started and at most one
# queued run, never behind a queue of many, and never behind a large drop for a slot.
SMALL_DROP_MODELS = 16
DROP_SIZE_TAG = "locus/drop_size"
# the run coordinator's queue only: a NOT_STARTED run (an in-process `locus onboard` killed before its start) never
# moves
QUEUED = [dg.DagsterRunStatus.QUEUED]


def lane_tags(models: int) -> dict[str, str]:
    """The queue tags of an onboarding run of ``models`` models: its lane and its priority (higher is dequeued
    first)."""
    small = models <= SMALL_DROP_MODELS
    return {DROP_SIZE_TAG: "small" if small else "large", "dagster/priority": "1" if small else "0"}


ACTIVE = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def run_requests_for(manifest, known: Sequence[str] = ()) -> tuple[list[dg.RunRequest], list[str]]:
    """(the onboarding runs of an accepted file, its model keys that are not partitions yet: ``known`` are the
    partitions in Dagster's order, which is insertion order).

    One run per file covers all its models: a run over a range of partitions (Dagster's range tags, as a
    single-run backfill launches it), each model still its own partition with its own materializations and check
    results. Not a backfill (RunRequest.for_asset_graph_subset): that carries neither run config (the accepted
    file) nor a run key (exactly once per file), and needs the backfill daemon that in-process runs lack. A file
    whose keys are not one range (some of its models were onboarded before, among others) gets one run per range,
    keyed "<sha256>:<first key>..<last key>" (keys never hold ':' or '..')."""
    keys = list(dict.fromkeys(entry.model_key for entry in manifest.models))
    seen = set(known)  # once, not per key: a file of 1,000 models beside 10,000 partitions
    new = [key for key in keys if key not in seen]
    ranges = key_ranges(keys, [*known, *new])
    tags = {"locus/accepted_file": manifest.stem[:255], "locus/sha256": manifest.sha256[:16], **lane_tags(len(keys))}
    requests = [
        dg.RunRequest(
            run_key=manifest.sha256 if len(ranges) == 1 else f"{manifest.sha256}:{first}..{last}",
            run_config={"ops": {"onboarded_evaluations": {"config": {"accepted_file": manifest.stem}}}},
            tags={**tags, **range_tags(first, last)},
        )
        for first, last in ranges
    ]
    return requests, new


def coalesced_requests(manifests, known: Sequence[str] = ()) -> tuple[list[dg.RunRequest], list[str]]:
    """(the onboarding runs of a tick's accepted files, the model keys that are not partitions yet): the small files
    (SMALL_DROP_MODELS) whose models are all new share one run over the range of their models, keyed by their
    sha256s; every other file gets its own runs (:func:`run_requests_for`)."""
    small = [m for m in manifests if len({e.model_key for e in m.models}) <= SMALL_DROP_MODELS]
    keys = list(dict.fromkeys(e.model_key for m in small for e in m.models))
    seen = set(known) | {e.model_key for m in manifests if m not in small for e in m.models}
    if len(small) < 2 or any(key in seen for key in keys):  # one file, or models known or in a large file: a run each
        small = []
    requests: list[dg.RunRequest] = []
    new: list[str] = []  # model keys that are not partitions yet
    for manifest in (m for m in manifests if m not in small):
        r, n = run_requests_for(manifest, [*known, *new])
        requests, new = requests + r, new + n
    if small:
        ((first, last),) = key_ranges(keys, [*known, *new, *keys])
        stems = [m.stem for m in small]
        requests.append(
            dg.RunRequest(
                run_key=hashlib.sha256("+".join(m.sha256 for m in small).encode()).hexdigest(),
                run_config={"ops": {"onboarded_evaluations": {"config": {"accepted_files": stems}}}},
                tags={
                    "locus/accepted_file": f"{stems[0]} and {len(stems) - 1} more"[:255],
                    "locus/accepted_files": str(len(stems)),
                    **lane_tags(len(keys)),
                    **range_tags(first, last),
                },
            )
        )
        new += keys
    return requests, new


def queued_small_runs(instance: dg.DagsterInstance) -> int:
    """Onboarding runs of small drops requested but not started."""
    return instance.get_runs_count(
        dg.RunsFilter(job_name=onboarding_job.name, statuses=QUEUED, tags={DROP_SIZE_TAG: "small"})
    )


REJECTIONS_ASSET = dg.AssetKey("onboarded_evaluations")  # where a rejected file shows: a failed check of it


def rejection(item) -> dg.AssetCheckEvaluation:
    """A rejection (intake's Rejection) as a failed evaluation (severity WARN) of onboarded_evaluations' check
    REJECTION_CHECK: the asset's page (Checks) shows every rejection in amber with its reason, even in a tick that
    also requested runs for other files."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_pipeline.intake import printable

    return dg.AssetCheckEvaluation(
        asset_key=REJECTIONS_ASSET,
        check_name=REJECTION_CHECK,
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"rejected {printable(item.file)}: {item.summary()}"[:1000],
        metadata={"rejected_file": item.file, "reason": item.summary(), "reason_file": f"incoming/{item.reason_file}"},
    )


@dg.sensor(
    job=onboarding_job,
    minimum_interval_seconds=2,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Drop folder LOCUS_HOME/incoming/: new complete evaluation files -> onboarding runs over their models: "
    "one per file of more than 16 models, one for the small files of a tick (docs/onboarding.md).",
)
def onboarding_drop_folder(
    context: dg.SensorEvaluationContext, home: LocusHome, intake: DropFolderIntake
) -> dg.SensorResult | dg.SkipReason:
    """Publishes one intake tick (locus_pipeline.intake.intake_tick): its rejections as failed checks, run requests
    for the accepted files after the cursor."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_pipeline.intake import DropFolder, intake_tick

    outcome = intake_tick(DropFolder(home), limits=intake.limits())
    rejected = [rejection(item) for item in outcome.rejections]
    for item in outcome.rejections:
        context.log.warning(f"REJECTED {item.file!r}: {item.summary()} (see {item.reason_file})")
    notes = [outcome.message()] if outcome.message() else []
    cursor = context.cursor or ""
    pending = outcome.pending(cursor) if outcome.took_in else []  # the lock's holder publishes its own files
    if pending and not home.has_pool():
        notes.append(f"{len(pending)} accepted file(s) wait for the model embedding pool: materialize locus_job first")
        return (
            dg.SensorResult(skip_reason=dg.SkipReason("; ".join(notes)), asset_events=rejected)
            if rejected
            else dg.SkipReason("; ".join(notes))
        )
    waiting = queued_small_runs(context.instance) if context.instance is not None and pending else 0
    if waiting:  # the drops wait for it to start, then share one run (SMALL_DROP_MODELS): the cursor stays
        notes.append(
            f"{len(pending)} accepted file(s) wait until the queued onboarding run starts; then they share one run"
        )
        pending = []
    known = list(context.instance.get_dynamic_partitions(ONBOARDED_MODELS)) if context.instance else []
    if context.instance is not None and pending:  # one file, one run: `locus onboard` may have run it already
        ran = [
            m
            for m in pending
            if any(
                context.instance.get_runs(dg.RunsFilter(tags=tags), limit=1)
                for tags in (
                    {"dagster/run_key": m.sha256},
                    {"locus/sha256": m.sha256[:16], "locus/accepted_file": m.stem[:255]},
                )
            )
        ]
        if ran:
            notes.append(
                f"{len(ran)} onboarding(s) already run by another publisher (locus onboard): not requested again"
            )
    else:
        ran = []
    requests, new_keys = coalesced_requests([m for m in pending if m not in ran], known)
    if context.instance is not None:  # an onboarding whose process died is failed and requested again
        for run_id in fail_dead_runs(context.instance, WATCHED_JOBS):
            notes.append(f"run {run_id[:8]} had lost its process: marked failed, its concurrency slot freed")
        retries, retry_notes = retries_of_crashed_runs(context.instance, onboarding_job.name)
        requests += retries
        notes += retry_notes
    for note in notes:
        context.log.info(note)
    new_cursor = pending[-1].stem if pending else (cursor or None)  # (files held back: the cursor stays before them)
    if not requests:
        return dg.SensorResult(
            skip_reason=dg.SkipReason("; ".join(notes) or "no new files in incoming/"),
            asset_events=rejected,
            cursor=new_cursor,
        )
    return dg.SensorResult(
        run_requests=requests,
        # in this order: a file's new keys are one range of the partitions (Dagster appends them as given)
        dynamic_partitions_requests=[onboarded_models.build_add_request(new_keys)] if new_keys else [],
        asset_events=rejected,
        cursor=new_cursor,  # retries only: the cursor stays
    )


REPORTS_DONE = dg.AssetKey("analysis_reports")  # the last asset of a refresh: it follows every report


def latest_pool_and_reports(instance: dg.DagsterInstance):
    """(the pool's latest materialization record, the reports index's), either None when never materialized. The
    reports follow the pool when the index's storage id is the larger: a refresh killed or failed half-way (after
    test_query_predictions, before the index) leaves them behind, so the sensor asks again."""
    return tuple(
        next(iter(instance.fetch_materializations(key, limit=1).records), None)
        for key in (dg.AssetKey("model_embeddings"), REPORTS_DONE)
    )


def reports_lag(instance: dg.DagsterInstance) -> str:
    """Why the pool or the reports may still change ("" when the reports follow the pool and nothing that changes
    either is queued or running): what a user or a script waits on before reading the reports."""
    active = {
        job.name: instance.get_runs_count(dg.RunsFilter(job_name=job.name, statuses=ACTIVE))
        for job in (onboarding_job, locus_job, pool_job, pool_removal_job, reports_refresh_job)
    }
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
    active = {
        job.name: instance.get_runs_count(dg.RunsFilter(job_name=job.name, statuses=ACTIVE))
        for job in (onboarding_job, locus_job, pool_job, pool_removal_job, reports_refresh_job)
    }
    key = f"reports-for-pool-{pool.storage_id}"
    request = dg.RunRequest(run_key=key, tags={"locus/trigger": "pool-change"})
    if context.cursor and int(context.cursor) >= pool.storage_id:
        if active[reports_refresh_job.name]:
            return dg.SkipReason(
                f"a reports refresh is running ({active[reports_refresh_job.name]} "
                f"{reports_refresh_job.name} run(s)); the reports follow the pool once it ends"
            )
        retries = [
            r
            for r in retries_of_crashed_runs(instance, reports_refresh_job.name)[0]
            if r.run_key is not None and r.run_key.startswith(f"{key}:")  # a retry always has its run key
        ]
        if not retries:
            last = next(
                iter(
                    instance.get_runs(
                        dg.RunsFilter(job_name=reports_refresh_job.name, tags={"dagster/run_key": key}), limit=1
                    )
                ),
                None,
            )
            if last is not None and last.status == dg.DagsterRunStatus.FAILURE:
                return dg.SkipReason(
                    f"the refresh for this pool failed (run {last.run_id[:8]}): see its logs; the reports "
                    "stay behind the pool until the next pool change or a launch of reports_refresh_job"
                )
            return dg.SkipReason("a refresh for this pool was already requested" + died)
        request = retries[0]  # that refresh died with its process: once more
    for name, n in active.items():
        if n:
            return dg.SkipReason(f"waiting for {n} {name} run(s) to finish before refreshing the reports" + died)
    return dg.SensorResult(run_requests=[request], cursor=str(pool.storage_id))


@dg.sensor(
    asset_selection=dg.AssetSelection.assets("traffic_evaluations"),
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="locus serve's outcome log (LOCUS_HOME/traffic/outcomes/): a pool model that gained enough graded "
    "answers -> its traffic_evaluations partition (traffic_model_embedding follows by its automation condition: "
    "when that partition is newly updated).",
)
def traffic_sensor(context: dg.SensorEvaluationContext, home: LocusHome) -> dg.SensorResult | dg.SkipReason:
    """Reads the outcome log from the cursor's offsets, counts graded answers per model since its last request
    (a reset starts the count again: what was written before it, by the log's positions, whatever order the
    segments are read in) and requests ``traffic_evaluations[key]`` for each model past MIN_NEW_ANSWERS whose new
    answers can count for everyone (storage/traffic.py ``shared_evidence``): a grader's among them, or two clients'
    (one client alone never starts a relearning, whatever it posts). Models not in the pool are never counted (no
    partition, no run)."""

    state = json.loads(context.cursor) if context.cursor else {"offsets": {}, "since": {}, "total": {}}
    tail = home.traffic_tail("outcomes", state["offsets"])
    since, total = state["since"], state["total"]
    # per model since its last request: whether a grader graded it, and which other clients did (by credential)
    graded, clients = state.get("graded", {}), {n: set(c) for n, c in state.get("clients", {}).items()}
    read = [(segment, end, record) for segment, end, record in tail.read()]
    resets: dict[str, list[dict]] = {}
    for _, _, record in read:
        if "reset" in record:
            resets.setdefault(str(record["reset"]), []).append(record)
            since[str(record["reset"])] = 0
            graded.pop(str(record["reset"]), None)
            clients.pop(str(record["reset"]), None)
    counted = any("model" in r and "reset" not in r for _, _, r in read)
    pool = (
        set(home.read_table("model_embeddings", columns=["model"])["model"].astype(str))
        if counted and home.has_pool()
        else set()
    )
    for segment, end, record in read:
        if "reset" in record or "model" not in record:  # posted outcomes and a dropped file's rows name the model
            continue
        name = str(record["model"])
        if name not in pool:
            continue
        at = {"_at": (segment, end), "time": float(record.get("time", 0.0))}
        if any(before_reset(at, reset) for reset in resets.get(name, ())):
            continue  # graded before a reset read in this same tick (its segment may be read after this one)
        since[name], total[name] = since.get(name, 0) + 1, total.get(name, 0) + 1
        if record.get("grader", True):  # a record without the flag: a gateway without credentials, the operator's
            graded[name] = True
        elif len(clients.setdefault(name, set())) < 2:
            clients[name].add(str(record.get("client", "")))
    due = sorted(
        name
        for name, n in since.items()
        if n >= traffic.MIN_NEW_ANSWERS and (graded.get(name) or len(clients.get(name, ())) >= 2)
    )
    known = set(context.instance.get_dynamic_partitions(TRAFFIC_MODELS)) if context.instance else set()
    keys = {name: safe_model_key(name) for name in due}
    cursor = json.dumps(
        {
            "offsets": tail.offsets,
            "since": {n: (0 if n in keys else c) for n, c in since.items()},
            "total": total,
            "graded": {n: g for n, g in graded.items() if n not in keys},
            "clients": {n: sorted(c) for n, c in clients.items() if n not in keys},
        }
    )
    if not due:
        return dg.SensorResult(
            skip_reason=dg.SkipReason(
                f"no model has {traffic.MIN_NEW_ANSWERS} new graded answers yet that a grader or two clients gave"
            ),
            cursor=cursor,
        )
    new = [keys[n] for n in due if keys[n] not in known]
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                partition_key=keys[n],
                run_key=f"traffic-{keys[n]}-{total[n]}",
                tags={"locus/model": n[:255], "locus/trigger": "traffic"},
            )
            for n in due
        ],
        dynamic_partitions_requests=[traffic_models.build_add_request(new)] if new else [],
        cursor=cursor,
    )
