"""A small torch fit at 1 and at more intra-op threads on this machine as it is now (loaded or not): why the
evaluation pins each fit's threads and the latent baselines fit on one (locus_model.threads).

    python -m bench.bench_threads [--threads 1 2] [--repeats 3] [--busy 0]

The fit: 300 full-batch Adam steps of a logistic model of 2,000 rows x 64 features (the size of a small IRT fit,
evaluation/latent.py). Printed per thread count: best and median wall seconds over the repeats, run interleaved so
that the load is shared alike; the machine's cores, its 1-minute load average, the cores other processes keep busy
and the threads the one rule (locus_model.threads.choose_threads) chooses from them, which is also timed ("chosen").
``--busy N`` starts N busy Python loops beside the fits (stopped at the end) to measure a loaded machine on purpose.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

from locus_model.threads import choose_threads, default_jobs, machine, torch_threads

BUSY_LOOP = "t = 1.0\nwhile True:\n    t = t * 1.0000001 + 1\n"


def small_fit(steps: int = 300, rows: int = 2000, features: int = 64, seed: int = 0) -> float:
    """Wall seconds of ``steps`` Adam steps of a logistic model (rows x features), on the current thread count."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=gen)
    y = (torch.rand(rows, generator=gen) < 0.5).float()
    w = torch.zeros(features, requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.01)
    start = time.perf_counter()
    for _ in range(steps):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--busy", type=int, default=0, help="busy Python loops to start beside the fits")
    args = p.parse_args(argv)
    spinners = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(args.busy)]
    try:
        time.sleep(2 if spinners else 0)
        chosen = choose_threads()
        print(
            f"{chosen.cores} cores, load average {os.getloadavg()[0]:.1f}, {args.busy} busy loops started; chosen: "
            f"{chosen.describe()}; default jobs for 30 fits {default_jobs(chosen.cores, chosen.busy, 30)}"
        )
        counts = {f"{t} threads": t for t in args.threads} | {f"chosen ({chosen.threads})": chosen.threads}
        seconds: dict[str, list[float]] = {name: [] for name in counts}
        for r in range(args.repeats):
            for name, t in counts.items():
                with torch_threads(t):
                    seconds[name].append(small_fit())
            print(
                f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{name} {seconds[name][-1]:.2f} s" for name in counts),
                flush=True,
            )
        for name in counts:
            print(f"{name}: best {min(seconds[name]):.2f} s, median {statistics.median(seconds[name]):.2f} s")
        print(f"at the end: load average {os.getloadavg()[0]:.1f}, {machine()[1]:.1f} cores busy elsewhere")
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
