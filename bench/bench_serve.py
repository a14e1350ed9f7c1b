"""Gateway serving load: POST /route over real HTTP to `locus serve` in a subprocess (dry run, no upstream).

    .venv/bin/python -m bench.bench_serve [--runtimes torch,onnx-int8] [--requests 1000] [--concurrency 16]
        [--sequential 300] [--open-loop-rate 100] [--open-loop 1000] [--threads 0] [--models 30]
    .venv/bin/python -m bench.bench_serve --hostile [--sequential 300] [--hostile-clients 2]
    .venv/bin/python -m bench.bench_serve --runtimes onnx-int8 --learning both   (learning on, then --no-learn)

1. Builds a home in a temporary folder: a random (untrained) checkpoint of the default LocusConfig size with the
   real all-MiniLM-L6-v2 encoder, a pool of --models models (the MMLU-Pro models file's names, parameter counts
   in warehouse/model_catalog.parquet, so costs are the parameter-count proxy) embedded with it. Untrained
   weights cost the same time as trained ones.
2. For each of --runtimes (in one run, so that their figures share the machine's load), starts `locus serve
   --home ... --threads N --encoder-runtime R` in a subprocess and waits for /healthz, then sends (every query
   distinct and never sent before, so every request pays its sentence encoding; MMLU-Pro question first lines
   <= 200 characters unless said otherwise):
   - sequential: --sequential requests one after another (latency at low load);
   - closed loop: --requests at --concurrency at a time over keep-alive HTTP/1.1 connections (a minimal
     asyncio client: httpx would spend more of the shared cores than the server);
   - cached: as many requests drawn from 100 queries already sent (the encoding LRU answers: routing alone);
   - beside the closed-loop and cached runs of a learning server, a grader posts --outcomes-per-s outcomes a second
     (POST /v1/outcomes, one each) of the answers routed so far; with --learning both the last lines hold learning
     on against off (issue 76: within 5% in throughput and p99);
   - open loop: --open-loop requests with Poisson arrivals at --open-loop-rate per second, each timed from its
     scheduled arrival (a late client counts against the server, as a user would see it);
   - whole: --long-requests distinct whole questions with their ten options (mean ~650 characters), at
     --concurrency.
   With --hostile instead: the router in front of hostile upstreams (hostile_upstreams below), a tiny hashing-encoder
   home: a good client's latency alone and while hostile requests loop, and the router's peak RSS.
3. Prints client-side p50/p90/p99 latency, throughput, the server's own elapsed_ms and peak RSS (VmHWM), and the
   machine's load average. The client runs on the same machine and takes CPU from the server: figures are for
   both together.
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
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]  # not bench.common, which loads torch into this process


def build(root: Path, n_models: int, runtime: str) -> None:
    from locus_pipeline.storage import LocusHome
    from tests.locus_pipeline.serve_home import build_home

    info = pd.read_csv(REPO / "data" / "mmlu-pro" / "models.csv")
    names = info["model"].astype(str).tolist()
    names += [f"extra-model-{i}" for i in range(max(0, n_models - len(names)))]
    names = names[:n_models]
    build_home(root, names, encoder="all-MiniLM-L6-v2", full_size=True, n_queries=64, runtime=runtime)
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


async def _post(reader, writer, host: str, body: bytes, path: bytes = b"/route") -> tuple[int, bytes]:
    writer.write(
        b"POST " + path + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    await writer.drain()
    first = await reader.readline()
    if not first:  # the server closed this keep-alive connection (idle past its keep-alive timeout)
        raise ConnectionResetError("connection closed by the server before a response")
    status = int(first.split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


def summarize(latencies: list[float], server_ms: list[float], errors: list[bytes], wall: float, n: int) -> dict:
    lat = 1000 * np.array(latencies)
    return {
        "requests": n,
        "errors": len(errors),
        "wall_s": round(wall, 2),
        "throughput_rps": round(n / wall, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 1),
        "p90_ms": round(float(np.percentile(lat, 90)), 1),
        "p99_ms": round(float(np.percentile(lat, 99)), 1),
        "max_ms": round(float(lat.max()), 1),
        "server_elapsed_p50_ms": round(float(np.percentile(server_ms, 50)), 1) if server_ms else None,
        "server_elapsed_p99_ms": round(float(np.percentile(server_ms, 99)), 1) if server_ms else None,
        "first_error": errors[0].decode("utf-8", "replace") if errors else None,
    }


async def load(port: int, queries: list[str], concurrency: int, *, outcomes_per_s: float = 0.0) -> dict:
    """Send every query once, ``concurrency`` connections each sending one request after another; with
    ``outcomes_per_s`` a grader beside them posts that many outcomes a second (one per POST /v1/outcomes) of the
    answers routed so far (a learning server: its request ids)."""
    latencies, server_ms, errors = [], [], []
    issued: list[str] = []  # request ids of answers not graded yet
    done = asyncio.Event()
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
                    answer = json.loads(raw)
                    server_ms.append(answer["elapsed_ms"])
                    if "request_id" in answer:
                        issued.append(answer["request_id"])
        finally:
            writer.close()

    start = time.perf_counter()
    workers = asyncio.gather(*(worker() for _ in range(concurrency)))
    graders = [  # GRADERS connections, each at its share of the rate: one waits on its outcome's sync write
        asyncio.ensure_future(grade(port, issued, outcomes_per_s / GRADERS, done, seed=i))
        for i in range(GRADERS if outcomes_per_s > 0 else 0)
    ]
    await workers
    done.set()
    out = summarize(latencies, server_ms, errors, time.perf_counter() - start, len(queries))
    if outcomes_per_s > 0:
        graded = await asyncio.gather(*graders)
        statuses: dict[int, int] = {}
        for g in graded:
            for status, n in g["statuses"].items():
                statuses[status] = statuses.get(status, 0) + n
        out["outcomes"] = {
            "posted": sum(g["posted"] for g in graded),
            "per_s": round(sum(g["per_s"] for g in graded), 1),
            "statuses": statuses,
        }
    return out


GRADERS = 4


async def grade(port: int, issued: list[str], rate: float, done: asyncio.Event, seed: int = 0) -> dict:
    """Post one outcome (score 0 or 1 at random) every 1 / ``rate`` s for the newest ungraded request id, until
    ``done``: the graded traffic beside the routed one (issue 76: outcomes at 100/s alongside)."""
    rng = np.random.default_rng(seed)
    statuses: dict[int, int] = {}
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start, sent = time.perf_counter(), 0
    try:
        while not done.is_set():
            due = start + sent / rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            if not issued:
                await asyncio.sleep(0.001)
                continue
            body = json.dumps({"request_id": issued.pop(), "score": float(rng.random() < 0.5)}).encode()
            status, _ = await _post(reader, writer, f"127.0.0.1:{port}", body, b"/v1/outcomes")
            statuses[status] = statuses.get(status, 0) + 1
            sent += 1
    finally:
        writer.close()
    wall = time.perf_counter() - start
    return {"posted": sent, "per_s": round(sent / wall, 1), "statuses": statuses}


async def open_loop(port: int, queries: list[str], rate: float, seed: int = 0) -> dict:
    """Poisson arrivals at ``rate`` per second, whatever the answers do; each request on an idle keep-alive
    connection (a new one when none is idle), timed from its scheduled arrival."""
    latencies, server_ms, errors = [], [], []
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []  # open connections, free to reuse
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, len(queries)))

    async def one(text: str, due: float) -> None:
        body = json.dumps({"query": text}).encode()
        conn = idle.pop() if idle else await asyncio.open_connection("127.0.0.1", port)
        try:
            status, raw = await _post(*conn, f"127.0.0.1:{port}", body)
        except (ConnectionError, asyncio.IncompleteReadError):
            # a pooled connection the server closed while it sat idle (uvicorn's keep-alive timeout): as an HTTP
            # client's pool does, the request is sent again once on a fresh connection; its latency still counts
            # from the scheduled arrival
            conn[1].close()
            conn = await asyncio.open_connection("127.0.0.1", port)
            status, raw = await _post(*conn, f"127.0.0.1:{port}", body)
        latencies.append(time.perf_counter() - due)
        idle.append(conn)
        if status != 200:
            errors.append(raw[:200])
        else:
            server_ms.append(json.loads(raw)["elapsed_ms"])

    start = time.perf_counter()
    tasks = []
    for text, at in zip(queries, arrivals):
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(text, start + at)))
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    for _, writer in idle:
        writer.close()
    out = summarize(latencies, server_ms, errors, wall, len(queries))
    out["offered_rps"] = rate
    return out


def cpu_seconds(pid: int) -> tuple[float, float]:
    """The process's (user, system) CPU time so far (every thread), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def measured(pid: int, run) -> dict:
    """``asyncio.run(run)``'s summary with the server's CPU time per request beside it (what the request costs the
    server, whatever the client on the same cores does)."""
    user, system = cpu_seconds(pid)
    out = asyncio.run(run)
    user_after, system_after = cpu_seconds(pid)
    n = out["requests"]
    out["server_cpu_ms_per_request"] = round(1000 * (user_after - user + system_after - system) / n, 3)
    out["server_system_ms_per_request"] = round(1000 * (system_after - system) / n, 3)  # the kernel's share
    return out


async def outcome_cost(port: int, pid: int, queries: list[str]) -> dict:
    """The server's CPU time per outcome, outcomes alone: route ``queries`` one after another, then post one outcome
    for each of their answers one after another, the server's user and system time over the posts only."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    host = f"127.0.0.1:{port}"
    try:
        ids = [
            json.loads((await _post(reader, writer, host, json.dumps({"query": q}).encode()))[1])["request_id"]
            for q in queries
        ]
        user, system = cpu_seconds(pid)
        start, statuses = time.perf_counter(), dict[int, int]()
        for i, rid in enumerate(ids):
            body = json.dumps({"request_id": rid, "score": float(i % 2)}).encode()
            status, _ = await _post(reader, writer, host, body, b"/v1/outcomes")
            statuses[status] = statuses.get(status, 0) + 1
        wall = time.perf_counter() - start
        user_after, system_after = cpu_seconds(pid)
    finally:
        writer.close()
    n = len(ids)
    return {
        "outcomes": n,
        "statuses": statuses,
        "wall_s": round(wall, 2),
        "server_user_ms_per_outcome": round(1000 * (user_after - user) / n, 3),
        "server_system_ms_per_outcome": round(1000 * (system_after - system) / n, 3),
    }


def rss_mb(pid: int) -> dict:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmHWM", "VmRSS")):
            key, value = line.split(":")
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


ENCODER_ALONE = """
import json, sys, time
from locus_model.data.encoding import load_encoder
runtime, threads, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
texts = json.loads(sys.stdin.read())
encoder = load_encoder("all-MiniLM-L6-v2", runtime, threads=threads)
encoder.encode(texts[:batch], batch)  # warm-up: the session and its first allocations
t0 = time.perf_counter()
for start in range(0, len(texts), batch):
    encoder.encode(texts[start : start + batch], batch)
print(json.dumps({"throughput_qps": round(len(texts) / (time.perf_counter() - t0), 1), "queries": len(texts)}))
"""


def encoder_alone(texts: list[str], runtime: str, threads: int, batch: int) -> dict:
    """The query encoder's own batched throughput (no HTTP, no routing) in a fresh process, as the server's is (in
    this process, after building the home, it measured a tenth of that): ``texts`` in batches of ``batch`` on
    ``threads`` threads, what the router's 16-way figure is held against (issue 76: at least 80%)."""
    out = subprocess.run(
        [sys.executable, "-c", ENCODER_ALONE, runtime, str(threads), str(batch)],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "batch": batch}


def serve_one(home: Path, tmp: str, runtime: str, args, texts: dict, extra: tuple[str, ...] = ()) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOCUS_CACHE_DIR": str(Path(tmp) / "cache")}
    import socket

    with socket.socket() as probe:  # a server left on the port would answer /healthz and be measured instead
        if probe.connect_ex(("127.0.0.1", args.port)) == 0:
            raise SystemExit(f"port {args.port} is in use: stop what listens there, or pass --port")
    log_path = Path(tmp) / f"serve-{runtime}.log"  # a file, not a pipe: a full pipe nobody reads blocks the server
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locus_pipeline.cli",
            "serve",
            "--home",
            str(home),
            "--port",
            str(args.port),
            "--threads",
            str(args.threads),
            "--encoder-runtime",
            runtime,
            "--batch-wait-ms",
            str(args.batch_wait_ms),
            *extra,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_path.open("wb"),
        start_new_session=True,
    )
    try:
        t0 = time.perf_counter()
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the server exited: {log_path.read_text(errors='replace')[-2000:]}")
            try:
                health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{args.port}/healthz", timeout=1).read())
                break
            except OSError:
                time.sleep(0.2)
        print(
            f"[{runtime}] server ready in {time.perf_counter() - t0:.1f} s: {health['pool_models']} models, cost "
            f"basis {health['cost_basis']}, RSS {rss_mb(server.pid)}, load {os.getloadavg()}",
            flush=True,
        )
        out: dict[str, Any] = {"load_before": os.getloadavg()}
        asyncio.run(load(args.port, texts["warm"], args.concurrency))
        out["sequential_short"] = asyncio.run(load(args.port, texts["sequential"], 1))
        print(f"[{runtime}] sequential {out['sequential_short']}", flush=True)
        grading = 0.0 if "--no-learn" in extra else args.outcomes_per_s  # a server without learning takes none
        out["concurrent_short"] = measured(
            server.pid, load(args.port, texts["distinct"], args.concurrency, outcomes_per_s=grading)
        )
        print(f"[{runtime}] {args.concurrency}-way {out['concurrent_short']}", flush=True)
        # the encoder alone on other distinct texts of the same kind, right after, beside the idle server
        out["encoder_alone"] = encoder_alone(texts["encoder"], runtime, args.threads, args.concurrency)
        share = out["concurrent_short"]["throughput_rps"] / out["encoder_alone"]["throughput_qps"]
        out["routed_share_of_encoder"] = round(share, 3)
        print(f"[{runtime}] encoder alone {out['encoder_alone']}; routed / encoder {share:.2f}", flush=True)
        rng = np.random.default_rng(1)
        seen = texts["distinct"][:100]
        out["cached"] = measured(
            server.pid,
            load(
                args.port,
                [seen[i] for i in rng.integers(0, len(seen), len(texts["distinct"]))],
                args.concurrency,
                outcomes_per_s=grading,
            ),
        )
        print(f"[{runtime}] cached {out['cached']}", flush=True)
        if grading and args.outcome_cost:  # a learning server: what one outcome costs it, outcomes alone
            seen = texts["distinct"][: args.outcome_cost]
            out["outcome_cost"] = asyncio.run(outcome_cost(args.port, server.pid, seen))
            print(f"[{runtime}] outcomes alone {out['outcome_cost']}", flush=True)
        if texts["open"]:  # --open-loop 0: none
            out["open_loop_short"] = asyncio.run(open_loop(args.port, texts["open"], args.open_loop_rate))
            print(f"[{runtime}] open loop {out['open_loop_short']}", flush=True)
        if texts["long"]:
            out["concurrent_whole"] = asyncio.run(load(args.port, texts["long"], args.concurrency))
            print(f"[{runtime}] whole {out['concurrent_whole']}", flush=True)
        out["server_memory_mb"] = rss_mb(server.pid)
        out["load_after"] = os.getloadavg()
        out["server_log_bytes"] = log_path.stat().st_size
        return out
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=30)


HOSTILE = ("endless_200", "huge_error", "huge_line", "blank_lines", "deep_error")


def hostile_upstreams():
    """One FastAPI app, one path prefix per behaviour: /good (a small answer) and each of HOSTILE: a 200 JSON body
    that never ends, a 500 whose body never ends, an event stream of one endless line, blank keep-alive lines
    forever, a 600-deep JSON error."""
    from fastapi import FastAPI
    from fastapi.responses import Response, StreamingResponse

    app = FastAPI()
    block = b" " * (64 << 10)

    async def forever(head: bytes, chunk: bytes, pause: float = 0.0):
        yield head
        while True:
            await asyncio.sleep(pause)
            yield chunk

    @app.post("/{kind}/v1/chat/completions")
    async def chat(kind: str):
        if kind == "endless_200":
            return StreamingResponse(forever(b'{"a": "', block), media_type="application/json")
        if kind == "huge_error":
            return StreamingResponse(forever(b'{"error": "', block), status_code=500, media_type="application/json")
        if kind == "huge_line":
            return StreamingResponse(forever(b"data: ", b"x" * (64 << 10)), media_type="text/event-stream")
        if kind == "blank_lines":
            return StreamingResponse(forever(b"\n", b"\n", 0.01), media_type="text/event-stream")
        if kind == "deep_error":
            return Response("[" * 600 + "]" * 600, status_code=500, media_type="application/json")
        return {"object": "chat.completion", "model": "good", "choices": [{"index": 0, "message": {"content": "ok"}}]}

    return app


def hostile(args) -> dict:
    """Good-client p50 alone, then while ``--hostile-clients`` per behaviour loop on the hostile upstreams (pinned,
    no fallbacks), and the router's peak RSS."""
    import threading

    import httpx
    import yaml

    from tests.locus_pipeline.serve_home import ServerThread, build_home

    names = ["good-1b", *HOSTILE]
    with tempfile.TemporaryDirectory(prefix="locus-bench-hostile-") as tmp, ServerThread(hostile_upstreams()) as up:
        build_home(Path(tmp) / "home", names)
        config = Path(tmp) / "models.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "defaults": {"timeout_s": 10},
                    "models": {n: {"base_url": f"{up.url}/{'good' if n == 'good-1b' else n}/v1"} for n in names},
                }
            )
        )
        log_path = Path(tmp) / "serve.log"
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locus_pipeline.cli",
                "serve",
                "--home",
                str(Path(tmp) / "home"),
                "--port",
                str(args.port),
                "--models-config",
                str(config),
            ],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
            stderr=log_path.open("wb"),
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{args.port}"
        try:
            while True:
                if server.poll() is not None:
                    raise SystemExit(f"the server exited: {log_path.read_text(errors='replace')[-2000:]}")
                try:
                    urllib.request.urlopen(f"{url}/healthz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)

            def good_p50(n: int) -> dict:
                times, codes = [], []
                with httpx.Client(base_url=url, timeout=60) as client:
                    for i in range(n):
                        t = time.perf_counter()
                        r = client.post(
                            "/v1/chat/completions",
                            json={"model": "good-1b", "messages": [{"role": "user", "content": f"question {i}"}]},
                        )
                        times.append(1000 * (time.perf_counter() - t))
                        codes.append(r.status_code)
                return {
                    "p50_ms": round(float(np.percentile(times, 50)), 2),
                    "p99_ms": round(float(np.percentile(times, 99)), 2),
                    "non_200": sum(c != 200 for c in codes),
                }

            good_p50(20)  # warm
            alone = good_p50(args.sequential)
            stop = threading.Event()
            outcomes: dict[str, list[int]] = {k: [] for k in HOSTILE}  # kind -> the status codes it got

            def attack(kind: str) -> None:
                with httpx.Client(base_url=url, timeout=120) as client:
                    while not stop.is_set():
                        r = client.post(
                            "/v1/chat/completions",
                            json={
                                "model": kind,
                                "stream": kind in ("huge_line", "blank_lines"),
                                "fallbacks": False,
                                "messages": [{"role": "user", "content": "attack"}],
                            },
                        )
                        outcomes[kind].append(r.status_code)

            threads = [
                threading.Thread(target=attack, args=(k,), daemon=True)
                for k in HOSTILE
                for _ in range(args.hostile_clients)
            ]
            for t in threads:
                t.start()
            time.sleep(2)  # the attacks under way
            during = good_p50(args.sequential)
            stop.set()
            for t in threads:
                t.join(60)
            return {
                "good_alone": alone,
                "good_during_attack": during,
                "router_memory_mb": rss_mb(server.pid),
                "hostile_statuses": {k: sorted(set(v)) for k, v in outcomes.items()},
                "hostile_requests": {k: len(v) for k, v in outcomes.items()},
            }
        finally:
            os.killpg(server.pid, signal.SIGINT)
            server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", default="torch,onnx-int8", help="encoder runtimes, each served in turn")
    parser.add_argument("--requests", type=int, default=1000, help="distinct short queries at --concurrency")
    parser.add_argument("--sequential", type=int, default=300, help="distinct short queries one after another")
    parser.add_argument("--open-loop", type=int, default=1000, help="distinct short queries of the open-loop run")
    parser.add_argument("--open-loop-rate", type=float, default=100.0, help="Poisson arrivals per second")
    parser.add_argument(
        "--long-requests",
        type=int,
        default=200,
        help="distinct whole MMLU-Pro questions with their options (~160 tokens each)",
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--threads", type=int, default=0, help="the server's CPU threads (--threads of locus serve; 0: its default)"
    )
    parser.add_argument("--batch-wait-ms", type=float, default=2.0, help="--batch-wait-ms of locus serve")
    parser.add_argument("--models", type=int, default=30)
    parser.add_argument("--port", type=int, default=18731)
    parser.add_argument("--warmup", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="also write the result JSON here")
    parser.add_argument(
        "--learning",
        choices=["on", "off", "both"],
        default="on",
        help="learning from outcomes (request ids, the decision log, the learned P, exploration at "
        "its default budget) on, off (--no-learn), or both in turn per runtime",
    )
    parser.add_argument(
        "--outcomes-per-s",
        type=float,
        default=100.0,
        help="outcomes a grader posts a second beside the 16-way and cached runs of a learning server (0: none)",
    )
    parser.add_argument(
        "--outcome-cost",
        type=int,
        default=400,
        help="a learning server: route this many cached queries, then post their outcomes one after another and "
        "print the server's CPU per outcome (0: not measured; at most the outcome rate limit's burst)",
    )
    parser.add_argument("--hostile", action="store_true", help="the hostile-upstream run instead (see above)")
    parser.add_argument("--hostile-clients", type=int, default=2, help="clients looping per hostile behaviour")
    args = parser.parse_args()
    if args.hostile:
        result = hostile(args)
        print(json.dumps(result, indent=2))
        return
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    settings: dict[str, list[tuple[str, ...]]] = {"on": [()], "off": [("--no-learn",)], "both": [(), ("--no-learn",)]}
    learning = settings[args.learning]  # the server's extra flags, one run each
    runs = [(r, extra) for r in runtimes for extra in learning]

    with tempfile.TemporaryDirectory(prefix="locus-bench-serve-") as tmp:
        home = Path(tmp) / "home"
        t0 = time.perf_counter()
        build(home, args.models, runtimes[-1])
        print(f"home built in {time.perf_counter() - t0:.1f} s: {args.models} models, all-MiniLM-L6-v2", flush=True)
        results = {}
        for k, (runtime, extra) in enumerate(runs):  # distinct texts per run: no server sees a query twice
            per = args.warmup + args.sequential + args.requests + args.open_loop + args.requests
            pool = query_texts(per * len(runs), short=True)[k * per : (k + 1) * per]
            cut = np.cumsum([args.warmup, args.sequential, args.requests, args.open_loop])
            longs = query_texts(args.long_requests * len(runs), seed=1) if args.long_requests else []
            texts = {
                "warm": pool[: cut[0]],
                "sequential": pool[cut[0] : cut[1]],
                "distinct": pool[cut[1] : cut[2]],
                "open": pool[cut[2] : cut[3]],
                "encoder": pool[cut[3] :],  # as many as "distinct", never sent to the server
                "long": longs[k * args.long_requests : (k + 1) * args.long_requests],
            }
            name = runtime + ("/learning-off" if extra else ("/learning-on" if args.learning == "both" else ""))
            results[name] = serve_one(home, tmp, runtime, args, texts, extra)
    result = {
        "concurrency": args.concurrency,
        "server_threads": args.threads,
        "models": args.models,
        "batch_wait_ms": args.batch_wait_ms,
        "cpu_count": os.cpu_count(),
        "runtimes": results,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    for runtime, r in results.items():
        checks = {
            "sequential p99 <= 50 ms": r["sequential_short"]["p99_ms"] <= 50,
            f"{args.concurrency}-way >= 200 q/s": r["concurrent_short"]["throughput_rps"] >= 200,
            f"{args.concurrency}-way >= 80% of the encoder alone": r["routed_share_of_encoder"] >= 0.8,
        }
        if "open_loop_short" in r:
            checks["open-loop p99 <= 100 ms, no error"] = (
                r["open_loop_short"]["p99_ms"] <= 100 and not r["open_loop_short"]["errors"]
            )
        print(f"{runtime}: " + "; ".join(f"{k}: {'met' if v else 'missed'}" for k, v in checks.items()))
    for runtime in runtimes:
        on, off = results.get(f"{runtime}/learning-on"), results.get(f"{runtime}/learning-off")
        if on is None or off is None:
            continue
        for run in ("concurrent_short", "cached"):
            rps = on[run]["throughput_rps"] / off[run]["throughput_rps"]
            p99 = on[run]["p99_ms"] / off[run]["p99_ms"]
            met = rps >= 0.95 and p99 <= 1.05
            cpu = on[run]["server_cpu_ms_per_request"] / off[run]["server_cpu_ms_per_request"]
            print(
                f"{runtime} {run}: learning on / off throughput {rps:.2f}, p99 {p99:.2f}, server CPU per request "
                f"{cpu:.2f} (outcomes "
                f"{on[run].get('outcomes', {}).get('per_s', 0)}/s): within 5%: {'met' if met else 'missed'}"
            )


if __name__ == "__main__":
    main()
