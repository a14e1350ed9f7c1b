"""Router serving load: POST /route over real HTTP to `locus serve` in a subprocess (dry run, no upstream).

    .venv/bin/python bench/bench_serve.py [--requests 2000] [--concurrency 16] [--threads 1] [--models 30]

1. Builds a home in a temporary folder: a random (untrained) checkpoint of the default LocusConfig size with the
   real all-MiniLM-L6-v2 encoder, a pool of --models models (the MMLU-Pro models file's names, parameter counts
   in warehouse/model_catalog.parquet, so costs are the parameter-count proxy) embedded with it. Untrained
   weights cost the same time as trained ones.
2. Starts `locus serve --home ... --threads N` in a subprocess and waits for /healthz.
3. Distinct short queries: --requests distinct MMLU-Pro question first lines (<= 200 characters; never sent
   before, so every request pays its sentence encoding), --concurrency at a time over keep-alive HTTP/1.1
   connections (a minimal asyncio client: httpx would spend more of the shared 2 cores than the server). Then
   as many requests drawn from 100 queries already sent (the encoding LRU answers: routing without the
   encoder). Then --long-requests distinct whole questions with their ten options (mean ~650 characters).
4. Prints client-side p50/p90/p99 latency, throughput, the server's own elapsed_ms, and the server's peak RSS
   (VmHWM). The client runs on the same machine and takes CPU from the server: figures are for both together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build(root: Path, n_models: int) -> None:
    from locus_pipeline.storage import LocusHome
    from tests.locus_pipeline.serve_home import build_home

    info = pd.read_csv(REPO / "data" / "mmlu-pro" / "models.csv")
    names = info["model"].astype(str).tolist()
    names += [f"extra-model-{i}" for i in range(max(0, n_models - len(names)))]
    names = names[:n_models]
    build_home(root, names, encoder="all-MiniLM-L6-v2", full_size=True, n_queries=64)
    catalog = pd.DataFrame({"model": names}).merge(info[["model", "params_b"]], on="model", how="left")
    LocusHome(root=str(root)).write_table("model_catalog", catalog)


def query_texts(n: int, seed: int = 0, *, short: bool = False) -> list[str]:
    """n distinct MMLU-Pro question texts: whole (question and its ten options), or ``short``: the question's
    first line, at most 200 characters (a chat-sized prompt)."""
    table = pd.read_parquet(REPO / "data" / "mmlu-pro" / "evaluations.parquet", columns=["query_id", "query"])
    texts = table.drop_duplicates("query_id")["query"].astype(str)
    if short:
        texts = texts.str.split("\n").str[0].str.slice(0, 200)
    texts = texts.drop_duplicates().tolist()
    if len(texts) < n:
        raise SystemExit(f"only {len(texts)} distinct queries; ask for fewer requests")
    rng = np.random.default_rng(seed)
    return [texts[i] for i in rng.permutation(len(texts))[:n]]


async def _post(reader, writer, host: str, body: bytes) -> tuple[int, bytes]:
    writer.write(b"POST /route HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def load(port: int, queries: list[str], concurrency: int) -> dict:
    """Send every query once, ``concurrency`` connections each sending one request after another."""
    latencies, server_ms, errors = [], [], []
    todo = iter(enumerate(queries))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _, text in todo:
                body = json.dumps({"query": text}).encode()
                start = time.perf_counter()
                status, raw = await _post(reader, writer, f"127.0.0.1:{port}", body)
                latencies.append(time.perf_counter() - start)
                if status != 200:
                    errors.append(raw[:200])
                else:
                    server_ms.append(json.loads(raw)["elapsed_ms"])
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    lat = 1000 * np.array(latencies)
    return {"requests": len(queries), "errors": len(errors), "wall_s": round(wall, 2),
            "throughput_rps": round(len(queries) / wall, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 1), "p90_ms": round(float(np.percentile(lat, 90)), 1),
            "p99_ms": round(float(np.percentile(lat, 99)), 1), "max_ms": round(float(lat.max()), 1),
            "server_elapsed_p50_ms": round(float(np.percentile(server_ms, 50)), 1) if server_ms else None,
            "server_elapsed_p99_ms": round(float(np.percentile(server_ms, 99)), 1) if server_ms else None,
            "first_error": errors[0].decode("utf-8", "replace") if errors else None}


def rss_mb(pid: int) -> dict:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmHWM", "VmRSS")):
            key, value = line.split(":")
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="distinct short queries, then as many cached ones")
    parser.add_argument("--long-requests", type=int, default=300,
                        help="distinct whole MMLU-Pro questions with their options (slow: ~160 tokens each)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads (--threads of locus serve)")
    parser.add_argument("--models", type=int, default=30)
    parser.add_argument("--port", type=int, default=18731)
    parser.add_argument("--warmup", type=int, default=64)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="locus-bench-serve-") as tmp:
        home = Path(tmp) / "home"
        t0 = time.perf_counter()
        build(home, args.models)
        print(f"home built in {time.perf_counter() - t0:.1f} s: {args.models} models, all-MiniLM-L6-v2", flush=True)
        texts = query_texts(args.requests + args.warmup, short=True)
        warm, distinct = texts[: args.warmup], texts[args.warmup:]
        long_texts = query_texts(args.long_requests, seed=1) if args.long_requests else []
        env = {**os.environ, "PYTHONPATH": str(REPO), "LOCUS_CACHE_DIR": str(Path(tmp) / "cache")}
        server = subprocess.Popen([sys.executable, "-m", "locus_pipeline.cli", "serve", "--home", str(home),
                                   "--port", str(args.port), "--threads", str(args.threads)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            t0 = time.perf_counter()
            while True:
                if server.poll() is not None:
                    raise SystemExit(f"the server exited: {server.stderr.read().decode()[-2000:]}")
                try:
                    health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{args.port}/healthz", timeout=1).read())
                    break
                except OSError:
                    time.sleep(0.2)
            print(f"server ready in {time.perf_counter() - t0:.1f} s: {health['pool_models']} models, cost basis "
                  f"{health['cost_basis']}, RSS {rss_mb(server.pid)}", flush=True)
            asyncio.run(load(args.port, warm, args.concurrency))
            fresh = asyncio.run(load(args.port, distinct, args.concurrency))
            rng = np.random.default_rng(1)
            seen = distinct[:100]
            cached = asyncio.run(load(args.port, [seen[i] for i in rng.integers(0, len(seen), args.requests)],
                                      args.concurrency))
            long = asyncio.run(load(args.port, long_texts, args.concurrency)) if long_texts else None
            memory = rss_mb(server.pid)
        finally:
            os.killpg(server.pid, signal.SIGINT)
            server.wait(timeout=30)
    result = {"concurrency": args.concurrency, "server_threads": args.threads, "models": args.models,
              "distinct_short_queries": fresh, "cached_queries": cached, "distinct_long_queries": long,
              "server_memory_mb": memory,
              "cpu_count": os.cpu_count()}
    print(json.dumps(result, indent=2))
    ok = fresh["p99_ms"] <= 50 and fresh["throughput_rps"] >= 200
    print(f"target p99 <= 50 ms and >= 200 requests/s (distinct short queries): {'met' if ok else 'missed'}")


if __name__ == "__main__":
    main()
