"""How embedding, scoring and nearest-neighbour search scale, with peak memory; writes a JSON and a PNG.

  .venv/bin/python -m bench.bench_scaling [--threads 1] [--max-models 100000]

- embed time and peak memory against evaluations per model (128 ... 16,384; 16 models) and against pool size
  (112 ... 10,000 models of 128 evaluations);
- score 4,096 queries against 112 ... --max-models models (the (M, Q) result is the only thing that grows);
- exact top-10 Euclidean nearest-neighbour search among 100,000 model embeddings (d = 128), numpy and torch,
  one query at a time (a router's request) and 1,000 at once.
Peak memory = rise of VmHWM (reset via /proc/self/clear_refs) over the resident set before the call, so the
result array counts too. One timed run per point after a small warm-up (these runs are long).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np
import torch

from locus_model.infer import embed_evaluation_sets, predict_proba
from locus_model.model import Locus, LocusConfig

D, Q_POOL = 768, 16384


def _vm(key: str) -> int:  # kB
    found = re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text())
    if found is None:
        raise RuntimeError(f"/proc/self/status has no {key} line: the bench measures memory on Linux only")
    return int(found.group(1))


def measure(fn) -> tuple[float, float]:  # seconds, peak MB over the start
    Path("/proc/self/clear_refs").write_text("5")
    rss0 = _vm("VmRSS")
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0, (_vm("VmHWM") - rss0) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-models", type=int, default=100_000)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "scaling.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Locus(LocusConfig(query_dim=D)).eval()
    rng = np.random.default_rng(0)
    enc = rng.normal(size=(Q_POOL, D)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)

    def sets(m: int, n: int):
        return [(rng.choice(Q_POOL, n, replace=False), (rng.random(n) > 0.5).astype(np.float32)) for _ in range(m)]

    embed_evaluation_sets(model, enc, sets(2, 256))  # warm-up
    res: dict = {"threads": args.threads, "embed_vs_n": [], "embed_vs_models": [], "score_vs_models": []}
    for n in (128, 512, 2048, 4096, 8192, 16384):
        s = sets(16, n)
        t, mb = measure(lambda: embed_evaluation_sets(model, enc, s))
        res["embed_vs_n"].append({"n": n, "models": 16, "seconds": t, "peak_mb": mb})
        print("embed n", res["embed_vs_n"][-1], flush=True)
    for m in (112, 1000, 3000, 10000):
        s = sets(m, 128)
        t, mb = measure(lambda: embed_evaluation_sets(model, enc, s))
        res["embed_vs_models"].append({"models": m, "n": 128, "seconds": t, "peak_mb": mb})
        print("embed models", res["embed_vs_models"][-1], flush=True)
    queries = enc[:4096]
    for m in (112, 1000, 10000, args.max_models):
        z = rng.normal(size=(m, model.config.d)).astype(np.float32)
        t, mb = measure(lambda: predict_proba(model, z, queries))
        res["score_vs_models"].append(
            {"models": m, "queries": 4096, "seconds": t, "peak_mb": mb, "result_mb": m * 4096 * 4 / 2**20}
        )
        print("score", res["score_vs_models"][-1], flush=True)

    # nearest neighbours among 100,000 model embeddings
    bank = rng.normal(size=(100_000, model.config.d)).astype(np.float32)
    norms = (bank**2).sum(1)
    bank_t, norms_t = torch.from_numpy(bank), torch.from_numpy(norms)

    def knn_np(q: np.ndarray, k: int = 10) -> np.ndarray:  # (b, d) -> (b, k), exact
        dist = norms[None] - 2 * q @ bank.T  # + |q|^2, the same for every candidate
        part = np.argpartition(dist, k, axis=1)[:, :k]
        return np.take_along_axis(part, np.argsort(np.take_along_axis(dist, part, 1), 1), 1)

    def knn_torch(q: torch.Tensor, k: int = 10) -> torch.Tensor:
        return torch.topk(norms_t[None] - 2 * q @ bank_t.T, k, dim=1, largest=False).indices

    q1, q1000 = bank[:1] + 0.01, bank[:1000] + 0.01
    assert (knn_np(q1)[0] == knn_torch(torch.from_numpy(q1))[0].numpy()).all()
    for name, fn in (
        ("numpy, 1 query", lambda: knn_np(q1)),
        ("torch, 1 query", lambda: knn_torch(torch.from_numpy(q1))),
        ("numpy, 1000 queries", lambda: knn_np(q1000)),
        ("torch, 1000 queries", lambda: knn_torch(torch.from_numpy(q1000))),
    ):
        fn()
        times = [measure(fn)[0] for _ in range(20 if "1 query" in name else 3)]
        res.setdefault("knn_100k", {})[name] = {"best_ms": 1e3 * min(times), "median_ms": 1e3 * float(np.median(times))}
        print("knn", name, res["knn_100k"][name], flush=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    plot(res, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, key, x, title in (
        (axes[0], "embed_vs_n", "n", "embed 16 models: evaluations per model"),
        (axes[1], "embed_vs_models", "models", "embed: models (128 evaluations each)"),
        (axes[2], "score_vs_models", "models", "score 4,096 queries: models"),
    ):
        rows = res[key]
        xs = [r[x] for r in rows]
        ax.loglog(xs, [r["seconds"] for r in rows], "o-", label="seconds")
        ax.loglog(xs, [max(r["peak_mb"], 1e-3) for r in rows], "s--", label="peak MB")
        if key == "score_vs_models":
            ax.loglog(xs, [r["result_mb"] for r in rows], ":", label="result MB")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(x)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"locus_model scaling, CPU, {res['threads']} thread(s)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


if __name__ == "__main__":
    main()
