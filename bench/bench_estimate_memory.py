"""Memory and time of one newcomer's estimates step against its answer count (issue 68, item 1), and what an
onboarding round costs once the estimator is fitted (issue 69, item 5).

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_estimate_memory --sizes 1000 10000 100000 \
        --out bench/results/estimate_memory.json
    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_estimate_memory --rounds

``--rounds``: the estimator fitted on 28 MMLU-Pro models (all 12,032 questions), then the 29th asked in 8 rounds of 8
random questions: the time of one ``Estimator.observe`` (best of 3 x 10,000) and of each round (8 observes, the
prior's refresh, the capability), the rounds that reach a new power of two measuring the prior's error there.

Each size runs in a fresh process (``--one N``): an untrained LOCUS of the default shape (d 128, predictor hidden 64,
384-dim query encodings), N queries with random encodings, a pool of 16 models answering all of them, and one
newcomer answering all N: the estimator fitted on the pool (not counted), then the step a newcomer costs -- its
posterior and capability (Estimator.estimate) and its refined embedding with the Laplace spread
(Estimator.embedding: the encoder's error measured on 4 pool models, then L-BFGS and the Gauss-Newton Hessian). The
figures, each from that size's own process: the step's peak resident memory (VmHWM, reset through
/proc/self/clear_refs when the step starts, so the fit before it does not hide the step's own peak) and its rise over
the resident memory at the step's start; the whole process's peak (ru_maxrss of the fresh child: setup, fit and step);
the step's wall time. Torch at 1 thread. Each line also gives the load average when the size started.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def one(n: int, query_dim: int = 384, hidden: int = 64) -> dict:
    """The step at n answers in this process: {n, peak_mb (above the level before the step), seconds}."""
    import torch

    from locus_model.estimates import Estimator, EstimatorConfig
    from locus_model.model import Locus, LocusConfig
    from locus_model.query_groups import Blend, fit_query_groups
    from locus_model.router import Router

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = Locus(LocusConfig(query_dim=query_dim, predictor_hidden=hidden)).eval()
    router = Router(model, fit_query_groups(np.zeros((1, query_dim), np.float32)), Blend())
    enc = rng.normal(size=(n, query_dim)).astype(np.float32)
    bench = np.array(["a", "b", "c", "d"])[np.arange(n) % 4]
    pool = (rng.random((16, n)) < rng.uniform(0.3, 0.8, size=(16, 1))).astype(np.float32)
    est = Estimator(EstimatorConfig(spread_models=4)).fit(pool, bench, router=router, encodings=enc)
    answers = (np.arange(n), (rng.random(n) < 0.6).astype(np.float32))
    est.estimate([(answers[0][:64], answers[1][:64])])  # warm-up: libraries loaded, small buffers allocated
    est.embedding([(answers[0][:64], answers[1][:64])])
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from the resident set now
    start_mb = _status_mb("VmRSS")
    t0 = time.perf_counter()
    est.estimate([answers])
    est.embedding([answers])
    seconds = time.perf_counter() - t0
    step_peak_mb = _status_mb("VmHWM")
    process_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux: this child's peak
    return {
        "n": n,
        "step_peak_mb": round(step_peak_mb, 1),
        "step_rise_mb": round(step_peak_mb - start_mb, 1),
        "process_peak_mb": round(process_peak_mb, 1),
        "seconds": round(seconds, 2),
    }


def _status_mb(field: str) -> float:
    """A memory figure of /proc/self/status (VmRSS, VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"/proc/self/status has no {field}: this benchmark needs Linux")


def rounds() -> dict:
    """{fit_s, observe_us, round_s: [8 rounds]} (module docstring, ``--rounds``)."""
    import timeit

    from bench.common import load_suite
    from locus_model.estimates import Estimator

    matrix, _ = load_suite("mmlu")
    scores = matrix.scores.astype(np.float32)
    t0 = time.perf_counter()
    est = Estimator().fit(scores[:28], matrix.benchmarks)
    fit_s = time.perf_counter() - t0
    row = scores[28]
    order = np.random.default_rng(0).permutation(np.flatnonzero(~np.isnan(row)))
    post = est.empty_posterior()
    per = min(timeit.repeat(lambda: est.observe(post, 0, int(order[0]), 1.0), number=10000, repeat=3)) / 10000
    post, times = est.empty_posterior(), []
    for r in range(8):
        t = time.perf_counter()
        for q in order[8 * r : 8 * r + 8]:
            est.observe(post, 0, int(q), float(row[q]))
        idx = order[: 8 * r + 8]
        est.refresh(post, 0, (idx, row[idx]))
        est.capability(post)
        times.append(round(time.perf_counter() - t, 3))
    return {"fit_s": round(fit_s, 2), "observe_us": round(per * 1e6, 2), "round_s": times}


def measure(n: int, *, hidden: int = 64, query_dim: int = 384) -> dict:
    """``one(n)`` in a fresh process (so that the peak is this step's alone)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_estimate_memory",
            "--one",
            str(n),
            "--hidden",
            str(hidden),
            "--query-dim",
            str(query_dim),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--one", type=int, help="measure one size in this process and print its JSON line")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--query-dim", type=int, default=384)
    p.add_argument("--out", type=Path)
    p.add_argument("--rounds", action="store_true", help="the cost of an update and of a round (module docstring)")
    args = p.parse_args(argv)
    if args.rounds:
        print(json.dumps(rounds()))
        return 0
    if args.one:
        print(json.dumps(one(args.one, args.query_dim, args.hidden)))
        return 0
    rows, start = [], time.time()
    for i, n in enumerate(args.sizes):
        load = os.getloadavg()[0]
        rows.append({**measure(n, hidden=args.hidden, query_dim=args.query_dim), "load_at_start": round(load, 1)})
        row = rows[-1]
        print(
            f"{n} answers: step peak {row['step_peak_mb']} MB ({row['step_rise_mb']} MB above its start), process "
            f"peak {row['process_peak_mb']} MB, {row['seconds']} s; load {load:.1f} "
            f"({i + 1}/{len(args.sizes)}, {time.time() - start:.0f} s so far)",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "hidden": args.hidden, "query_dim": args.query_dim}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
