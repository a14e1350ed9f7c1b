"""`make demo`: materialize the whole graph on the embedded demo pool, then say where things are.

Usage: python -m locus_pipeline.demo [--size full|small] [--encoder NAME]

The training uses the library's defaults (locus_model.train.TrainConfig): the demo shows the router the
defaults give, not a shortened one. Every step's wall time is printed at the end.
"""

from __future__ import annotations

import argparse
import os
import time

# The small pool (24 models, 600 queries: ~400 training queries) cannot hold the default budget of 512 anchors.
SMALL_OPS = {"training_split": {"config": {"budget": 256}}}


def step_seconds(result) -> dict[str, float]:
    """Wall seconds of every step of a finished in-process run, from its STEP_START / STEP_SUCCESS events."""
    start, out = {}, {}
    for event in result.all_events:
        if event.step_key is None:
            continue
        if event.event_type_value == "STEP_START":
            start[event.step_key] = event.timestamp
        elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and event.step_key in start:
            out[event.step_key] = event.timestamp - start[event.step_key]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="full", choices=["full", "small"], help="demo pool size (default full)")
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2", help="sentence encoder for the queries")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import dagster as dg

    from locus_pipeline.definitions import defs
    from locus_pipeline.instance import prepare_dagster_home
    from locus_pipeline.intake import DropFolder
    from locus_pipeline.storage import LocusHome

    home = LocusHome()
    dagster_home = prepare_dagster_home(home.path)
    DropFolder(home).ensure()  # the drop folder exists from the start: drop files there to onboard models
    run_config = {"ops": {
        "raw_evaluations": {"config": {"source": "demo", "demo_size": args.size}},
        "query_encodings": {"config": {"encoder": args.encoder}},
        **(SMALL_OPS if args.size == "small" else {}),
    }}
    start = time.perf_counter()
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        result = defs().resolve_job_def("locus_job").execute_in_process(instance=instance, run_config=run_config, raise_on_error=False)
    wall = time.perf_counter() - start
    print(f"\nlocus_job {'succeeded' if result.success else 'FAILED'} in {wall:.0f} s (run {result.run_id})")
    for step, seconds in sorted(step_seconds(result).items(), key=lambda kv: -kv[1]):
        print(f"  {seconds:7.1f} s  {step}")
    root = home.path
    print(f"  LOCUS_HOME            {root}  (the demo pool is SYNTHETIC)")
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
