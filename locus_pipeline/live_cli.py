"""``locus replay`` and ``locus onboard`` (registered in locus_pipeline/cli.py), and the onboarding run that
``locus onboard`` starts in this process (:func:`run_onboarding`). A module of the command line's rank: it loads
the Dagster definitions, which locus_pipeline/live/ (the asking and grading, called by the definitions) never does."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from locus_model.cli import EXIT_OK, fail
from locus_pipeline.live.options import add_options, config_from


def add_replay(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="an OpenAI-compatible endpoint answering MMLU-Pro questions as a recorded model did",
        description="Serve POST /v1/chat/completions answering each MMLU-Pro question (a prompt of locus onboard) with "
        "the letter the recorded model NAME gave (data/mmlu-pro/answers.parquet), e.g. 'The answer is "
        "(C).'; any other prompt gets a 400. For tests and demos of locus onboard.",
    )
    p.add_argument("--model", required=True, help="one of the 29 MMLU-Pro models (data/mmlu-pro/models.csv)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.set_defaults(run=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    # why: FastAPI and the answers table load only for locus replay, not at CLI start-up
    from locus_pipeline.live.replay import replay

    try:
        replay(args.model, host=args.host, port=args.port)
    except ValueError as err:
        return fail("replay", err)
    return EXIT_OK


def add_onboard(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "onboard",
        help="onboard a live OpenAI-compatible endpoint: ask it MMLU-Pro questions, grade, add it to the pool",
        description="Ask the endpoint (a models config entry) up to --budget MMLU-Pro questions in rounds of "
        "--concurrency (chosen by --choice), with bounded concurrency, timeouts and retries; after each round print "
        "the answers, the spend and the widest per-benchmark 90% interval, and stop early once every interval "
        "is narrower than --until points; log every answer "
        "under LOCUS_HOME/live/ as it arrives (a rerun resumes without asking again); grade; onboard the "
        "graded answers as the drop folder does (a pool row named after the entry); log an MLflow run.",
    )
    add_options(p)
    p.add_argument("--models-config", type=Path, required=True, help="YAML or JSON models config (locus serve's)")
    p.add_argument(
        "--via-sensor",
        action="store_true",
        help="hand the graded answers to the intake and leave their onboarding run to a running Dagster's "
        "drop-folder sensor, instead of starting it in this process",
    )
    p.add_argument("--no-mlflow", action="store_true", help="do not log an MLflow run")
    p.add_argument("--home", type=str, default=None, help="LOCUS_HOME (default: $LOCUS_HOME or <repo>/data)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run_onboard)


def run_onboard(args: argparse.Namespace) -> int:
    # why: torch, httpx, pandas and the Dagster definitions load only for locus onboard, not at CLI start-up
    from locus_pipeline.defs.resources import MlflowTracking
    from locus_pipeline.live.onboard import OnboardError, onboard_endpoint
    from locus_pipeline.serve import ConfigError
    from locus_pipeline.serve.config import read_models_config
    from locus_pipeline.storage import LocusHome, StorageError

    try:
        config = config_from(vars(args))
        home = LocusHome(root=str(args.home) if args.home else "")
        say = (
            (lambda line: print(line, file=sys.stderr, flush=True))
            if args.json
            else (lambda line: print(line, flush=True))
        )
        result = onboard_endpoint(
            home,
            config,
            read_models_config(args.models_config),
            progress=say,
            publish=None if args.via_sensor else (lambda manifest: run_onboarding(home, manifest)),
            tracking=None if args.no_mlflow else MlflowTracking(home=home),
        )
    except (OnboardError, ConfigError, StorageError, ValueError, TimeoutError) as err:
        return fail("onboard", err)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(
            f"{result.model}: {result.answers} answers ({result.resumed} from an earlier run, {result.failed_calls} "
            f"failed calls), accuracy {result.accuracy:.3f}, cost ${result.cost_usd:.4f}, stopped by "
            f"{result.stopped_by}, {result.seconds:.1f} s"
        )
        print(estimates_table(result.estimates))
        print(f"evaluation file: {result.evaluation_file}")
        if result.run_id:
            print(f"onboarding run {result.run_id}; nearest models: {', '.join(result.neighbours)}")
        else:
            print("taken in; the drop-folder sensor of a running Dagster onboards it")
    return EXIT_OK


def estimates_table(rows: list[dict]) -> str:
    """The last round's estimates as a plain table: benchmark, answered (n), estimate and its 90% interval."""
    lines = [f"{'benchmark':<18} {'answered (n)':>13} {'estimate':>9} {'90% interval':>15}"]
    for r in rows:
        seen = f"{r['observed']:.3f} ({r['n']})" if r["n"] else "-"
        lines.append(f"{r['benchmark']:<18} {seen:>13} {r['estimate']:>9.3f} {r['lo']:>7.3f} - {r['hi']:.3f}")
    return "\n".join(lines)


def run_onboarding(home, manifest) -> str | None:
    """The onboarding run of an accepted file (its models' partitions, as the drop-folder sensor requests it:
    run_requests_for, its run key), in this process on the home's Dagster instance ($DAGSTER_HOME's when it is set),
    unless a run with its run key exists: then that run's id. Called under the intake lock (hand_in's publish), so
    no sensor tick requests the same file in between; the sensor skips a run key that has a run."""
    # why: Dagster's definitions (and torch) load only when locus onboard starts a run
    import dagster as dg

    from locus_pipeline.definitions import defs as load
    from locus_pipeline.defs.resources import resources_for
    from locus_pipeline.defs.sensors import run_requests_for
    from locus_pipeline.instance import prepare_dagster_home
    from locus_pipeline.live.onboard import OnboardError
    from locus_pipeline.runlog import QUIET_RUN
    from locus_pipeline.runs import RUN_KEY_TAG

    dagster_home = os.environ.get("DAGSTER_HOME") or str(prepare_dagster_home(Path(home.local_path)))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        requests, new = run_requests_for(manifest, instance.get_dynamic_partitions("onboarded_models"))
        (request,) = requests  # the answers of one model: one partition
        assert request.run_key is not None  # run_requests_for keys every run by the file's sha256
        earlier = instance.get_runs(dg.RunsFilter(tags={RUN_KEY_TAG: request.run_key}), limit=1)
        if earlier:
            return earlier[0].run_id
        instance.add_dynamic_partitions("onboarded_models", new)
        tags = {**request.tags, RUN_KEY_TAG: request.run_key, "locus/trigger": "locus onboard"}
        run = (
            load()
            .resolve_job_def("onboarding_job")
            .execute_in_process(
                instance=instance,
                run_config={**request.run_config, **QUIET_RUN},
                tags=tags,  # the range is in the tags
                resources=resources_for(home),
                raise_on_error=False,
            )
        )
    if not run.success:
        raise OnboardError(
            f"the onboarding run {run.run_id} of {manifest.original_name!r} failed; see its logs in Dagster"
        )
    return run.run_id
