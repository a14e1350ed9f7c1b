"""The ``locus`` command: the library's commands (locus_model.cli: evaluate, synthetic-data) and those that read a
LOCUS_HOME through the pipeline's storage (search, serve, pool, mlflow-uri).

    locus search --target 'math=0.9,law=0.3' [--k 5] [--home PATH] [--json]
    locus serve [--host 127.0.0.1] [--port 8000] [--home PATH] [--token T] [--models-config models.yaml] [--threads 0]
                [--portfolio k-center-15] [--dry-run]
    locus pool remove NAME [--home PATH]
    locus learn reset MODEL [--home PATH]
    locus mlflow-uri [--home PATH]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Callable, Mapping, Sequence

from locus_model.cli import COMMANDS as LIBRARY_COMMANDS
from locus_model.cli import EXIT_OK, add_evaluate, fail, quiet_warnings
from locus_model.cli import build_parser as _build_parser
from locus_pipeline.home_cli import add_learn, add_pool
from locus_pipeline.live_cli import add_onboard, add_replay


def capability_search_in_home(
    home, target: Mapping[str, float], *, k: int = 5, n_per_benchmark: int = 64, seed: int = 0
):
    """Capability-profile search on a LOCUS_HOME's pool, with the checkpoint the pool was embedded with."""
    # why: the reports (torch, matplotlib) load only for locus search, not at CLI start-up
    from locus_pipeline.reports import capability_search_from_tables

    pool = home.read_pool()
    return capability_search_from_tables(
        target,
        pool=pool,
        table=home.read_table("evaluation_table"),
        encodings=home.read_table("query_encodings"),
        split=home.read_table("training_split"),
        model=home.pool_checkpoint(pool).model,
        onboarded=home.onboarded_evaluations(),
        k=k,
        n_per_benchmark=n_per_benchmark,
        seed=seed,
    )


# ---------------------------------------------------------------------------------------------- search


def add_search(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "search",
        help="capability-profile search: the pool models closest to a target per-benchmark accuracy",
        description=(
            "Synthesize an evaluation set with the target accuracy per benchmark (non-test queries of the pool), "
            "embed it with the pool's checkpoint, and print the target profile, then the models of LOCUS_HOME's "
            "pool closest to it with their actual per-benchmark accuracy, ranked by target_distance: the mean "
            "|actual - target| accuracy over the benchmarks of --target only. embedding_distance is the Euclidean "
            "distance between model embeddings (the synthetic set's and the model's), the space and scale of the "
            "atlas's neighbours list. Needs a materialized pipeline (make demo)."
        ),
    )
    p.add_argument(
        "--target",
        required=True,
        help="comma-separated BENCHMARK=ACCURACY over the home's benchmarks, e.g. 'math=0.9,law=0.3' on the demo "
        "home (MMLU-Pro categories; the synthetic pool's are synth-gsm8k, synth-mmlu, ...)",
    )
    p.add_argument("--k", type=int, default=5, help="nearest models to return (default 5)")
    p.add_argument("--n-per-benchmark", type=int, default=64, help="synthetic evaluations per benchmark (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic evaluation set")
    p.add_argument("--home", type=str, default=None, help="LOCUS_HOME to read (default: $LOCUS_HOME or <repo>/data)")
    p.add_argument("--json", action="store_true", help="print JSON (target, realised, neighbours) instead of a table")
    p.set_defaults(run=run_search)


def run_search(args: argparse.Namespace) -> int:
    # why: the reports (torch, matplotlib) load only for locus search, not at CLI start-up
    from locus_pipeline.reports import parse_target
    from locus_pipeline.storage import LocusHome, StorageError

    try:
        home = LocusHome(root=str(args.home) if args.home else "")
        result = capability_search_in_home(
            home, parse_target(args.target), k=args.k, n_per_benchmark=args.n_per_benchmark, seed=args.seed
        )
    except (ValueError, StorageError) as err:
        return fail("search", err)
    if args.json:
        print(
            json.dumps(
                {
                    "target": result.target,
                    "realised": result.realised,
                    "neighbours": json.loads(result.neighbours.to_json(orient="records")),
                },
                indent=2,
            )
        )
    else:
        print(search_text(result))
    return EXIT_OK


SEARCH_NOTE = (
    "Ranked by target_distance: mean |actual - target| accuracy over the target's benchmarks only (0 = the "
    "profile asked for). embedding_distance: Euclidean distance between model embeddings (a synthetic "
    "set with the target accuracy and the model), the space and scale of the atlas's neighbours list; "
    "it breaks ties and ranks the models without an accuracy on every benchmark named (last)."
)


def search_text(result) -> str:
    """The target profile as the first row, the found models' profiles under it, and what the columns mean."""
    # why: pandas loads only for locus search, not at CLI start-up (locus --help)
    import pandas as pd

    benches = [b for b in result.target if b in result.neighbours]
    found = result.neighbours[["rank", "model", "target_distance", "embedding_distance"] + benches]
    target = {
        "rank": "target",
        "model": "(target profile)",
        "target_distance": float("nan"),
        "embedding_distance": float("nan"),
        **{b: result.target[b] for b in benches},
    }
    table = pd.DataFrame([target] + found.astype({"rank": str}).to_dict("records"))
    text = table.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="")
    return text + "\n\n" + SEARCH_NOTE


# ---------------------------------------------------------------------------------------------- serve


def add_serve(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="route live traffic: a cost-aware router over the pool (POST /route, OpenAI-compatible "
        "/v1/chat/completions)",
        description=(
            "Serve LOCUS_HOME's pool: POST /route ranks the pool models for a query by P(correct) and cost; "
            "/v1/chat/completions with model 'locus' or 'locus:<quality_weight>' forwards the request to the chosen "
            "model's upstream (the models config), moving down the embedding-neighbour fallback chain on errors. "
            "Without an upstream, chat calls answer 503 (POST /route still answers); --dry-run answers them with the "
            "decision only. A models config naming no pool model refuses to start. The pool is reloaded when it "
            "changes (onboarding, rebuild) without a restart. GET /metrics (Prometheus), GET /healthz."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--home", type=str, default=None, help="LOCUS_HOME to serve (default: $LOCUS_HOME or <repo>/data)")
    p.add_argument(
        "--token",
        default=None,
        help="bearer token required on every endpoint but /healthz (default: $LOCUS_SERVE_TOKEN, else none)",
    )
    p.add_argument(
        "--models-config",
        type=Path,
        default=None,
        help="YAML or JSON: per pool model its OpenAI-compatible base_url, model, api_key_env and "
        "cost_per_query or price_input_per_mtok / price_output_per_mtok or params_b (README.md, docs/serve.md)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads for encoding and prediction (default 0: the cores free when it starts, as every fit "
        "chooses them)",
    )
    p.add_argument(
        "--encoder-runtime",
        default=None,
        choices=["onnx-int8", "onnx-fp32", "torch"],
        help="query encoder runtime (default: the one the checkpoint's training encodings came from)",
    )
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=2.0,
        help="how long a query waits for concurrent ones to be encoded with it (default 2 ms)",
    )
    p.add_argument(
        "--quality-weight",
        type=float,
        default=1.0,
        help="default quality weight in [0, 1] when a request gives none (1 = best P(correct))",
    )
    p.add_argument(
        "--guard-margin",
        type=float,
        default=None,
        metavar="P",
        help="the guard: another model than the candidate of highest standing (accuracy on its own "
        "evaluations) wins a query only when its P(correct) is higher by more than P (default 0.02; "
        "0 = the highest P(correct) wins)",
    )
    p.add_argument(
        "--portfolio",
        default=None,
        metavar="NAME",
        help="serve only this portfolio of the portfolios asset as the candidate set, e.g. k-center-15 "
        "(<method>-<k or budget>; an unknown name lists the available ones)",
    )
    p.add_argument("--fallbacks", type=int, default=3, help="models of the fallback chain tried after the chosen one")
    p.add_argument(
        "--ranking-size",
        type=int,
        default=100,
        help="models listed in a decision's ranking, best first (default 100; 0: every candidate)",
    )
    p.add_argument("--poll-seconds", type=float, default=1.0, help="how often the pool file is checked for changes")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=1 << 20,
        help="request bodies larger than this are refused with 413 (default 1,048,576 = 1 MiB; 0: no limit)",
    )
    p.add_argument(
        "--serve",
        default="auto",
        metavar="auto|router|single:MODEL",
        help="what model 'locus' answers with: 'auto' (default: the router, unless the home's routing "
        "evaluation of this checkpoint found that routing does not pay: then its best single model), "
        "'router' (route whatever the verdict) or 'single:<pool model>' (that model for every query; "
        "pinned models and POST /route unchanged)",
    )
    p.add_argument(
        "--learn",
        choices=("apply", "observe", "off"),
        default="apply",
        help="graded outcomes (POST /v1/outcomes): 'apply' (default: learned and routed on; the single model "
        "of --serve is the guard they may overturn), 'observe' (learned; the frozen choice is served and the "
        "learned one logged beside it), 'off' (no request ids, no traffic log; /v1/outcomes answers 503)",
    )
    p.add_argument(
        "--no-learn",
        dest="learn",
        action="store_const",
        const="off",
        help="the same as --learn off",
    )
    p.add_argument(
        "--explore",
        type=float,
        default=None,
        metavar="SHARE",
        help="explored requests of a query group per graded outcome there, shrinking as the posterior narrows "
        "(default: LearningConfig's, 0.05; 0: never explore); nothing is explored before outcomes arrive, "
        "pinned requests never",
    )
    p.add_argument(
        "--traffic-days",
        type=float,
        default=30.0,
        help="the traffic log's retention in days (decisions and outcomes under LOCUS_HOME/traffic/)",
    )
    p.add_argument(
        "--traffic-max-mb",
        type=float,
        default=1024.0,
        help="and in MB per log (the oldest segments go first); default 1024",
    )
    p.add_argument("--access-log", action="store_true", help="log every request (off by default)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="answer chat calls with the routing decision only, never forwarding them (and start even "
        "when the models config names no pool model)",
    )
    p.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    # why: the gateway (FastAPI, torch, pandas) loads only for locus serve, not at CLI start-up
    from locus_model.routing import RoutingError, RoutingPolicy
    from locus_pipeline.serve import ConfigError, ServeConfig, serve
    from locus_pipeline.serve.learning import learning_config
    from locus_pipeline.storage import StorageError
    from locus_pipeline.storage.traffic import Retention

    try:
        policy = RoutingPolicy(
            quality_weight=args.quality_weight,
            guard_margin=args.guard_margin,  # None: the policy's default (routing.policy.check_margin)
        )
    except RoutingError as err:
        return fail("serve", ValueError(f"--quality-weight / --guard-margin: {err}"))
    if not 0 <= args.port <= 65535:
        return fail("serve", ValueError(f"--port {args.port}: must be from 0 to 65535"))
    try:  # every number finite and in range (ServeConfig), the learning settings too
        config = ServeConfig(
            home=str(args.home) if args.home else "",
            token=args.token or os.environ.get("LOCUS_SERVE_TOKEN"),
            models_config=str(args.models_config) if args.models_config else None,
            threads=args.threads,
            poll_seconds=args.poll_seconds,
            policy=policy,
            n_fallbacks=args.fallbacks,
            ranking_size=args.ranking_size,
            max_body_bytes=args.max_body_bytes,
            encoder_runtime=args.encoder_runtime,
            batch_wait_ms=args.batch_wait_ms,
            portfolio=args.portfolio,
            dry_run=args.dry_run,
            serve=args.serve,
            learn=args.learn,
            explore=args.explore,
            traffic_days=args.traffic_days,
            traffic_max_mb=args.traffic_max_mb,
        )
        learning_config(config)
        Retention(days=config.traffic_days, max_mb=config.traffic_max_mb)
    except ValueError as err:
        return fail("serve", err)
    try:  # the pool and its checkpoint load before the server listens: a missing pool fails here
        serve(config, host=args.host, port=args.port, access_log=args.access_log)
    except (ConfigError, StorageError, ValueError) as err:
        return fail("serve", err)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- mlflow-uri


def add_mlflow_uri(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "mlflow-uri",
        help="print the MLflow tracking URI of LOCUS_HOME (for MLFLOW_TRACKING_URI)",
        description="Print the tracking URI the pipeline logs to for this home: $MLFLOW_TRACKING_URI when it names a "
        "server, else sqlite:///<LOCUS_HOME>/mlflow/mlflow.db. With it, MLflow clients find the "
        "registered model: MLFLOW_TRACKING_URI=$(locus mlflow-uri) python -c '...models:/locus@current...'",
    )
    p.add_argument("--home", type=str, default=None, help="LOCUS_HOME (default: $LOCUS_HOME or <repo>/data)")
    p.set_defaults(run=run_mlflow_uri)


def run_mlflow_uri(args: argparse.Namespace) -> int:
    # why: the storage and resources (pandas) load only for this command, not at CLI start-up
    from locus_pipeline.defs.resources import MlflowTracking
    from locus_pipeline.storage import LocusHome

    try:
        tracking = MlflowTracking(home=LocusHome(root=str(args.home) if args.home else ""))
        if not tracking.tracking_uri and not tracking.db_path.exists():
            raise ValueError(
                f"no MLflow database at {tracking.db_path}. How to fix: materialize locus_job into this "
                "home first (make demo), or pass --home / set LOCUS_HOME to the home that has one"
            )
    except ValueError as err:
        return fail("mlflow-uri", err)
    print(tracking.uri)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- evaluate in a home


def home_encoding_cache() -> Path | None:
    """LOCUS_HOME's query-encoding caches (``encodings/``, one folder per encoder; a remote home's per-machine
    copy) when it has them: where `locus evaluate` looks first, so queries the pipeline encoded are not encoded
    again (the cache is content-addressed: a text's encoding is found whatever table it came from)."""
    # why: the storage (pandas) loads only for locus evaluate, not at CLI start-up
    from locus_pipeline.storage import LocusHome

    folder = LocusHome().local_path / "encodings"
    return folder if folder.is_dir() else None


COMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    **LIBRARY_COMMANDS,
    "evaluate": functools.partial(add_evaluate, encoding_cache=home_encoding_cache),
    "search": add_search,
    "serve": add_serve,
    "replay": add_replay,
    "onboard": add_onboard,
    "pool": add_pool,
    "learn": add_learn,
    "mlflow-uri": add_mlflow_uri,
}


def build_parser() -> argparse.ArgumentParser:
    return _build_parser(COMMANDS.values())


def quiet_cli() -> None:
    """What the library's commands leave out (locus_model.cli.quiet_warnings), and Dagster's notices about its own
    API (BetaWarning, PreviewWarning, the dagster.yaml logging note): for this code's maintainers, not its user."""
    quiet_warnings()
    warnings.filterwarnings("ignore", message="Handling yaml-defined logging configuration")
    try:
        from dagster import BetaWarning, PreviewWarning  # why: Dagster's warning classes, where this Dagster has them
    except ImportError:  # an older Dagster: nothing of the kind to filter
        return
    for category in (BetaWarning, PreviewWarning):
        warnings.filterwarnings("ignore", category=category)


def main(argv: Sequence[str] | None = None) -> int:
    quiet_cli()
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
