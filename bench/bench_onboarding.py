"""Onboarding latency: file drop -> model embedding in the pool, through the real `dagster dev` (daemon included).

    .venv/bin/python -m bench.bench_onboarding --sizes 128 4096 --repeats 3 [--big-gb 1.0] [--many-models 40]
    .venv/bin/python -m bench.bench_onboarding --sizes --hostile-models 1000 --hostile-files 12 --rows-per-model 128

1. Builds a tiny pool in a temporary LOCUS_HOME (pool_job in-process: small synthetic pool, hashing-256 encoder).
2. Starts `dagster dev`, waits for the drop-folder sensor's first tick (it creates incoming/accepted/).
3. For each size and repeat: writes one model's evaluations as <name>.csv.part, renames it to <name>.csv (the
   drop), and polls the pool table every 0.2 s. The run record gives the split:
   sensor wait = drop -> run created (settle time + tick interval + intake), queue+launch = created -> started,
   run = started -> finished; pool = drop -> the row is readable in the pool table.
4. --many-models N: one file of N models (--rows-per-model each) dropped, and a good one-model file dropped once
   the first is taken in: the onboarding runs the first file got, drop -> all N in the pool, and the good
   file's drop -> pool (how long it waits behind the big one).
5. --hostile-models N [--hostile-files K]: one file of N models (--rows-per-model each) and K one-model files
   dropped at once, then a good one-model file (128 evaluations) a second later, not waiting for them: the good
   file's drop -> pool (issue 68: within 60 s whatever came before it), the big file's drop -> its run created, and
   the runs requested; the hostile drops are not waited for (dagster dev is stopped once the good one is pooled).
6. --big-gb: intake (stream-validate + split by model) of a generated CSV of that size in a subprocess, with
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
        defs().resolve_job_def("pool_job").execute_in_process(
            instance=instance, run_config=POOL_CONFIG, raise_on_error=True
        )


def evaluations(home: Path, model: str, n: int) -> pd.DataFrame:
    table = pd.read_parquet(home / "warehouse" / "evaluation_table.parquet")
    known = table.drop_duplicates("query_id")[["query_id", "query", "benchmark"]].head(n)
    extra = pd.DataFrame(
        {
            "query_id": [f"bench-q{i}" for i in range(n - len(known))],
            "query": [f"benchmark question number {i} about topic {i % 37}" for i in range(n - len(known))],
            "benchmark": "bench",
        }
    )
    rows = pd.concat([known, extra], ignore_index=True)
    return rows.assign(model=model, score=[float(i % 3 == 0) for i in range(len(rows))])[
        ["model", "query_id", "query", "benchmark", "score"]
    ]


def wait_idle(instance, timeout: float = 300) -> None:
    """No run queued or in progress (e.g. the report refresh after the previous onboarding)."""
    import dagster as dg

    busy = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    ]
    deadline = time.time() + timeout
    while instance.get_runs_count(dg.RunsFilter(statuses=busy)) and time.time() < deadline:
        time.sleep(1)


def measure_drop(home: Path, instance, model: str, n: int, timeout: float = 300) -> dict:

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
    run = runs_since(instance, dropped)[0]
    created = run.create_timestamp.timestamp()
    started, ended = run.start_time, run.end_time
    return {
        "evaluations": n,
        "sensor_wait_s": created - dropped,
        "queue_launch_s": started - created,
        "run_s": (ended or pooled) - started,
        "drop_to_pool_s": pooled - dropped,
    }


def runs_since(instance, since: float) -> list:
    """The onboarding runs created after ``since`` (a Unix time), oldest first."""
    import dagster as dg

    records = instance.get_run_records(dg.RunsFilter(job_name="onboarding_job"))
    return sorted([r for r in records if r.create_timestamp.timestamp() >= since], key=lambda r: r.create_timestamp)


def pooled(home: Path, models: set[str]) -> bool:
    return models <= set(pd.read_parquet(home / "warehouse" / "model_embeddings.parquet", columns=["model"])["model"])


def measure_many(home: Path, instance, n_models: int, rows: int, timeout: float = 1800) -> dict:
    """A file of ``n_models`` models, then a good one-model file once the first left incoming/."""
    wait_idle(instance)
    time.sleep(35)  # past the report refresh sensor's next tick
    wait_idle(instance)
    incoming = home / "incoming"
    many = {f"bench/many-{i:03d}" for i in range(n_models)}
    pd.concat([evaluations(home, m, rows) for m in sorted(many)]).to_csv(incoming / "many.csv.part", index=False)
    os.replace(incoming / "many.csv.part", incoming / "many.csv")
    dropped = time.time()
    while (incoming / "many.csv").exists() and time.time() - dropped < timeout:
        time.sleep(0.2)
    good = "bench/good-after-many"
    evaluations(home, good, 128).to_csv(incoming / "good.csv.part", index=False)
    os.replace(incoming / "good.csv.part", incoming / "good.csv")
    good_dropped = time.time()
    done: dict[str, float] = {}  # "many" / "good" -> when its models were all in the pool
    while len(done) < 2 and time.time() - dropped < timeout:
        for what, models in (("many", many), ("good", {good})):
            if what not in done and pooled(home, models):
                done[what] = time.time()
        time.sleep(0.2)
    if len(done) < 2:
        raise TimeoutError(f"not in the pool after {timeout} s: {sorted({'many', 'good'} - set(done))}")
    time.sleep(1.0)
    return {
        "models": n_models,
        "rows_per_model": rows,
        "runs": len(runs_since(instance, dropped)),
        "drop_to_all_in_pool_s": done["many"] - dropped,
        "good_drop_to_pool_s": done["good"] - good_dropped,
    }


def measure_hostile(home: Path, instance, n_models: int, n_files: int, rows: int, timeout: float = 900) -> dict:
    """A file of ``n_models`` models and ``n_files`` one-model files dropped at once, a good file a second later."""
    wait_idle(instance)
    time.sleep(35)  # past the report refresh sensor's next tick
    wait_idle(instance)
    incoming = home / "incoming"
    start = time.time()
    if n_models:
        pd.concat([evaluations(home, f"hostile/many-{i:04d}", rows) for i in range(n_models)]).to_csv(
            incoming / "many.csv.part", index=False
        )
    for i in range(n_files):
        evaluations(home, f"hostile/one-{i:02d}", rows).to_csv(incoming / f"one-{i:02d}.csv.part", index=False)
    print(f"wrote the hostile drops in {time.time() - start:.1f} s", flush=True)
    dropped = time.time()
    for name in ([Path("many.csv")] if n_models else []) + [Path(f"one-{i:02d}.csv") for i in range(n_files)]:
        os.replace(incoming / f"{name}.part", incoming / name)
    time.sleep(1.0)
    good = "bench/good-after-hostile"
    evaluations(home, good, 128).to_csv(incoming / "good.csv.part", index=False)
    os.replace(incoming / "good.csv.part", incoming / "good.csv")
    good_dropped, said = time.time(), 0
    while not pooled(home, {good}):
        waited = time.time() - good_dropped
        if waited > timeout:
            raise TimeoutError(f"the good drop was not in the pool after {timeout} s")
        if waited >= said + 30:
            said += 30
            print(f"  waiting for the good drop: {waited:.0f} s (gives up at {timeout:.0f} s)", flush=True)
        time.sleep(0.5)
    pooled_at = time.time()
    runs = runs_since(instance, dropped)
    big = [r for r in runs if r.dagster_run.tags.get("locus/drop_size") == "large"]
    return {
        "hostile_models": n_models,
        "hostile_files": n_files,
        "rows_per_model": rows,
        "runs_requested": len(runs),
        "big_drop_to_run_created_s": big[0].create_timestamp.timestamp() - dropped if big else None,
        "good_drop_to_pool_s": pooled_at - good_dropped,
    }


def bench_latency(
    sizes: list[int], repeats: int, many: int = 0, rows_per_model: int = 1, hostile: tuple[int, int] = (0, 0)
) -> list[dict]:
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
            if many:
                print(
                    json.dumps(
                        {
                            k: round(v, 2) if isinstance(v, float) else v
                            for k, v in measure_many(home, instance, many, rows_per_model).items()
                        }
                    ),
                    flush=True,
                )
            if any(hostile):
                print(
                    json.dumps(
                        {
                            k: round(v, 2) if isinstance(v, float) else v
                            for k, v in measure_hostile(home, instance, *hostile, rows_per_model).items()
                        }
                    ),
                    flush=True,
                )
            for n in sizes:
                for r in range(repeats):
                    row = measure_drop(home, instance, f"bench/model-{n}-{r}", n)
                    print(
                        json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True
                    )
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
                block = "".join(
                    f'org/model-{m},q{j},"question {j}: {filler}",bench{j % 5},{(j * m) % 2}\n'
                    for j in range(q, q + 2000)
                    for m in range(50)
                )
                f.write(block)
                written += len(block)
                q += 2000
        code = (
            "import time, resource, json; from pathlib import Path; from "
            "locus_pipeline.intake import DropFolder, intake_file;"
            f"t = time.perf_counter(); r = intake_file(Path({str(path)!r}), DropFolder.at(Path({str(tmp)!r})));"
            "print(json.dumps({'status': r.status, 'rows': r.manifest.rows if r.manifest else 0, 'models': "
            "len(r.manifest.models) if r.manifest else 0,"
            "'seconds': time.perf_counter() - t, 'peak_rss_mb': "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))"
        )
        size = path.stat().st_size
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        return {"bytes": size, **result}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[128, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--big-gb", type=float, default=0.0, help="also time the intake of a generated CSV of this many GB"
    )
    parser.add_argument(
        "--many-models", type=int, default=0, help="also drop one file of this many models, then a good one"
    )
    parser.add_argument(
        "--rows-per-model", type=int, default=1, help="evaluations per model of the --many-models and --hostile-* files"
    )
    parser.add_argument(
        "--hostile-models", type=int, default=0, help="drop one file of this many models, then a good one"
    )
    parser.add_argument("--hostile-files", type=int, default=0, help="... and this many one-model files with it")
    args = parser.parse_args()
    if args.big_gb:
        big = bench_big(args.big_gb)
        print(json.dumps(big), flush=True)
    hostile = (args.hostile_models, args.hostile_files)
    rows = (
        bench_latency(args.sizes, args.repeats, args.many_models, args.rows_per_model, hostile)
        if args.sizes or args.many_models or any(hostile)
        else []
    )
    frame = pd.DataFrame(rows)
    if len(frame):
        print("\nmedian over repeats (seconds):")
        print(frame.groupby("evaluations").median().round(1).to_markdown())


if __name__ == "__main__":
    main()
