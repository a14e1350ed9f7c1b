"""`make demo` wall time on a fresh LOCUS_HOME, step by step (the venv is set up beforehand: not timed).

    .venv/bin/python -m bench.bench_demo [--keep] [demo args, e.g. --size small]

Runs `python -m locus_pipeline.demo` in a new process with LOCUS_HOME in a fresh temporary folder (nothing cached:
no encodings, no checkpoint), so the figure is what a new user waits for after `make setup`. The demo prints every
step's wall time; this script adds the process's total (imports and Dagster start-up included) and its CPU time
(user + system, child processes included: on a machine shared with other jobs, what the demo itself costs).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # not bench.common, which loads torch into this process


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary LOCUS_HOME (its path is printed)")
    args, demo_args = parser.parse_known_args()
    home = Path(tempfile.mkdtemp(prefix="locus-bench-demo-"))
    cache = Path(tempfile.mkdtemp(prefix="locus-bench-cache-"))
    env = {**os.environ, "LOCUS_HOME": str(home), "LOCUS_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "locus_pipeline.demo", *demo_args],
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    lines = proc.stdout.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("locus_job ")), max(0, len(lines) - 30))
    print("\n".join(lines[first:]))
    print(
        f"\nmake demo after setup (fresh LOCUS_HOME, process total): {wall:.0f} s, exit code {proc.returncode}; "
        f"CPU time {cpu:.0f} s on {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )
    if args.keep:
        print(f"LOCUS_HOME kept at {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
