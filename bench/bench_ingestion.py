"""Ingestion speed (issue 17): rows/s of read_evaluations (read + validate) on the MMLU-Pro Parquet matrix and a
generated 1M-row CSV, for the current reader and, in the same run, the reader at an older commit.

    python -m bench.bench_ingestion                 # current reader, and the reader at --old-ref (default 28136bf)
    python -m bench.bench_ingestion --old-ref none  # current reader only

Times are the best of --repeats warm runs (imports done once before). The CSV is generated once under
$TMPDIR/locus-bench-ingestion/ (100 models x 10,000 queries, 1,000,000 rows, ~120 chars of query text per row).
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import REPO
from locus_model.data import long_format as evaluations

MMLU_PRO = REPO.parent / "shared" / "data" / "mmlu-pro" / "evaluations.parquet"
SCRATCH = Path(tempfile.gettempdir()) / "locus-bench-ingestion"  # generated data: never in git
CSV = SCRATCH / "ingestion-1m.csv"


def generate_csv(path: Path, *, models: int = 100, queries: int = 10_000, seed: int = 0) -> Path:
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    q = np.tile(np.arange(queries), models)
    m = np.repeat(np.arange(models), queries)
    text = np.array(
        [
            f'Question {i}: what is {i} times {i % 97}, given that "x, y" are reals? Choose A, B, C or D.'
            for i in range(queries)
        ],
        dtype=object,
    )
    frame = pd.DataFrame(
        {
            "model": np.array([f"org/model-{i}" for i in range(models)], dtype=object)[m],
            "query_id": np.array([f"q{i}" for i in range(queries)], dtype=object)[q],
            "query": text[q],
            "benchmark": np.array(["math", "logic", "code", "law"], dtype=object)[q % 4],
            "score": rng.integers(0, 2, len(q)),
        }
    )
    frame.to_csv(path, index=False)
    return path


def load_old(ref: str):
    """locus_model.evaluations as it was at ``ref`` (git show), imported under another name."""
    source = subprocess.run(
        ["git", "show", f"{ref}:locus_model/evaluations.py"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout
    SCRATCH.mkdir(parents=True, exist_ok=True)
    path = SCRATCH / f"evaluations_{ref}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"evaluations_{ref}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{path}: not importable as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def measure(module, path: Path, repeats: int) -> tuple[int, float]:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        table = module.read_evaluations(path)
        table = table[0] if isinstance(table, tuple) else table  # (table, report) now; the old ref returns the table
        best = min(best, time.perf_counter() - start)
    return len(table), best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-ref", default="28136bf", help="git ref of the reader to compare with ('none': skip)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    inputs = [("MMLU-Pro parquet", MMLU_PRO), ("generated CSV", generate_csv(CSV))]
    readers = [("current", evaluations)]
    if args.old_ref != "none":
        readers.append((f"old {args.old_ref}", load_old(args.old_ref)))
    print(f"{'input':<18} {'reader':<14} {'rows':>10} {'seconds':>8} {'rows/s':>12}")
    for label, path in inputs:
        if not path.exists():
            print(f"{label:<18} (missing: {path})")
            continue
        for name, module in readers:
            repeats = args.repeats if name == "current" else 1  # the old reader takes tens of seconds
            rows, seconds = measure(module, path, repeats)
            print(f"{label:<18} {name:<14} {rows:>10,} {seconds:>8.2f} {rows / seconds:>12,.0f}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
