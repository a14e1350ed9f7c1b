"""The case's floor on any machine: `locus evaluate` on a case file under several thread settings and loads, the
verdict and interval of each, and whether they agree.

    python -m bench.bench_floor ../shared/data/mmlu-pro/case-8x500.json [--runs threads1 process2 busy] [--parallel]
        [more locus evaluate options, e.g. --methods locus,best_single,oracle: the verdict reads LOCUS and best single]

Runs (each a fresh `locus evaluate` process on the case's rows and prices, seed 0, 5 folds, one job):
- ``threads1``: ``--threads 1`` (every fit on one torch thread; the process too);
- ``process2``: the process at 2 torch threads (OMP_NUM_THREADS=2), ``--threads`` left at its default;
- ``busy``: the defaults beside a busy process (a Python loop this bench starts and stops);
- ``threads2``: ``--threads 2`` (every fit on two torch threads: float sums in another order, so other trained
  models; the run that tells whether the verdict survives a training's float noise).
The default is the first three: what a user gets whatever the machine. The figures and the wall seconds of each run
go to stdout and to ``--out`` (JSON). Each run writes its own result under bench/.cache/<case>/floor/;
``--summarize`` compares the results already there (runs made apart, e.g. one at a time on a busy machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.bench_case import case_files
from bench.common import CACHE, REPO, RESULTS

RUNS = {
    "threads1": (["--threads", "1"], {"OMP_NUM_THREADS": "1"}, False),
    "process2": ([], {"OMP_NUM_THREADS": "2"}, False),
    "busy": ([], {}, True),
    "threads2": (["--threads", "2"], {"OMP_NUM_THREADS": "2"}, False),
}
BUSY_LOOP = "import time\nt = time.time()\nwhile True:\n    t = t * 1.0000001 + 1\n"


def command(evaluations: Path, models: Path, out: Path, extra: list[str]) -> list[str]:
    """The `locus evaluate` command line of one run: the case as a new user runs it (bench/README.md)."""
    return [
        sys.executable,
        "-m",
        "locus_model.cli",
        "evaluate",
        "--evaluations",
        str(evaluations),
        "--models-file",
        str(models),
        "--folds",
        "5",
        "--seed",
        "0",
        "--jobs",
        "1",
        "--out",
        str(out),
        *extra,
    ]


def figures(result_path: Path) -> dict:
    """The verdict's figures of a result JSON, rounded as `locus evaluate` prints them, and the settings that matter."""
    result = json.loads(result_path.read_text())
    v = result["verdict"]
    return {
        "verdict": "pays" if v["pays"] else f"call {v['best_single']}",
        "figure": f"{v['delta']:+.1f} [{v['lo']:+.1f}, {v['hi']:+.1f}]",
        "delta": v["delta"],
        "lo": v["lo"],
        "hi": v["hi"],
        "cost_share": v["cost_share"],
        "locus_routing": result["methods"]["locus"]["all"]["routing_acc"]["mean"],
        "threads": result["settings"].get("threads"),
        "wall_s": result["wall_s"],
    }


def launch(
    name: str, evaluations: Path, models: Path, folder: Path, more: list[str]
) -> tuple[subprocess.Popen, subprocess.Popen | None]:
    extra, env, busy = RUNS[name]
    extra = [*extra, *more]
    log = open(folder / f"{name}.log", "w")
    spinner = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
    process = subprocess.Popen(
        command(evaluations, models, folder / f"{name}.json", extra),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )
    return process, spinner


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", type=Path)
    p.add_argument("--runs", nargs="+", choices=tuple(RUNS), default=["threads1", "process2", "busy"])
    p.add_argument(
        "--parallel",
        action="store_true",
        help="start every run at once (each is then beside the others: the figures must not change)",
    )
    p.add_argument(
        "--summarize",
        action="store_true",
        help="run nothing: compare the results of --runs already in bench/.cache/<case>/floor/",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="JSON of the figures (default bench/results/floor_<case>.json)"
    )
    args, more = p.parse_known_args(argv)  # the rest: more `locus evaluate` options, the same for every run
    folder = CACHE / args.case.stem / "floor"
    folder.mkdir(parents=True, exist_ok=True)
    evaluations, models = case_files(args.case, CACHE / args.case.stem)
    rows: dict[str, dict] = {}
    start = time.perf_counter()
    batches = [] if args.summarize else [args.runs] if args.parallel else [[name] for name in args.runs]
    if args.summarize:
        rows = {name: figures(folder / f"{name}.json") for name in args.runs if (folder / f"{name}.json").is_file()}
        if len(rows) < 2:
            raise SystemExit(f"--summarize: fewer than two of {args.runs} have a result in {folder}; run them first")
        for name, row in rows.items():
            print(
                f"{name:<9} {row['figure']:<22} {row['verdict']:<28} LOCUS {100 * row['locus_routing']:.1f}  "
                f"{row['wall_s']:7.0f} s"
            )
    for batch in batches:
        started = {name: (time.perf_counter(), *launch(name, evaluations, models, folder, more)) for name in batch}
        for name, (t0, process, spinner) in started.items():
            code = process.wait()
            if spinner is not None:
                spinner.kill()
                spinner.wait()
            if code != 0:
                print(f"{name}: locus evaluate exited {code}; its log: {folder / (name + '.log')}", file=sys.stderr)
                return code
            rows[name] = {**figures(folder / f"{name}.json"), "process_s": round(time.perf_counter() - t0, 1)}
            done = len(rows)
            eta = (time.perf_counter() - start) / done * (len(args.runs) - done)
            print(
                f"{name:<9} {rows[name]['figure']:<22} {rows[name]['verdict']:<28} LOCUS "
                f"{100 * rows[name]['locus_routing']:.1f}  {rows[name]['process_s']:7.0f} s  "
                f"[{done}/{len(args.runs)} runs, ETA {eta:.0f} s]",
                flush=True,
            )
    first = next(iter(rows.values()))
    same = all((r["figure"], r["verdict"]) == (first["figure"], first["verdict"]) for r in rows.values())
    print(f"the same verdict and interval in every run: {'yes' if same else 'NO'}")
    out = args.out or RESULTS / f"floor_{args.case.stem.replace('-', '_')}.json"
    out.write_text(
        json.dumps(
            {"case": args.case.name, "options": more, "runs": rows, "same": same, "load_at_end": os.getloadavg()[0]},
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
