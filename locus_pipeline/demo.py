"""`make demo`: materialize the whole graph on the embedded demo data, then say where things are.

Usage: python -m locus_pipeline.demo [--source mmlu_pro|synthetic] [--max-queries N] [--size full|small] [--encoder NAME]

The default is real data: the vendored MMLU-Pro matrix (29 models; data/mmlu-pro/README.md), on a subset of
DEMO_QUERIES of its 12,032 questions stratified by category, so that encoding the question texts stays within the
demo's time (the whole matrix: --max-queries 0). --source synthetic runs on the generated pool with a known latent
structure (the tests' planted-truth fixture).

The training uses the library's defaults (locus_model.training.TrainConfig): the demo shows the router the
defaults give, not a shortened one. Every step's wall time is printed at the end.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

DEMO_QUERIES = 1500  # MMLU-Pro questions in the demo (stratified by category; bench/README.md "make demo")
# The small synthetic pool (24 models, 600 queries: ~400 training queries) cannot hold the default budget of 512 anchors.
SMALL_OPS = {"training_split": {"config": {"budget": 256}}}


def step_windows(instance, run_id: str) -> dict[str, tuple[float, float, bool]]:
    """step -> (start, end, succeeded) from the run's STEP_START / STEP_SUCCESS / STEP_FAILURE events."""
    start, out = {}, {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type_value == "STEP_START":
            start[event.step_key] = entry.timestamp
        elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and event.step_key in start:
            out[event.step_key] = (start[event.step_key], entry.timestamp, event.event_type_value == "STEP_SUCCESS")
    return out


def step_seconds(instance, run_id: str) -> dict[str, float]:
    """Wall seconds of every step of a finished run (step_windows)."""
    return {step: end - begin for step, (begin, end, _) in step_windows(instance, run_id).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="mmlu_pro", choices=["mmlu_pro", "synthetic"], help="demo data (default mmlu_pro: real models)")
    parser.add_argument("--max-queries", type=int, default=DEMO_QUERIES, help=f"mmlu_pro: questions used (default {DEMO_QUERIES}; 0 = all 12,032)")
    parser.add_argument("--size", default="full", choices=["full", "small"], help="synthetic pool size (default full)")
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2", help="sentence encoder for the queries")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore", message="Handling yaml-defined logging configuration")  # dagster.yaml's run lines

    import dagster as dg

    from locus_pipeline.definitions import defs
    from locus_pipeline.instance import prepare_dagster_home
    from locus_pipeline.intake import DropFolder
    from locus_pipeline.storage import LocusHome

    home = LocusHome()
    dagster_home = prepare_dagster_home(home.path)
    DropFolder(home).ensure()  # the drop folder exists from the start: drop files there to onboard models
    if args.source == "mmlu_pro":
        ops = {"raw_evaluations": {"config": {"source": "mmlu_pro"}},
               "evaluation_table": {"config": {"max_queries": args.max_queries}}}
    else:
        ops = {"raw_evaluations": {"config": {"source": "synthetic", "synthetic_size": args.size}},
               **(SMALL_OPS if args.size == "small" else {})}
    run_config = {"ops": {**ops, "query_encodings": {"config": {"encoder": args.encoder}}}}
    start = time.perf_counter()
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        result = defs().resolve_job_def("locus_job").execute_in_process(instance=instance, run_config=run_config, raise_on_error=False)
        wall = time.perf_counter() - start
        print(f"\nlocus_job {'succeeded' if result.success else 'FAILED'} in {wall:.0f} s (run {result.run_id})")
        for step, seconds in sorted(step_seconds(instance, result.run_id).items(), key=lambda kv: -kv[1]):
            print(f"  {seconds:7.1f} s  {step}")
    root = home.path
    data = ("real MMLU-Pro results, " + (f"{args.max_queries} questions" if args.max_queries else "all questions")
            if args.source == "mmlu_pro" else "the SYNTHETIC pool")
    print(f"  LOCUS_HOME            {root}  (data: {data})")
    print(f"  pool table            {home.pool_path}")
    print(f"  warehouse (Parquet)   {root / 'warehouse'}")
    print(f"  reports               {root / 'reports'}  (atlas.html, routing_evaluation.json, ...)")
    print(f"  drop folder           {root / 'incoming'}  (drop an evaluation file here to onboard a model)")
    print(f"  MLflow                {root / 'mlflow' / 'mlflow.db'}  (make dev opens the UI)")
    print(f"  Dagster runs          {dagster_home}  (make dev opens the UI)")
    if result.success:
        for event in result.get_asset_materialization_events():
            materialization = event.event_specific_data.materialization
            if materialization.asset_key.to_user_string() == "locus_checkpoint":
                url = materialization.metadata.get("mlflow_run")
                print(f"  MLflow run            {url.value if url else '?'}")
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
