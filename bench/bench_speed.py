"""Speed and peak memory of LOCUS inference and training on this machine, against a plain reimplementation.

  .venv/bin/python bench/bench_speed.py [--threads 1] [--repeats 3]

(a) embedding 112 models from 4,096 evaluations each, (b) scoring 4,096 queries against 112 models:
locus_model (masked batches, query-only work done once per query) vs bench/naive_locus.py (one model at a
time, no masks, every query reprojected per model). Both use the same random weights (paper config,
768-d queries) and their outputs are compared. Time: best of --repeats after one warm-up, in one process.
Peak memory: each case runs in a fresh subprocess; the figure is the peak resident set (VmHWM, reset via
/proc/self/clear_refs just before the call) minus the resident set before the call, i.e. what the call
itself adds, all allocators included (torch's CPU allocator is invisible to tracemalloc).
(c) training: seconds per epoch of train_locus with the default TrainConfig on a random 100-model x
5,000-query pool (768-d encodings, 80/20 query split), validation included.
The paper reports ~100 ms for (a) and ~20 ms for (b) on one V100.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from naive_locus import naive_embed_all, naive_predict_proba  # noqa: E402

from locus_model.model import Locus, LocusConfig, embed_evaluation_sets, predict_proba  # noqa: E402
from locus_model.train import TrainConfig, train_locus  # noqa: E402

M, N_EVALS, Q_POOL, Q_SCORE, D = 112, 4096, 8192, 4096, 768


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = Locus(LocusConfig(query_dim=D)).eval()
    rng = np.random.default_rng(seed)
    enc = rng.normal(size=(Q_POOL, D)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    sets = [(rng.choice(Q_POOL, N_EVALS, replace=False), (rng.random(N_EVALS) > 0.5).astype(np.float32))
            for _ in range(M)]
    return model, enc, sets


def _vm(key: str) -> int:  # kB
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def run_case(case: str, repeats: int) -> dict:
    """One measurement, meant to run in its own process."""
    model, enc, sets = _setup()
    enc_t = torch.from_numpy(enc)
    sets_t = [(torch.from_numpy(i), torch.from_numpy(y)) for i, y in sets]
    z = embed_evaluation_sets(model, enc, sets[:4])  # inputs for scoring (values do not matter for speed)
    z = np.repeat(z, M // 4, axis=0)
    queries = enc[:Q_SCORE]
    fn = {
        "embed_locus": lambda: embed_evaluation_sets(model, enc, sets),
        "embed_naive": lambda: naive_embed_all(model, enc_t, sets_t).numpy(),
        "score_locus": lambda: predict_proba(model, z, queries),
        "score_naive": lambda: naive_predict_proba(model, torch.from_numpy(z), torch.from_numpy(queries)).numpy(),
    }[case]
    Path("/proc/self/clear_refs").write_text("5")
    rss0 = _vm("VmRSS")
    out = fn()  # warm-up, and the memory measurement
    peak_mb = (_vm("VmHWM") - rss0) / 1024
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"case": case, "seconds": min(times), "peak_mb": peak_mb, "out": out[:8, :8].tolist()}


def run_training(epochs: int) -> dict:
    rng = np.random.default_rng(0)
    n_models, n_queries = 100, 5000
    enc = rng.normal(size=(n_queries, D)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    scores = (rng.random((n_models, n_queries)) > 0.5).astype(np.float32)
    is_val = rng.random(n_queries) < 0.2
    train = np.where(is_val[None], np.nan, scores)
    val = np.where(is_val[None], scores, np.nan)
    cfg = TrainConfig(epochs=epochs, patience=epochs, device="cpu")
    res = train_locus(enc, train, val, model_config=LocusConfig(query_dim=D), train_config=cfg, progress=False)
    secs = [h["seconds"] for h in res.history]
    return {"epochs": len(secs), "seconds_per_epoch": float(np.median(secs)), "config": cfg}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable on a shared machine)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train-epochs", type=int, default=3)
    ap.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case in this process
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.case:
        print(json.dumps(run_case(args.case, args.repeats)))
        return

    res = {}
    for case in ("embed_locus", "embed_naive", "score_locus", "score_naive"):
        cmd = [sys.executable, __file__, "--case", case, "--threads", str(args.threads), "--repeats", str(args.repeats)]
        res[case] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    for task in ("embed", "score"):
        a, b = np.array(res[f"{task}_locus"]["out"]), np.array(res[f"{task}_naive"]["out"])
        res[task + "_maxdiff"] = float(np.abs(a - b).max())
    print(f"torch {torch.__version__}, {args.threads} thread(s), best of {args.repeats}")
    print(f"{'task':<42}{'locus_model':>14}{'naive':>12}{'speed-up':>10}{'peak MB locus':>15}{'naive':>9}")
    for task, label in (("embed", f"(a) embed {M} models x {N_EVALS} evaluations"),
                        ("score", f"(b) score {Q_SCORE} queries x {M} models")):
        a, b = res[f"{task}_locus"], res[f"{task}_naive"]
        print(f"{label:<42}{a['seconds'] * 1e3:>11.0f} ms{b['seconds'] * 1e3:>9.0f} ms{b['seconds'] / a['seconds']:>9.1f}x"
              f"{a['peak_mb']:>15.0f}{b['peak_mb']:>9.0f}   (max |diff| {res[task + '_maxdiff']:.1e})")
    tr = run_training(args.train_epochs)
    c = tr["config"]
    print(f"(c) train_locus, 100 models x 5000 queries, default TrainConfig (batch_models={c.batch_models}, draws={c.draws}, "
          f"enc {c.enc_min}-{c.enc_max}, dec_batch={c.dec_batch}, val_set_max={c.val_set_max}): "
          f"{tr['seconds_per_epoch']:.2f} s/epoch (median of {tr['epochs']}, validation included)")


if __name__ == "__main__":
    main()
