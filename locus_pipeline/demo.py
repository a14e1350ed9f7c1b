"""`make demo`: materialize the whole graph on the embedded synthetic demo pool, then say where things are.

Usage: python -m locus_pipeline.demo [--size full|small] [--encoder NAME] [--epochs N]
"""

from __future__ import annotations

import argparse
import os
import time


# The full pool trains LOCUS twice (the pool checkpoint and the one inside routing_evaluation): with the
# library's defaults (120 epochs) that is ~20 min on a 2-core CPU, so the demo shortens both to --epochs
# (default 40; bench/README.md "Training sweep" has what the full schedule gains).
DEMO_EPOCHS = 40


def training_ops(epochs: int) -> dict:
    return {
        "locus_checkpoint": {"config": {"epochs": epochs, "patience": epochs}},
        "routing_evaluation": {"config": {"training": {"epochs": epochs, "patience": epochs}}},
    }


# The small pool (600 queries) has ~500 training queries: smaller budgets and a short training.
SMALL_RUN_CONFIG = {
    "ops": {
        "training_split": {"config": {"budget": 256}},
        "locus_checkpoint": {"config": {"epochs": 20, "patience": 10}},
        "routing_evaluation": {"config": {"budget": 128, "training": {"epochs": 20, "patience": 10}}},
    }
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="full", choices=["full", "small"], help="demo pool size (default full)")
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2", help="sentence encoder for the queries")
    parser.add_argument("--epochs", type=int, default=DEMO_EPOCHS,
                        help=f"LOCUS training epochs on the full pool (default {DEMO_EPOCHS}; the library's default is 120)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import dagster as dg

    from locus_model.paths import locus_home
    from locus_pipeline.definitions import defs
    from locus_pipeline.instance import prepare_dagster_home

    home = locus_home()
    prepare_dagster_home(home)
    run_config = {
        "ops": {
            "raw_evaluations": {"config": {"source": "demo", "demo_size": args.size}},
            "query_encodings": {"config": {"encoder": args.encoder}},
            **SMALL_RUN_CONFIG["ops"],
        } if args.size == "small" else {
            "raw_evaluations": {"config": {"source": "demo", "demo_size": args.size}},
            "query_encodings": {"config": {"encoder": args.encoder}},
            **training_ops(args.epochs),
        }
    }
    start = time.perf_counter()
    with dg.DagsterInstance.get() as instance:
        result = defs().resolve_job_def("locus_job").execute_in_process(instance=instance, run_config=run_config, raise_on_error=False)
    wall = time.perf_counter() - start
    print(f"\nlocus_job {'succeeded' if result.success else 'FAILED'} in {wall:.0f} s (run {result.run_id})")
    print(f"  LOCUS_HOME            {home}  (the demo pool is SYNTHETIC)")
    print(f"  pool table            {home / 'warehouse' / 'model_embeddings.parquet'}")
    print(f"  warehouse (Parquet)   {home / 'warehouse'}")
    print(f"  reports               {home / 'reports'}")
    print(f"  MLflow                {home / 'mlflow' / 'mlflow.db'}  (make dev opens the UI at http://127.0.0.1:5000)")
    print(f"  Dagster runs          {home / 'dagster'}  (make dev opens the UI at http://127.0.0.1:3000)")
    if result.success:
        for event in result.get_asset_materialization_events():
            materialization = event.event_specific_data.materialization
            if materialization.asset_key.to_user_string() == "locus_checkpoint":
                url = materialization.metadata.get("mlflow_run")
                print(f"  MLflow run            {url.value if url else '?'}")
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
