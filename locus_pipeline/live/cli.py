"""``locus replay`` and ``locus onboard`` (registered in locus_pipeline/cli.py)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from locus_model.cli import EXIT_OK, _fail
from locus_model.pool_schema import MIN_ROUTABLE_EVALUATIONS, RECOMMENDED_EVALUATIONS as REC, accuracy_margin


def add_replay(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="an OpenAI-compatible endpoint answering MMLU-Pro questions as a recorded model did",
        description="Serve POST /v1/chat/completions answering each MMLU-Pro question (a prompt of locus onboard) with "
                    "the letter the recorded model NAME gave (data/mmlu-pro/answers.parquet), e.g. 'The answer is "
                    "(C).'; any other prompt gets a 400. For tests and demos of locus onboard.")
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
        return _fail("replay", err)
    return EXIT_OK


def add_onboard(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "onboard", help="onboard a live OpenAI-compatible endpoint: ask it MMLU-Pro questions, grade, add it to the pool",
        description="Ask the endpoint (a models config entry) up to --budget MMLU-Pro questions in rounds of --concurrency "
                    "(chosen by --choice), with bounded concurrency, timeouts and retries; after each round print the "
                    "answers, the spend and the widest per-benchmark 90% interval, and stop early once every interval "
                    "is narrower than --until points; log every answer "
                    "under LOCUS_HOME/live/ as it arrives (a rerun resumes without asking again); grade; onboard the "
                    "graded answers as the drop folder does (a pool row named after the entry); log an MLflow run.")
    p.add_argument("--endpoint", required=True, help="the models config entry to onboard (its name joins the pool)")
    p.add_argument("--models-config", type=Path, required=True, help="YAML or JSON models config (locus serve's)")
    p.add_argument("--budget", type=int, default=64,
                   help=f"answers to collect (default 64: a first look, its accuracy known to about "
                        f"+-{accuracy_margin(64):.0f} points; {REC}, the recommended count, +-{accuracy_margin(REC):.0f}; "
                        f"fewer than {MIN_ROUTABLE_EVALUATIONS} are not routed to: docs/onboarding.md)")
    p.add_argument("--max-cost", type=float, default=None, help="USD: stop before the spend could pass it")
    p.add_argument("--concurrency", type=int, default=8,
                   help="calls in flight at once; also the questions of one round (default 8)")
    from locus_model.estimates.questions import CHOICES, DEFAULT_CHOICE  # why: the parser names the library's choices; imported where onboard registers, as the lines above

    p.add_argument("--choice", choices=CHOICES, default=DEFAULT_CHOICE,
                   help=f"how each round's questions are chosen (default {DEFAULT_CHOICE}: adaptive, where the estimates' "
                        "intervals narrow most, did not beat random in bench/README.md 'Adaptive onboarding')")
    p.add_argument("--until", type=float, default=None, metavar="POINTS",
                   help="stop once every benchmark's 90%% interval is narrower than POINTS (default: at the budget)")
    p.add_argument("--retries", type=int, default=2, help="retries of a failed call (default 2)")
    p.add_argument("--via-sensor", action="store_true",
                   help="write the graded answers to incoming/ for a running Dagster's drop-folder sensor instead of "
                        "onboarding them in this process")
    p.add_argument("--no-mlflow", action="store_true", help="do not log an MLflow run")
    p.add_argument("--home", type=str, default=None, help="LOCUS_HOME (default: $LOCUS_HOME or <repo>/data)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run_onboard)


def run_onboard(args: argparse.Namespace) -> int:
    # why: torch, httpx and pandas load only for locus onboard, not at CLI start-up
    from locus_pipeline.live.onboard import OnboardConfig, OnboardError, onboard_endpoint
    from locus_pipeline.serve import ConfigError
    from locus_pipeline.serve.config import read_models_config
    from locus_pipeline.storage import LocusHome, StorageError

    try:
        config = OnboardConfig(endpoint=args.endpoint, budget=args.budget, max_cost=args.max_cost,
                               concurrency=args.concurrency, retries=args.retries,
                               via_sensor=args.via_sensor, choice=args.choice, until=args.until)
        home = LocusHome(root=str(args.home) if args.home else "")
        say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else (lambda line: print(line, flush=True))
        result = onboard_endpoint(home, config, read_models_config(args.models_config), mlflow_log=not args.no_mlflow,
                                  progress=say)
    except (OnboardError, ConfigError, StorageError, ValueError) as err:
        return _fail("onboard", err)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(f"{result.model}: {result.answers} answers ({result.resumed} from an earlier run, {result.failed_calls} "
              f"failed calls), accuracy {result.accuracy:.3f}, cost ${result.cost_usd:.4f}, stopped by "
              f"{result.stopped_by}, {result.seconds:.1f} s")
        print(estimates_table(result.estimates))
        print(f"evaluation file: {result.evaluation_file}")
        if result.run_id:
            print(f"onboarding run {result.run_id}; nearest models: {', '.join(result.neighbours)}")
        else:
            print("left in incoming/ for the drop-folder sensor of a running Dagster")
    return EXIT_OK


def estimates_table(rows: list[dict]) -> str:
    """The last round's estimates as a plain table: benchmark, answered (n), estimate and its 90% interval."""
    lines = [f"{'benchmark':<18} {'answered (n)':>13} {'estimate':>9} {'90% interval':>15}"]
    for r in rows:
        seen = f"{r['observed']:.3f} ({r['n']})" if r["n"] else "-"
        lines.append(f"{r['benchmark']:<18} {seen:>13} {r['estimate']:>9.3f} {r['lo']:>7.3f} - {r['hi']:.3f}")
    return "\n".join(lines)
