"""Onboarding latency: file drop -> model embedding in the pool, through the real `dagster dev` (daemon included).

    .venv/bin/python -m bench.bench_onboarding --sizes 128 4096 --repeats 3 [--big-gb 1.0]

1. Builds a tiny pool in a temporary LOCUS_HOME (pool_job in-process: small synthetic pool, hashing-256 encoder).
2. Starts `dagster dev`, waits for the drop-folder sensor's first tick (it creates incoming/accepted/).
3. For each size and repeat: writes one model's evaluations as <name>.csv.part, renames it to <name>.csv (the
   drop), and polls the pool table every 0.2 s. The run record gives the split:
   sensor wait = drop -> run created (settle time + tick interval + intake), queue+launch = created -> started,
   run = started -> finished; pool = drop -> the row is readable in the pool table.
4. --big-gb: intake (stream-validate + split by model) of a generated CSV of that size in a subprocess, with
   its wall time and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bench.common import REPO
from locus_pipeline.devserver import start_dagster_dev, stop_dagster_dev
from tests.locus_pipeline.tiny import POOL_OPS, run_config_for

POOL_CONFIG = run_config_for(POOL_OPS)  # the tests' tiny pool: small synthetic pool, hashing encoder, 3 epochs


def build_pool(home: Path) -> None:
    import dagster as dg

    from locus_pipeline.definitions import defs

    with dg.DagsterInstance.get() as instance:
        defs().resolve_job_def("pool_job").execute_in_process(instance=instance, run_config=POOL_CONFIG, raise_on_error=True)


def evaluations(home: Path, model: str, n: int) -> pd.DataFrame:
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    known = table.drop_duplicates("query_id")[["query_id", "query", "benchmark"]].head(n)
    extra = pd.DataFrame({"query_id": [f"bench-q{i}" for i in range(n - len(known))],
                          "query": [f"benchmark question number {i} about topic {i % 37}" for i in range(n - len(known))],
                          "benchmark": "bench"})
    rows = pd.concat([known, extra], ignore_index=True)
    return rows.assign(model=model, score=[float(i % 3 == 0) for i in range(len(rows))])[["model", "query_id", "query", "benchmark", "score"]]


def wait_idle(instance, timeout: float = 300) -> None:
    """No run queued or in progress (e.g. the report refresh after the previous onboarding)."""
    import dagster as dg

    busy = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    deadline = time.time() + timeout
    while instance.get_runs_count(dg.RunsFilter(statuses=busy)) and time.time() < deadline:
        time.sleep(1)


def measure_drop(home: Path, instance, model: str, n: int, timeout: float = 300) -> dict:
    import dagster as dg

    wait_idle(instance)
    time.sleep(35)  # past the report refresh sensor's next tick, so its run does not overlap the measurement
    wait_idle(instance)

    incoming = home / "incoming"
    name = f"{model.replace('/', '_')}.csv"
    evaluations(home, model, n).to_csv(incoming / f"{name}.part", index=False)
    os.replace(incoming / f"{name}.part", incoming / name)
    dropped = time.time()
    pool_file = home / "warehouse" / "model_embeddings.parquet"
    pooled = None
    while time.time() - dropped < timeout:
        if model in set(pd.read_parquet(pool_file, columns=["model"])["model"]):
            pooled = time.time()
            break
        time.sleep(0.2)
    if pooled is None:
        raise TimeoutError(f"{model} did not reach the pool in {timeout} s")
    time.sleep(1.0)  # let the run record its end
    records = instance.get_run_records(dg.RunsFilter(tags={"locus/model": model}))
    run = records[0]
    created = run.create_timestamp.timestamp()
    started, ended = run.start_time, run.end_time
    return {"evaluations": n, "sensor_wait_s": created - dropped, "queue_launch_s": started - created,
            "run_s": (ended or pooled) - started, "drop_to_pool_s": pooled - dropped}


def bench_latency(sizes: list[int], repeats: int) -> list[dict]:
    from locus_pipeline.instance import prepare_dagster_home

    tmp = Path(tempfile.mkdtemp(prefix="locus-bench-onboarding-"))
    home = tmp / "home"
    os.environ["LOCUS_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(prepare_dagster_home(home))
    print(f"building the tiny pool in {home} ...", flush=True)
    build_pool(home)
    proc, _ = start_dagster_dev(home, tmp / "dagster.log")
    rows = []
    try:
        import dagster as dg

        deadline = time.time() + 180
        while not (home / "incoming" / "accepted").exists():  # the sensor's first tick creates it
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the sensor never ticked; see {tmp / 'dagster.log'}")
            time.sleep(0.5)
        time.sleep(6)  # first tick done, the daemon is in its steady rhythm
        with dg.DagsterInstance.get() as instance:
            for n in sizes:
                for r in range(repeats):
                    row = measure_drop(home, instance, f"bench/model-{n}-{r}", n)
                    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
                    rows.append(row)
    finally:
        stop_dagster_dev(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def bench_big(gb: float) -> dict:
    """Intake of a generated CSV of `gb` GB (50 models, ~420-byte query texts), in a subprocess."""
    tmp = Path(tempfile.mkdtemp(prefix="locus-bench-big-"))
    try:
        path = tmp / "incoming" / "big.csv"
        path.parent.mkdir(parents=True)
        filler = "lorem ipsum dolor sit amet consectetur " * 10
        target, written, q = gb * 1e9, 0, 0
        with path.open("w") as f:
            f.write("model,query_id,query,benchmark,score\n")
            while written < target:
                block = "".join(f"org/model-{m},q{j},\"question {j}: {filler}\",bench{j % 5},{(j * m) % 2}\n"
                                for j in range(q, q + 2000) for m in range(50))
                f.write(block)
                written += len(block)
                q += 2000
        code = ("import time, resource, json; from pathlib import Path; from locus_pipeline.intake import DropFolder, intake_file;"
                f"t = time.perf_counter(); r = intake_file(Path({str(path)!r}), DropFolder.at(Path({str(tmp)!r})));"
                "print(json.dumps({'status': r.status, 'rows': r.manifest.rows if r.manifest else 0, 'models': len(r.manifest.models) if r.manifest else 0,"
                "'seconds': time.perf_counter() - t, 'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))")
        size = path.stat().st_size
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        return {"bytes": size, **result}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--big-gb", type=float, default=0.0, help="also time the intake of a generated CSV of this many GB")
    args = parser.parse_args()
    if args.big_gb:
        big = bench_big(args.big_gb)
        print(json.dumps(big), flush=True)
    rows = bench_latency(args.sizes, args.repeats) if args.sizes else []
    frame = pd.DataFrame(rows)
    if len(frame):
        print("\nmedian over repeats (seconds):")
        print(frame.groupby("evaluations").median().round(1).to_markdown())


if __name__ == "__main__":
    main()
