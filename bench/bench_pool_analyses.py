"""The analyses on large pools: wall time and peak memory of each analysis, in the library and in the pipeline.

Two modes:

``synthetic``: every function of locus_model.analysis on a synthetic pool of M models (random d-dim embeddings
with planted families, 0/1 labels and probabilities on Q test queries, an embedding function for the
resampling analyses), timed one at a time; peak memory is the process's peak RSS during the call above its RSS
at the start (the kernel's high-water mark, reset before each call).

    nice -n 10 .venv/bin/python -m bench.bench_pool_analyses synthetic --models 2001 10000

``pipeline``: `locus_job` (every asset but onboarding) on a long-format file with a models file, e.g. the
2,001-model metabench pool, in-process with a fresh LOCUS_HOME; per step: wall seconds from Dagster's event log,
and the process's peak RSS while the step ran (sampled every 0.1 s; the process holds torch, the sentence
encoder and the inputs, so the RSS at the step's start is shown beside it). ``--only A,B`` materializes just
those assets from the home's stored upstream (a second run on the same home).

    nice -n 10 .venv/bin/python -m bench.bench_pool_analyses pipeline --home HOME \
        --evaluations ../shared/data/metabench/evaluations.parquet --models-file ../shared/data/metabench/models.csv

Prints markdown tables (bench/README.md, "Analyses on the 2,001-model pool").
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

# the short training of the pipeline mode: only that every asset materializes and how long it takes matters here
SHORT_TRAINING = {"epochs": 3, "finetune_steps": 0, "select_from_epoch": 0}


# ----------------------------------------------------------------------------- pipeline mode


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssSampler(threading.Thread):
    """(timestamp, RSS, process CPU seconds) every `interval` seconds until stopped."""

    def __init__(self, interval: float = 0.1):
        super().__init__(daemon=True)
        self.interval, self._halt = interval, threading.Event()
        self.samples: list[tuple[float, int, float]] = []

    def run(self) -> None:
        while not self._halt.is_set():
            t = os.times()
            self.samples.append((time.time(), rss_bytes(), t.user + t.system))
            self._halt.wait(self.interval)

    def stop(self) -> list[tuple[float, int, float]]:
        self._halt.set()
        self.join()
        return self.samples


def run_pipeline(args) -> int:
    os.environ["LOCUS_HOME"] = str(args.home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import dagster as dg

    from locus_pipeline.definitions import defs
    from locus_pipeline.demo import step_windows
    from locus_pipeline.instance import prepare_dagster_home

    args.home.mkdir(parents=True, exist_ok=True)
    dagster_home = prepare_dagster_home(args.home)
    run_config = {
        "ops": {
            "raw_evaluations": {
                "config": {
                    "source": "long",
                    "path": str(args.evaluations.resolve()),
                    "models_file": str(args.models_file.resolve()),
                }
            },
            "query_encodings": {"config": {"encoder": args.encoder}},
        }
    }
    training = {} if args.default_training else dict(SHORT_TRAINING, epochs=args.epochs)
    if args.threads:
        training["threads"] = args.threads
    if training:
        run_config["ops"]["locus_checkpoint"] = {"config": training}
    selection = [dg.AssetKey(a) for a in args.only.split(",")] if args.only else None
    if selection:  # only the selected assets' config
        run_config["ops"] = {k: v for k, v in run_config["ops"].items() if k in args.only.split(",")}
    sampler = RssSampler()
    sampler.start()
    t0 = time.perf_counter()
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        result = (
            defs()
            .resolve_job_def("locus_job")
            .execute_in_process(
                instance=instance, run_config=run_config, raise_on_error=False, asset_selection=selection
            )
        )
        wall = time.perf_counter() - t0
        windows = step_windows(instance, result.run_id)
    samples = np.array(sampler.stop(), dtype=np.float64)  # (S, 3)
    print(f"locus_job {'succeeded' if result.success else 'FAILED'} in {wall:.0f} s; config {run_config}\n")
    print(
        "| asset (step) | wall s | CPU s | peak RSS during step, MB | RSS at step start, MB | ok |\n"
        "|---|---:|---:|---:|---:|---|"
    )
    for step, (a, b, ok) in sorted(windows.items(), key=lambda kv: kv[1][0]):
        inside = samples[(samples[:, 0] >= a) & (samples[:, 0] <= b)]
        before = samples[samples[:, 0] <= a]
        peak = inside[:, 1].max() if len(inside) else np.nan
        first = before[-1] if len(before) else samples[0]
        last = inside[-1] if len(inside) else first
        print(
            f"| {step} | {b - a:.1f} | {last[2] - first[2]:.1f} | {peak / 2**20:.0f} | {first[1] / 2**20:.0f} | "
            f"{'yes' if ok else 'FAILED'} |"
        )
    return 0 if result.success else 1


# ----------------------------------------------------------------------------- synthetic mode


def synthetic_pool(m: int, *, d: int = 64, q: int = 200, families: int = 40, seed: int = 0):
    """Embeddings (M, d) in `families` planted clusters, names, families, held-out probs/labels (M, Q), params_b."""
    rng = np.random.default_rng(seed)
    fam = rng.integers(0, families, size=m)
    centres = rng.normal(size=(families, d))
    z = centres[fam] + 0.3 * rng.normal(size=(m, d))
    w = rng.normal(size=(d, q)) / np.sqrt(d)
    logits = z @ w
    probs = 1 / (1 + np.exp(-logits))
    labels = (rng.random((m, q)) < probs).astype(np.float64)
    params = np.exp(rng.uniform(np.log(0.1), np.log(140), size=m))
    params[rng.random(m) < 0.1] = np.nan
    names = [f"org{f}/model-{i}" for i, f in enumerate(fam)]
    return z, names, [f"org{f}" for f in fam], probs, labels, params, w


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def measure(fn):
    """(result, wall seconds, peak RSS above the RSS at the start in bytes): the kernel's peak RSS is reset
    first (/proc/self/clear_refs), so nothing slows the call down (tracemalloc would, 2-3x on Python code)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed memory back to the kernel, so the start RSS is what is held
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    start = rss_bytes()
    t = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t
    return out, wall, peak_rss_bytes() - start


def run_synthetic(args) -> int:
    import pandas as pd

    from locus_model.analysis import (
        capability_search,
        distance_vs_disagreement,
        fallback,
        family_clustering,
        near_duplicates,
        portfolio_curve,
        resample_embeddings,
    )
    from locus_model.analysis.atlas import write_atlas

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for m in args.models:
        z, names, fams, probs, labels, params, w = synthetic_pool(m, q=args.queries)
        proj = np.linalg.pinv(w.T)  # (Q, d): embed_fn maps an evaluation set back to an embedding (numpy, cheap)

        def embed_fn(idx, scores):
            y = np.zeros(w.shape[1])
            y[idx] = 2 * scores - 1
            return proj @ y  # (d,)

        sets = [(np.arange(args.queries), labels[i]) for i in range(m)]
        benchmarks = np.array([f"b{j % 5}" for j in range(args.queries)])
        acc = pd.DataFrame({b: labels[:, benchmarks == b].mean(axis=1) for b in np.unique(benchmarks)}, index=names)
        ks = list(range(1, min(args.max_k, m) + 1))
        budgets = list(np.geomspace(np.nanmin(params), np.nansum(params), 12))
        calls: dict[str, Callable[[], object] | None] = {  # near_duplicates: set below, on resample_embeddings' draws
            "distance_vs_disagreement": lambda: distance_vs_disagreement(z, labels, names),
            "family_clustering": lambda: family_clustering(z, names, fams),
            f"portfolio_curve k_center (k 1..{ks[-1]})": lambda: portfolio_curve(z, probs, labels, names=names, ks=ks),
            f"portfolio_curve k_medoids (k 1..{ks[-1]})": lambda: portfolio_curve(
                z, probs, labels, names=names, ks=ks, method="k_medoids"
            ),
            "portfolio_curve coverage_greedy (12 budgets)": lambda: portfolio_curve(
                z, probs, labels, names=names, method="coverage_greedy", budgets_b=budgets, params_b=params
            ),
            "fallback": lambda: fallback(z, probs, labels, names=names),
            "resample_embeddings (R=8)": lambda: resample_embeddings(embed_fn, sets, 8, 0.5, 0),
            "near_duplicates (R=8)": None,
            "capability_search": lambda: capability_search(
                {"b0": 0.5, "b1": 0.7},
                benchmarks=benchmarks,
                embed_fn=embed_fn,
                pool_embeddings=z,
                pool_names=names,
                pool_per_benchmark_acc=acc,
            ),
            "write_atlas": lambda: write_atlas(
                out_dir / f"atlas_{m}.html",
                embeddings=z,
                names=names,
                families=fams,
                per_benchmark_acc=acc,
                portfolio=names[:15],
            ),
        }
        resampled = None
        for name, call in calls.items():
            if args.skip and any(s in name for s in args.skip):
                continue
            if name.startswith("near_duplicates"):
                assert resampled is not None  # resample_embeddings is called before it (the order of calls)
                drawn = resampled
                call = lambda: near_duplicates(drawn, names)  # noqa: E731
            result, wall, peak = measure(call)
            if name.startswith("resample_embeddings"):
                resampled = result
            extra = ""
            if hasattr(result, "plot"):
                _, plot_wall, _ = measure(lambda: result.plot(out_dir / f"{name.split()[0]}_{m}.png"))
                md = result.to_markdown()
                extra = f"plot {plot_wall:.1f} s, markdown {len(md) / 1e3:.0f} kB"
            elif name == "write_atlas":
                extra = f"HTML {result.stat().st_size / 1e6:.1f} MB"
            rows.append((m, name, wall, peak / 2**20, extra))
            print(f"| {m} | {name} | {wall:.2f} | {peak / 2**20:.0f} | {extra} |", flush=True)
    print("\n| models | analysis | wall s | peak RSS above start, MB | figure / report |\n|---:|---|---:|---:|---|")
    for m, name, wall, peak, extra in rows:
        print(f"| {m:,} | {name} | {wall:.2f} | {peak:.0f} | {extra} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("synthetic", help="time each analysis function on synthetic pools of M models")
    s.add_argument("--models", type=int, nargs="+", default=[2001, 10000])
    s.add_argument("--queries", type=int, default=200, help="test queries (metabench's test split: ~108)")
    s.add_argument("--max-k", type=int, default=50, help="largest portfolio on the k curves")
    s.add_argument("--skip", nargs="*", default=[], help="skip analyses whose name contains one of these")
    s.add_argument("--out-dir", default=Path(tempfile.gettempdir()) / "bench_pool_analyses")
    q = sub.add_parser("pipeline", help="time every asset of locus_job on a long-format file")
    q.add_argument("--home", type=Path, required=True, help="LOCUS_HOME (a fresh folder)")
    q.add_argument("--evaluations", type=Path, required=True)
    q.add_argument("--models-file", type=Path, required=True)
    q.add_argument("--encoder", default="all-MiniLM-L6-v2")
    q.add_argument("--epochs", type=int, default=SHORT_TRAINING["epochs"])
    q.add_argument(
        "--default-training",
        action="store_true",
        help="train locus_checkpoint with the library's TrainConfig defaults (what a user's run does; "
        "--epochs is then ignored)",
    )
    q.add_argument(
        "--threads",
        type=int,
        default=0,
        help="locus_checkpoint's torch threads (0: torch's default; 1 on a machine shared with other jobs)",
    )
    q.add_argument("--only", default="", help="comma-separated assets to materialize from the home's stored upstream")
    args = p.parse_args(argv)
    return run_synthetic(args) if args.mode == "synthetic" else run_pipeline(args)


if __name__ == "__main__":
    raise SystemExit(main())
