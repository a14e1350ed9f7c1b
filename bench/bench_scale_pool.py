"""A pool of 100,000 synthetic models embedded, stored and served, with the library's functions.

    .venv/bin/python -m bench.bench_scale_pool [--models 100000] [--evaluations 64] [--queries 4096]
        [--route-queries 200] [--threads 1] [--out FILE]

The pool: --models models, each evaluated on --evaluations of --queries random unit-norm 384-d query encodings
(MiniLM's width), its scores drawn from a planted ability (P(correct) = sigmoid(ability . query)); a random
default-size LOCUS (no training: the cost of embedding, storing and routing does not depend on the weights).
1. embed: `infer.embed_evaluation_sets` on every set (the precision the library picks on this CPU); wall and CPU
   time, and the process's peak resident memory (VmHWM) over its size before.
2. store: the pool as a Parquet table (model, embedding), written and read back.
3. exact top-10 neighbours of every model by Euclidean distance: `neighbours.nearest_neighbours`, blocks of rows
   against the whole pool (memory: 2**24 float32 distances at a time, never a models x models matrix).
4. serve: for each of --route-queries queries, `predict_proba` over all models and `routing.route` with cost
   (quality weight 0.9, random costs) and a fallback chain of 3 from the embeddings: per-query wall latency p50 / p99.
5. decide: `locus serve`'s whole decision (`Gateway.decide`: candidates, costs from the sizes in the names, scoring,
   route, the response body with its default ranking size) on a snapshot of the pool, --route-queries times; the
   scorer is `predict_proba` of a random query encoding (no encoder, no HTTP).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from locus_model.infer import embed_evaluation_sets, inference_precision, predict_proba
from locus_model.model import Locus, LocusConfig
from locus_model.neighbours import NEIGHBOUR_TILE, nearest_neighbours
from locus_model.routing import RoutingPolicy, route

DIM = 384


def _vm_mb(key: str) -> float:
    found = re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text())
    if found is None:
        raise RuntimeError(f"/proc/self/status has no {key} line: the bench measures memory on Linux only")
    return int(found.group(1)) / 1024


def latency_summary(seconds) -> dict:
    """p50 and p99 of per-query wall times (seconds), in ms to 0.1 (numpy's linear interpolation between ranks)."""
    ms = np.asarray(seconds, np.float64) * 1e3
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p99_ms": round(float(np.percentile(ms, 99)), 1)}


def synthetic_pool(models: int, evaluations: int, queries: int, seed: int = 0):
    """(encodings (Q, DIM), sets [(query indices, scores)] * models): planted abilities, Bernoulli scores."""
    rng = np.random.default_rng(seed)
    enc = rng.normal(size=(queries, DIM)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    sets = []
    for _ in range(models):
        idx = rng.choice(queries, evaluations, replace=False)
        ability = rng.normal(size=DIM).astype(np.float32)
        p = 1 / (1 + np.exp(-(enc[idx] @ ability)))
        sets.append((idx, (rng.random(evaluations) < p).astype(np.float32)))
    return enc, sets


def decide_latency(model: Locus, z: np.ndarray, enc: np.ndarray, queries: int) -> dict:
    """p50 / p99 of Gateway.decide over the whole pool (a Gateway without a home: the snapshot is made here)."""
    import asyncio

    from locus_model.routing import cost_info, cost_table
    from locus_pipeline.serve import ServeConfig
    from locus_pipeline.serve.batcher import Scored
    from locus_pipeline.serve.gateway import Gateway
    from locus_pipeline.serve.metrics import Metrics
    from locus_pipeline.serve.snapshot import Snapshot

    rng = np.random.default_rng(2)
    names = tuple(f"org/synthetic-{m:06d}-{rng.integers(1, 70)}b" for m in range(len(z)))  # sizes: the cost proxy
    from locus_model.query_groups import Blend, fit_query_groups
    from locus_model.router import Router as TrainedRouter

    trained = TrainedRouter(model, fit_query_groups(enc[:1]), Blend())  # one group, the predictor alone
    scorer = trained.scorer((z, np.zeros((len(z), 1), np.float32)))
    snap = Snapshot(
        key=(0, 0, 0),
        checkpoint_id="synthetic",
        encoder="synthetic",
        runtime="torch",
        pool_scorer=scorer,
        names=names,
        sources=("pool",) * len(z),
        costs=cost_table(names, cost_info(None, {})),
        upstreams={},
        output_tokens=256,
        loaded_at=time.time(),
        served=names,
    )

    class Batcher:  # predict_proba of a random encoding, as the batcher does for an encoded query
        async def score(self, snap: Snapshot, query: str) -> np.ndarray:
            return predict_proba(model, z, enc[rng.integers(len(enc))][None])[:, 0]

        async def score_full(self, snap: Snapshot, query: str) -> Scored:
            e = enc[rng.integers(len(enc))]
            return Scored(predict_proba(model, z, e[None])[:, 0], 0, e)

    router = object.__new__(Gateway)
    router.config, router.metrics = ServeConfig(policy=RoutingPolicy(quality_weight=0.9)), Metrics()
    router.batcher = Batcher()  # type: ignore[assignment]  # a stand-in with the two calls the gateway makes
    router.learning = None  # routing alone: the bench measures the decision, not learning
    router.single_model, router.serve_reason = None, "the router (a bench of the decision)"

    async def run() -> list[float]:
        latencies = []
        for _ in range(queries):
            t0 = time.perf_counter()
            routed = await router.decide(
                snap,
                "a query",
                candidates=None,
                max_cost=None,
                quality_weight=None,
                input_tokens=None,
                output_tokens=None,
            )
            latencies.append(time.perf_counter() - t0)
        assert routed.body["ranked"] == len(z)
        return latencies

    return {"queries": queries, "ranking_size": router.config.ranking_size, **latency_summary(asyncio.run(run()))}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=100_000)
    ap.add_argument("--evaluations", type=int, default=64, help="evaluations per model")
    ap.add_argument("--queries", type=int, default=4096)
    ap.add_argument("--route-queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Locus(LocusConfig(query_dim=DIM)).eval()
    enc, sets = synthetic_pool(args.models, args.evaluations, args.queries)
    out = {
        "models": args.models,
        "evaluations": args.evaluations,
        "threads": args.threads,
        "precision": inference_precision("cpu"),
    }

    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here
    rss0 = _vm_mb("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    z = embed_evaluation_sets(model, enc, sets)
    out["embed"] = {
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1),
        "peak_mb_over_start": round(_vm_mb("VmHWM") - rss0),
    }

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pool.parquet"
        t0 = time.perf_counter()
        pd.DataFrame({"model": [f"synthetic-{m:06d}" for m in range(len(z))], "embedding": list(z)}).to_parquet(path)
        back = np.stack(pd.read_parquet(path)["embedding"].to_numpy())
        out["store"] = {
            "wall_s": round(time.perf_counter() - t0, 1),
            "mb": round(path.stat().st_size / 2**20, 1),
            "round_trip_equal": bool(np.array_equal(back, z)),
        }

    t0, c0 = time.perf_counter(), time.process_time()
    neighbours, _ = nearest_neighbours(z, 10)
    out["neighbours"] = {
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1),
        "block_mb": round(NEIGHBOUR_TILE * 4 / 2**20),
    }

    rng = np.random.default_rng(1)
    costs = rng.uniform(0.1, 10, len(z))
    latencies, chosen = [], []
    for q in rng.choice(len(enc), args.route_queries):
        t0 = time.perf_counter()
        probs = predict_proba(model, z, enc[q : q + 1])[:, 0]  # (M,)
        decision = route(probs, costs, RoutingPolicy(quality_weight=0.9), embeddings=z, n_fallbacks=3)
        latencies.append(time.perf_counter() - t0)
        chosen.append(int(decision.chosen))
    out["route"] = {
        "queries": args.route_queries,
        **latency_summary(latencies),
        "distinct_chosen": len(set(chosen)),
        "chosen": chosen[:10],
    }
    out["decide"] = decide_latency(model, z, enc, args.route_queries)
    out["peak_rss_mb"] = round(_vm_mb("VmHWM"))  # the whole process from the embedding on: pool, model and all
    out["neighbours_of_model_0"] = neighbours[0].tolist()
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
