"""The commands that change a home's state outside a drop: `locus pool remove` (a run of pool_removal_job) and
`locus learn reset` (a reset appended to the outcome log every gateway reads); and `locus learn show`, which reads
what the gateways learned."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import dagster as dg

from locus_model.cli import EXIT_OK, fail
from locus_pipeline.instance import prepare_dagster_home

# ---------------------------------------------------------------------------------------------- pool


def add_pool(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "pool",
        help="change the pool: remove an onboarded model",
        description="Changes of LOCUS_HOME's pool, each a Dagster run that materializes "
        "model_embeddings (recorded in the home's Dagster instance, as in the UI).",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    r = actions.add_parser(
        "remove",
        help="remove an onboarded model from the pool (pool_removal_job)",
        description="Remove one onboarded model from the pool: a run of pool_removal_job (a materialization of "
        "model_embeddings, its checks, then the reports refresh under `make dev`). Its evaluations stay "
        "in incoming/accepted/ (the files as dropped) and onboarded/removed/; `locus serve` stops routing "
        "to it at its next reload. A model of the training source cannot be removed this way.",
    )
    r.add_argument("name", help="the model's name exactly as the pool's `model` column has it (GET /v1/models)")
    r.add_argument("--home", type=str, default=None, help="LOCUS_HOME (default: $LOCUS_HOME or <repo>/data)")
    r.set_defaults(run=run_pool_remove)


def remove_from_pool(name: str, instance, home=None):
    """Run pool_removal_job for ``name`` in this process on ``instance`` (the ExecuteInProcessResult), its resources
    bound to ``home`` (a LocusHome; None: $LOCUS_HOME's, as the code location binds them)."""
    # why: the Dagster definitions load only for locus pool remove, not at CLI start-up
    from locus_pipeline.definitions import defs
    from locus_pipeline.defs.assets.pool import REMOVAL_JOB
    from locus_pipeline.defs.resources import resources_for

    # why: the command prints what the run did (a failed check after the removal as one warning line), so Dagster's
    # console logs none of its events, not even the ERROR ones with their stack traces (the run's record keeps them)
    run_config = {
        "ops": {"model_embeddings": {"config": {"remove_model": name}}},
        "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
    }
    return (
        defs()
        .resolve_job_def(REMOVAL_JOB)
        .execute_in_process(
            instance=instance,
            run_config=run_config,
            raise_on_error=False,
            tags={"locus/model": name[:255]},
            resources=None if home is None else resources_for(home),
        )
    )


def run_pool_remove(args: argparse.Namespace) -> int:
    # why: the storage (pandas) loads only for locus pool remove, not at CLI start-up
    from locus_pipeline.storage import LocusHome

    home = LocusHome(root=str(args.home)) if args.home else None  # no process-wide LOCUS_HOME: the run's resources
    try:
        dagster_home = os.environ.get("DAGSTER_HOME") or str(
            prepare_dagster_home(None if home is None else Path(home.local_path))
        )
    except ValueError as err:
        return fail("pool remove", err)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = remove_from_pool(args.name, instance, home)
    written = [
        e.event_specific_data.materialization
        for e in result.get_asset_materialization_events()
        if e.event_specific_data.materialization.asset_key == dg.AssetKey("model_embeddings")
    ]
    if not written:  # refused before the pool changed: the error is the command's
        failures = [e.step_failure_data.error.message.strip() for e in result.get_step_failure_events()]
        return fail("pool remove", ValueError("; ".join(failures) or f"run {result.run_id} failed"))
    meta = {k: v.value for k, v in written[0].metadata.items()}
    print(
        f"removed {args.name!r} from the pool (run {result.run_id}): {meta['models']} models left; evaluations "
        f"kept in {meta['evaluations_kept']}"
    )
    # the removal is written: what failed after it (a check, a later step) is a warning about the new state
    for line in removal_warnings(result):
        print(f"locus pool remove: warning: {line}", file=sys.stderr)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- learn


def add_learn(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "learn",
        help="what locus serve learned from graded outcomes: show it, reset a model",
        description="What `locus serve` learns from the outcomes posted to it (docs/serve.md).",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    r = actions.add_parser(
        "reset",
        help="forget every outcome of one model (on every replica)",
        description="Forget what the gateways learned of MODEL from graded outcomes: a reset is appended to the home's "
        "outcome log (traffic/outcomes/), which every running `locus serve` on the home reads within its "
        "--poll-seconds and a gateway started later applies too; MODEL is then routed on the router's "
        "own estimate again. Where MODEL's pool row was relearned from its traffic, it is embedded again "
        "from its evaluations alone (traffic_evaluations and traffic_model_embedding materialized in the home's "
        "Dagster instance, as in the UI). Its outcomes stay in the log, before the reset.",
    )
    r.add_argument("model", help="the model's name exactly as the pool's `model` column has it (GET /v1/models)")
    r.add_argument("--home", type=str, default=None, help="LOCUS_HOME (default: $LOCUS_HOME or <repo>/data)")
    r.set_defaults(run=run_learn_reset)
    add_learn_show(actions)


# ---------------------------------------------------------------------------------------------- learn show

SHOW_LEVEL = 0.9  # the learned standing's interval


def add_learn_show(actions: argparse._SubParsersAction) -> None:
    s = actions.add_parser(
        "show",
        help="per model: outcomes counted, learned vs trained standing, last relearning",
        description="What the gateways learned from graded outcomes, as saved in the home's traffic/learner.json "
        "(written by `locus serve` as it learns, and when it stops): per model, the outcomes counted (discounted "
        "by the half-life), its standing as trained and as learned with a 90% interval, and when it was last "
        "relearned (traffic_model_embedding in the home's Dagster instance).",
    )
    s.add_argument("--home", type=str, default=None, help="LOCUS_HOME (default: $LOCUS_HOME or <repo>/data)")
    s.set_defaults(run=run_learn_show)


def learned_standing(state: dict, shares, level: float = SHOW_LEVEL) -> list[dict]:
    """Per model of a saved learner state (``state["learner"]``): outcomes counted, trained standing (its starting
    profiles over the groups' ``shares``), learned standing and its ``level`` interval (each cell's bounds moved as
    its mean is, over the shares). The one call of the library's Learner."""
    # why: numpy and the learner load with `locus learn show` only, not with every `locus` command's start-up
    import numpy as np

    from locus_model.learning import Learner
    from locus_model.stats.logistic import logit, sigmoid

    learner = Learner.from_state(state["learner"])
    w = np.asarray(shares, np.float64)
    shared = learner.posterior  # what every client's routing reads (a grader's outcomes, clients that agree)
    lo, hi = shared.interval(level)
    base = shared.unanswered_mean()
    start = logit(learner.start)
    counts = learner.counts()  # every client's graded answers, whether or not they moved the shared view
    rows = []
    for i, name in enumerate(learner.names):
        rows.append(
            {
                "model": name,
                "outcomes": float(counts[i]),
                "trained": float(learner.start[i] @ w),
                "learned": float(learner.profiles()[i] @ w),
                "lo": float(sigmoid(start[i] + logit(lo[i]) - logit(base[i])) @ w),
                "hi": float(sigmoid(start[i] + logit(hi[i]) - logit(base[i])) @ w),
            }
        )
    return rows


def last_relearnings(home) -> dict[str, float]:
    """{model key: time of its latest traffic_model_embedding materialization} in the home's Dagster instance."""
    with dg.DagsterInstance.from_config(str(prepare_dagster_home(Path(home.local_path)))) as instance:
        records = instance.fetch_materializations(dg.AssetKey("traffic_model_embedding"), limit=10_000).records
    latest: dict[str, float] = {}
    for record in records:
        key = record.partition_key
        if key is not None and record.timestamp > latest.get(key, 0.0):
            latest[key] = record.timestamp
    return latest


def run_learn_show(args: argparse.Namespace) -> int:
    # why: the storage (pandas), the checkpoint (torch) and the library load only for this command
    import time

    from locus_model.data.contract import safe_model_key
    from locus_pipeline.storage import LocusHome, StorageError

    home = LocusHome(root=str(args.home) if args.home else "")
    try:
        state = home.read_learner_state()
        if state is None:
            print(
                f"no learner state in {home.learner_state_path}: no `locus serve` has learned from graded outcomes on "
                "this home yet (POST /v1/outcomes; docs/serve.md)"
            )
            return EXIT_OK
        checkpoint = home.pool_checkpoint()
    except StorageError as err:
        return fail("learn show", err)
    if state.get("checkpoint_id") != checkpoint.checkpoint_id:
        print(
            f"the learner's state is of checkpoint {state.get('checkpoint_id')}, the pool's is "
            f"{checkpoint.checkpoint_id}: the next `locus serve` starts learning afresh"
        )
    relearned = last_relearnings(home)
    print(f"{'model':<40} {'outcomes':>9} {'trained':>8} {'learned [90% interval]':>26}  last relearning")
    for row in learned_standing(state, checkpoint.router.groups.shares()):
        when = relearned.get(safe_model_key(row["model"]))
        stamp = "never" if when is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))
        learned = f"{100 * row['learned']:.1f} [{100 * row['lo']:.1f}, {100 * row['hi']:.1f}]"
        print(f"{row['model']:<40} {row['outcomes']:>9.1f} {100 * row['trained']:>7.1f}% {learned:>26}  {stamp}")
    return EXIT_OK


def run_learn_reset(args: argparse.Namespace) -> int:
    # why: the storage (pandas) loads only for this command, not at CLI start-up
    from locus_model.data.contract import safe_model_key
    from locus_pipeline.storage import LocusHome, StorageError

    home = LocusHome(root=str(args.home) if args.home else "")
    try:
        names = set(home.read_pool()["model"].astype(str))
    except StorageError as err:
        return fail("learn reset", err)
    if args.model not in names:
        return fail(
            "learn reset",
            ValueError(
                f"{args.model!r} is not in the pool of {home.location} ({len(names)} "
                "models; GET /v1/models or the pool table's `model` column lists them)"
            ),
        )
    home.append_reset(args.model)
    print(
        f"reset {args.model!r}: appended to {home.traffic_folder('outcomes')}; every locus serve on this home "
        "routes it on the router's own estimate again within its --poll-seconds"
    )
    key = safe_model_key(args.model)
    if not home.table_path("traffic_evaluations", key).exists():
        return EXIT_OK  # never relearned: the pool row is the evaluations' already
    try:
        dagster_home = os.environ.get("DAGSTER_HOME") or str(prepare_dagster_home(Path(home.local_path)))
    except ValueError as err:
        return fail("learn reset", err)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = relearn(home, key, instance)
    if not result.success:
        failures = [e.step_failure_data.error.message.strip() for e in result.get_step_failure_events()]
        return fail(
            "learn reset", ValueError(f"the pool row of {args.model!r} was not embedded again: " + "; ".join(failures))
        )
    meta = {
        k: v.value for k, v in result.asset_materializations_for_node("traffic_model_embedding")[0].metadata.items()
    }
    print(
        f"the pool row of {args.model!r} is embedded again from its evaluations (run {result.run_id}): standing "
        f"{meta['standing_before']} -> {meta['standing_after']}; locus serve reloads the pool within a poll"
    )
    return EXIT_OK


def relearn(home, key: str, instance):
    """traffic_evaluations[key] then traffic_model_embedding[key] in this process on ``instance``, resources bound to
    ``home`` (after a reset: the row from the evaluations and what the traffic log holds since)."""
    # why: the Dagster definitions load only for this command, not at CLI start-up
    from locus_pipeline.defs.assets.traffic import traffic_evaluations, traffic_model_embedding
    from locus_pipeline.defs.partitions import traffic_models
    from locus_pipeline.defs.resources import resources_for

    if not instance.has_dynamic_partition(traffic_models.name, key):
        instance.add_dynamic_partitions(traffic_models.name, [key])
    return dg.materialize(
        [traffic_evaluations, traffic_model_embedding],
        partition_key=key,
        instance=instance,
        resources=resources_for(home),
        raise_on_error=False,
        tags={"locus/trigger": "learn-reset"},
    )


def removal_warnings(result) -> list[str]:
    """One line per failed check or failed step of a pool run that wrote its change, without the stack traces."""
    lines = []
    for check in result.get_asset_check_evaluations():
        if not check.passed:
            details = {k: v.value for k, v in check.metadata.items()}
            shown = ", ".join(
                f"{k}={details[k]}" for k in ("models_differing", "max_abs_diff_vs_tolerance", "scope") if k in details
            )
            lines.append(
                f"check {check.check_name} failed on the new pool ({shown or 'no details'}); see run "
                f"{result.run_id} in the Dagster UI"
            )
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error
        if error.cls_name == "DagsterAssetCheckFailedError":
            continue  # a blocking check's own step failure: said above
        first = (error.message.strip().splitlines() or [error.cls_name or "failed"])[0]
        lines.append(f"step {event.step_key} failed after the removal was written: {first}")
    return lines


__all__ = [
    "add_learn",
    "add_pool",
    "learned_standing",
    "remove_from_pool",
    "removal_warnings",
    "run_learn_reset",
    "run_learn_show",
    "run_pool_remove",
]
