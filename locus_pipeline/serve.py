"""`locus serve`: a cost-aware router over LOCUS_HOME's pool, in front of OpenAI-compatible endpoints.

    POST /route                 {query, candidates?, max_cost?, quality_weight?} -> ranking, chosen, fallback chain
    POST /v1/chat/completions   model "locus" | "locus:<quality_weight>" | a pool model: route the last user message,
                                forward to the chosen model's upstream (fallback chain on error / timeout)
    GET  /v1/models             "locus" and every pool model
    GET  /metrics               Prometheus text;  GET /healthz

How a query is routed: its text is encoded with the sentence encoder of the pool's checkpoint and the runtime
its training encodings came from (``--encoder-runtime`` overrides; locus_model.data.encoding, loaded once per
process; encodings kept in an in-process LRU keyed by encoder, runtime and text), the correctness predictor gives
P(correct) for every candidate (locus_model.infer.predict_proba) and locus_model.routing ranks them by
quality_weight * P - (1 - quality_weight) * cost / max cost (or under a cost cap). Concurrent queries are encoded
together: a micro-batching queue feeds the scorer's own thread, which takes the first waiting query and those
arriving within ``batch_wait_ms`` of it (up to ``max_batch``), and encodes and scores them in one call. A query
the encoder refuses (text that is not valid Unicode) fails alone with a 400; the others of its batch are answered.

Hot reload: a background task polls the pool file's (mtime, size, inode) every ``poll_seconds``; on a change it
loads the new pool and its checkpoint off the event loop and swaps one immutable :class:`Snapshot`. A request keeps
the snapshot it started with, so a reload never mixes two pools in one decision. The models config is read once.

Storage goes through LocusHome only (the pool, its checkpoint, the model catalog for parameter counts).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Sequence

import httpx
import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from locus_model.routing import DEFAULT_OUTPUT_TOKENS, CostTable, cost_table, estimate_tokens, quality_lambda, route
from locus_pipeline.storage import LocusHome, StorageError
from locus_pipeline.storage.files import version_of

log = logging.getLogger("locus.serve")

ROUTER_MODEL = "locus"
RETRY_STATUSES = {408, 409, 425, 429}  # plus every 5xx: the next model of the fallback chain is tried
MODEL_KEYS = {"base_url", "model", "api_key_env", "cost_per_query", "price_input_per_mtok", "price_output_per_mtok",
              "params_b", "timeout_s"}
COST_KEYS = ("cost_per_query", "price_input_per_mtok", "price_output_per_mtok", "params_b")


# ------------------------------------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class Upstream:
    """An OpenAI-compatible endpoint serving one pool model."""

    base_url: str  # e.g. http://127.0.0.1:8001/v1 (POST {base_url}/chat/completions)
    model: str  # the model name the upstream expects
    api_key_env: str | None = None  # environment variable holding its API key (sent as a bearer token)
    timeout_s: float = 60.0


@dataclass(frozen=True)
class ModelsConfig:
    """The --models-config file: per pool model an upstream and/or its cost."""

    upstreams: Mapping[str, Upstream] = field(default_factory=dict)
    costs: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # model -> COST_KEYS subset
    output_tokens: int = DEFAULT_OUTPUT_TOKENS  # expected answer length when a request has no max_tokens


class ConfigError(ValueError):
    """A models config that cannot be used; the message names the file, the model and the fix."""


def read_models_config(path: str | Path | None) -> ModelsConfig:
    """Read a YAML or JSON models config::

        defaults: {timeout_s: 60, output_tokens: 256}
        models:
          <pool model name>:
            base_url: https://api.example.com/v1     # OpenAI-compatible; omit for a cost-only entry
            model: upstream-model-name               # default: the pool model name
            api_key_env: EXAMPLE_API_KEY             # optional
            price_input_per_mtok: 0.5                # USD per million tokens, or cost_per_query: 0.002,
            price_output_per_mtok: 1.5               # or params_b: 70 (a proxy when no price is known)
    """
    if path is None:
        return ModelsConfig()
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"the models config {path} does not exist. How to fix: pass an existing YAML or JSON file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as err:  # yaml and json raise their own types; name the file, keep the cause
        raise ConfigError(f"the models config {path} cannot be parsed ({type(err).__name__}: {err})") from err
    data = data or {}
    if not isinstance(data, dict) or not isinstance(data.get("models", {}), dict):
        raise ConfigError(f"{path}: expected a mapping with 'models: {{<model>: {{...}}}}' (and optional 'defaults')")
    defaults = dict(data.get("defaults") or {})
    unknown_defaults = set(defaults) - {"timeout_s", "output_tokens"}
    if unknown_defaults:
        raise ConfigError(f"{path}: unknown defaults {sorted(unknown_defaults)}; allowed: timeout_s, output_tokens")
    timeout = float(defaults.get("timeout_s", 60.0))
    upstreams, costs = {}, {}
    for name, entry in (data.get("models") or {}).items():
        entry = dict(entry or {})
        unknown = set(entry) - MODEL_KEYS
        if unknown:
            raise ConfigError(f"{path}: model {name!r} has unknown keys {sorted(unknown)}; allowed: {sorted(MODEL_KEYS)}")
        for key in COST_KEYS:
            if key in entry:
                value = entry[key]
                if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                    raise ConfigError(f"{path}: model {name!r}: {key}={value!r} must be a number >= 0")
        costs[str(name)] = {k: float(entry[k]) for k in COST_KEYS if k in entry}
        if "base_url" in entry:
            url = str(entry["base_url"]).rstrip("/")
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"{path}: model {name!r}: base_url {url!r} must start with http:// or https://")
            upstreams[str(name)] = Upstream(url, str(entry.get("model") or name), entry.get("api_key_env"),
                                            float(entry.get("timeout_s", timeout)))
    return ModelsConfig(upstreams, costs, int(defaults.get("output_tokens", DEFAULT_OUTPUT_TOKENS)))


@dataclass(frozen=True)
class ServeConfig:
    home: str = ""  # LOCUS_HOME (empty: $LOCUS_HOME or <repo>/data)
    token: str | None = None  # bearer token every endpoint but /healthz requires
    models_config: str | None = None  # YAML or JSON (read_models_config)
    threads: int = 1  # CPU threads of the encoder and the predictor (both run in the scorer's thread)
    poll_seconds: float = 1.0  # how often the pool file is checked for a change
    quality_weight: float = 1.0  # default quality weight (1 = the paper's router: best P(correct))
    n_fallbacks: int = 3  # models of the fallback chain tried after the chosen one
    max_batch: int = 64  # queries encoded together at most
    cache_size: int = 100_000  # query encodings kept in memory
    max_body_bytes: int = 1 << 20  # a request body larger than this is refused with 413 (0: no limit)
    batch_wait_ms: float = 2.0  # how long the first query of a batch waits for others to join it
    encoder_runtime: str | None = None  # None: the runtime the checkpoint's training encodings came from


# ------------------------------------------------------------------------------------------------ the pool snapshot


def pool_key(path) -> tuple | None:
    """What changes whenever the pool file is replaced, None when it is missing: (mtime_ns, size, inode) on a local
    home (an atomic rewrite changes the inode), the object's ETag in object storage (storage.files.version_of)."""
    return version_of(path)


@dataclass(frozen=True)
class Snapshot:
    """One pool with its checkpoint and costs; immutable, swapped whole on a reload."""

    key: tuple[int, int, int]
    checkpoint_id: str
    encoder: str
    runtime: str  # the encoder runtime (locus_model.data.encoding.RUNTIMES)
    model: Any  # locus_model.model.Locus (eval mode; only read)
    names: tuple[str, ...]
    sources: tuple[str, ...]
    embeddings: np.ndarray  # (M, d)
    costs: CostTable
    upstreams: Mapping[str, Upstream]  # pool models with an upstream
    output_tokens: int
    loaded_at: float

    @property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    @property
    def dry_run(self) -> bool:
        return not self.upstreams


def load_snapshot(home: LocusHome, config: ModelsConfig, runtime: str | None = None) -> Snapshot:
    """The pool as it is now, with the checkpoint it was embedded with; parameter counts from the model catalog
    when it exists, costs and upstreams from the models config. ``runtime``: the encoder runtime (None: the
    checkpoint's)."""
    from locus_model.data.encoding import resolve_runtime
    from locus_model.pool import pool_matrix

    for _ in range(5):  # the pool may be replaced between stat and read: retry until both see one version
        key = pool_key(home.pool_path)
        if key is None:
            raise StorageError(f"no pool at {home.pool_path}. How to fix: materialize model_embeddings (make demo)")
        pool = home.read_pool()
        if pool_key(home.pool_path) == key:
            break
    if len(pool) == 0:
        raise StorageError(f"the pool {home.pool_path} is empty. How to fix: materialize model_embeddings")
    checkpoint = home.pool_checkpoint(pool)
    names, z = pool_matrix(pool)
    info: dict[str, dict] = {}
    if home.table_path("model_catalog").exists():
        catalog = home.read_table("model_catalog", columns=["model", "params_b"])
        info = {str(m): {"params_b": p} for m, p in zip(catalog["model"], catalog["params_b"])}
    for name, costs in config.costs.items():
        info.setdefault(name, {}).update(costs)
    return Snapshot(key=key, checkpoint_id=checkpoint.checkpoint_id, encoder=checkpoint.encoder,
                    runtime=resolve_runtime(checkpoint.encoder, runtime or checkpoint.runtime), model=checkpoint.model,
                    names=tuple(names), sources=tuple(pool["source"].astype(str)), embeddings=z,
                    costs=cost_table(names, info),
                    upstreams={n: u for n, u in config.upstreams.items() if n in set(names)},
                    output_tokens=config.output_tokens, loaded_at=time.time())


# ------------------------------------------------------------------------------------------------ scoring


@dataclass
class _Pending:
    snap: Snapshot
    text: str
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    queued: float  # time.monotonic() when it was queued


def _settle(future: asyncio.Future, result: np.ndarray | BaseException) -> None:  # on the event loop
    if future.done():  # the client went away
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


class Scorer:
    """P(correct) of every pool model for a query, in micro-batches on the scorer's own thread.

    Requests queue up; the thread takes the first and every request queued within ``batch_wait_ms`` of it (up
    to ``max_batch``; one that already waited longer takes only what is queued), encodes the texts not in the
    LRU in one call of the library encoder (locus_model.data.encoding.load_encoder) and predicts for the batch.
    Each request gets its own result or its own error: a text the encoder refuses fails that request only."""

    def __init__(self, *, max_batch: int, cache_size: int, batch_wait_ms: float = 2.0, threads: int | None = None,
                 on_batch=None) -> None:
        from locus_model.data.encoding import EncodingLRU

        self.max_batch, self.batch_wait, self.threads = max_batch, batch_wait_ms / 1000.0, threads
        self.on_batch = on_batch  # called with each batch's size (metrics)
        self._lru = EncodingLRU(cache_size)  # the scorer's thread only (and the warm-up before it starts)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def encoder(self, snap: Snapshot):
        from locus_model.data.encoding import load_encoder

        return load_encoder(snap.encoder, snap.runtime, threads=self.threads)

    def encode(self, snap: Snapshot, texts: Sequence[str]) -> np.ndarray:  # (n, D); in the scorer's thread
        encoder = self.encoder(snap)
        found = {t: v for t in dict.fromkeys(texts) if (v := self._lru.get(encoder, t)) is not None}
        new = [t for t in dict.fromkeys(texts) if t not in found]
        if new:
            for text, vector in zip(new, encoder.encode(new, self.max_batch)):
                found[text] = vector
                self._lru.put(encoder, text, vector)
        return np.stack([found[t] for t in texts])

    def _score_group(self, snap: Snapshot, texts: list[str]) -> np.ndarray:  # (M, B)
        from locus_model.infer import predict_proba

        return predict_proba(snap.model, snap.embeddings, self.encode(snap, texts))

    def _score_batch(self, items: list[tuple[Snapshot, str]]) -> list[np.ndarray | BaseException]:
        """Each item's (M,) probabilities, or the exception that item alone raised."""
        from locus_model.data.encoding import EncodingInputError, check_texts

        out: list[np.ndarray | BaseException | None] = [None] * len(items)
        groups: dict[int, list[int]] = {}
        for i, (snap, text) in enumerate(items):
            try:
                check_texts([text])  # a text the tokenizer would refuse fails here, alone
            except EncodingInputError as err:
                out[i] = err
                continue
            groups.setdefault(id(snap), []).append(i)
        for rows in groups.values():  # a reload in progress: each snapshot scores its own queries
            snap = items[rows[0]][0]
            try:
                probs = self._score_group(snap, [items[i][1] for i in rows])  # (M, B)
            except Exception:  # noqa: BLE001 -- find the request that fails: each is scored alone, fails alone
                for i in rows:
                    try:
                        out[i] = self._score_group(snap, [items[i][1]])[:, 0]
                    except Exception as err:  # that request's own error, handed to it
                        log.exception("scoring a query failed")
                        out[i] = err
                continue
            for j, i in enumerate(rows):
                out[i] = probs[:, j]
        return out  # type: ignore[return-value]

    def _next_batch(self) -> list[_Pending] | None:
        first = self._queue.get()
        if first is None:
            return None
        batch = [first]
        deadline = first.queued + self.batch_wait
        while len(batch) < self.max_batch:
            wait = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:  # stop after this batch
                self._queue.put(None)
                break
            batch.append(item)
        return batch

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            live = [p for p in batch if not p.future.done()]  # drop the cancelled (client gone)
            if not live:
                continue
            if self.on_batch is not None:
                self.on_batch(len(live))
            try:
                results = self._score_batch([(p.snap, p.text) for p in live])
            except BaseException as err:  # noqa: BLE001 -- never leave a request waiting; the thread keeps serving
                log.exception("a scoring batch failed")
                results = [err] * len(live)
            for pending, result in zip(live, results):
                try:
                    pending.loop.call_soon_threadsafe(_settle, pending.future, result)
                except RuntimeError:  # its event loop is closed (an app stopped in tests)
                    pass

    def start(self) -> None:
        """Start the scorer's thread (an app may be started more than once, e.g. in tests)."""
        self.stop()
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="locus-scorer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    async def score(self, snap: Snapshot, text: str) -> np.ndarray:  # (M,)
        if self._thread is None:
            raise RuntimeError("the scorer is not running (the app's lifespan did not start)")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put(_Pending(snap, text, future, loop, time.monotonic()))
        return await future


# ------------------------------------------------------------------------------------------------ errors and metrics


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.extra = status, message, kind, extra


def error_response(status: int, message: str, kind: str = "invalid_request_error", **extra: Any) -> JSONResponse:
    """OpenAI-style error body: {"error": {"message", "type", ...}}."""
    return JSONResponse({"error": {"message": message, "type": kind, **extra}}, status_code=status)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("locus_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.latency = Histogram("locus_request_latency_seconds", "HTTP request latency by endpoint", ["endpoint"],
                                 buckets=(.002, .005, .01, .02, .03, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 30),
                                 registry=r)
        self.decisions = Counter("locus_decisions", "routing decisions by chosen model", ["model"], registry=r)
        self.answers = Counter("locus_answers", "chat completions answered, by the model that answered", ["model"],
                               registry=r)
        self.fallbacks = Counter("locus_fallbacks", "upstream failures that moved to the next model of the fallback "
                                 "chain, by the model that failed", ["model", "reason"], registry=r)
        self.reloads = Counter("locus_pool_reloads", "pool reloads by outcome", ["outcome"], registry=r)
        self.pool_models = Gauge("locus_pool_models", "models in the pool being served", registry=r)
        self.batch_size = Histogram("locus_scorer_batch_size", "queries encoded and scored together", registry=r,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128))


ENDPOINTS = {"/route", "/v1/chat/completions", "/v1/models", "/metrics", "/healthz"}


class MetricsMiddleware:
    """Counts every HTTP request and times it (a plain ASGI middleware: no per-request task or body copy)."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)


# ------------------------------------------------------------------------------------------------ routing


class BodyLimitMiddleware:
    """Refuses a request body larger than ``max_bytes`` with 413, before any of it is parsed or forwarded: by its
    Content-Length, or while it arrives (chunked). The accepted body (at most ``max_bytes``) is replayed to the app."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.max_bytes <= 0:
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: the disconnect a streaming response listens for

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send) -> None:
        await error_response(413, f"the request body is larger than {self.max_bytes:,} bytes, the limit of this router "
                                  "(locus serve --max-body-bytes)", code="request_too_large")(scope, receive, send)


_CREDENTIAL = re.compile(r"(?i)(bearer\s+|(?:authorization|api[_-]?key|x-api-key|access[_-]?token)[\"']?\s*[:=]\s*[\"']?"
                         r"(?:bearer\s+)?)([^\s\"',;}]+)")
_KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}")


def scrub_credentials(text: str, known: Sequence[str] = ()) -> str:
    """``text`` (an upstream's error body, an exception) with credentials replaced by ``[redacted]``: the ``known``
    secrets wherever they appear, Authorization / api-key values and key-shaped strings (``sk-...``), so that an
    upstream echoing the request's headers never puts a key into a 502 body or the log."""
    for secret in known:
        if secret:
            text = text.replace(secret, "[redacted]")
    text = _CREDENTIAL.sub(lambda m: m.group(1) + "[redacted]", text)
    return _KEY_SHAPED.sub("[redacted]", text)


def _is_event_line(line: str) -> bool:
    """Whether ``line`` is a line of a server-sent event stream whose data is JSON (or ``[DONE]``)."""
    if line.startswith((":", "event:", "id:", "retry:")):
        return True
    if not line.startswith("data:"):
        return False
    data = line[5:].strip()
    try:
        return data == "[DONE]" or isinstance(json.loads(data), (dict, list))
    except ValueError:
        return False


class RouteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str
    candidates: list[str] | None = None
    max_cost: float | None = None
    quality_weight: float | None = None
    input_tokens: int | None = None  # default: estimated from the query (4 characters a token)
    output_tokens: int | None = None  # default: the models config's output_tokens (256)


def _json_number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


class Router:
    """The served state: the current snapshot (swapped whole), the scorer, the metrics."""

    def __init__(self, config: ServeConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self.home = LocusHome(root=config.home)
        self.models = read_models_config(config.models_config)
        self.snapshot = load_snapshot(self.home, self.models, config.encoder_runtime)
        self.failed_key: tuple[int, int, int] | None = None
        self.last_reload_error: str | None = None
        self.metrics = Metrics()
        self.scorer = Scorer(max_batch=config.max_batch, cache_size=config.cache_size,
                             batch_wait_ms=config.batch_wait_ms, threads=config.threads or None,
                             on_batch=self.metrics.batch_size.observe)
        self.metrics.pool_models.set(len(self.snapshot.names))
        self.transport = transport
        self.client: httpx.AsyncClient | None = None

    # -- reload

    async def reload_if_changed(self) -> bool:
        key = pool_key(self.home.pool_path)
        if key is None or key == self.snapshot.key or key == self.failed_key:
            return False
        try:
            snap = await run_in_threadpool(self._load_warm)
        except Exception as err:  # keep serving the old pool; the log and /healthz say why
            self.failed_key = key
            self.metrics.reloads.labels("failed").inc()
            log.error("pool reload failed, still serving checkpoint %s: %s", self.snapshot.checkpoint_id, err)
            self.last_reload_error = f"{type(err).__name__}: {err}"
            return False
        self.snapshot, self.failed_key, self.last_reload_error = snap, None, None  # one assignment: the swap
        self.metrics.reloads.labels("ok").inc()
        self.metrics.pool_models.set(len(snap.names))
        log.info("pool reloaded: %d models, checkpoint %s", len(snap.names), snap.checkpoint_id)
        return True

    def _load_warm(self) -> Snapshot:
        snap = load_snapshot(self.home, self.models, self.config.encoder_runtime)
        self.scorer.encoder(snap).encode(["warm up"])  # a new encoder loads here, not in a request
        return snap

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.config.poll_seconds)
            await self.reload_if_changed()

    # -- decisions

    def candidate_indices(self, snap: Snapshot, candidates: Sequence[str] | None, *, need_upstream: bool) -> list[int]:
        index = snap.index
        if candidates is None:
            names = [n for n in snap.names if n in snap.upstreams] if snap.upstreams else list(snap.names)
            return [index[n] for n in names]
        if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
            raise ApiError(400, "candidates must be a list of pool model names")
        if len(candidates) == 0:
            raise ApiError(400, "candidates is empty: give at least one pool model, or leave it out for all of them")
        unknown = [c for c in candidates if c not in index]
        if unknown:
            raise ApiError(400, f"unknown candidate model(s) {unknown[:5]}: not in the pool "
                                f"({len(snap.names)} models; GET /v1/models lists them)", code="unknown_candidate")
        if need_upstream and snap.upstreams:
            missing = [c for c in candidates if c not in snap.upstreams]
            if missing:
                raise ApiError(400, f"candidate model(s) {missing[:5]} have no upstream in the models config")
        return [index[c] for c in dict.fromkeys(candidates)]

    async def decide(self, snap: Snapshot, query: str, *, candidates: Sequence[str] | None, max_cost: float | None,
                     quality_weight: float | None, input_tokens: int | None, output_tokens: int | None,
                     need_upstream: bool = False) -> dict:
        start = time.perf_counter()
        if not isinstance(query, str) or not query.strip():
            raise ApiError(400, "query is empty: give the text to route")
        w = self.config.quality_weight if quality_weight is None else quality_weight
        if not (isinstance(w, (int, float)) and 0.0 <= w <= 1.0):
            raise ApiError(400, f"quality_weight={w} must be in [0, 1] (1 = best P(correct), 0 = cheapest)")
        if max_cost is not None and not (isinstance(max_cost, (int, float)) and not isinstance(max_cost, bool)
                                         and math.isfinite(max_cost) and max_cost >= 0):
            raise ApiError(400, f"max_cost={max_cost} must be a number >= 0")
        for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            if value is not None and value < 0:
                raise ApiError(400, f"{name}={value} must be >= 0")
        idx = self.candidate_indices(snap, candidates, need_upstream=need_upstream)
        n_in = estimate_tokens(query) if input_tokens is None else input_tokens
        n_out = snap.output_tokens if output_tokens is None else output_tokens
        costs = snap.costs.costs(n_in, n_out)[idx]
        from locus_model.data.encoding import EncodingInputError

        try:
            probs = (await self.scorer.score(snap, query))[idx]
        except EncodingInputError as err:
            raise ApiError(400, f"the query cannot be encoded: {err}".replace("text 0 ", "the query text "),
                           code="invalid_query_text")
        try:
            d = route(probs, costs, quality_weight=w, max_cost=max_cost, embeddings=snap.embeddings[idx],
                      n_fallbacks=self.config.n_fallbacks)
        except ValueError as err:
            raise ApiError(400, str(err), code="no_candidate_within_cost" if "max_cost" in str(err) else None)
        names = [snap.names[i] for i in idx]
        self.metrics.decisions.labels(names[d.chosen]).inc()
        return {
            "chosen": names[d.chosen],
            "fallbacks": [names[i] for i in d.fallbacks],
            "ranking": [{"model": names[i], "p_correct": round(float(probs[i]), 6),
                         "expected_cost": _json_number(float(costs[i])), "score": round(float(d.scores[i]), 6)} for i in d.ranking],
            "over_cost": [names[i] for i in d.over_cost],
            "unknown_cost": [names[i] for i in d.unknown_cost],  # left out of a cost-aware ranking: no cost known
            "quality_weight": float(w), "lambda": _json_number(d.lam), "max_cost": max_cost,
            "cost_basis": snap.costs.basis, "cost_note": snap.costs.note,
            "input_tokens": n_in, "output_tokens": n_out,
            "checkpoint_id": snap.checkpoint_id, "encoder": snap.encoder, "encoder_runtime": snap.runtime,
            "pool_models": len(snap.names),
            "elapsed_ms": round(1000 * (time.perf_counter() - start), 3),
        }

    # -- upstreams

    async def forward(self, name: str, upstream: Upstream, body: dict, stream: bool) -> Response:
        """The upstream's answer; raises _UpstreamFailed on a timeout, a connection error, a retryable status or a
        200 that is not JSON (an event stream whose first line is not one, with ``stream``). Credentials are
        scrubbed from every detail and relayed error body (scrub_credentials)."""
        key = os.environ.get(upstream.api_key_env) if upstream.api_key_env else None
        secrets_known = [s for s in (key, self.config.token) if s]
        try:
            return await self._forward(name, upstream, body, stream, key, secrets_known)
        except _UpstreamFailed as fail:
            fail.detail = scrub_credentials(fail.detail, secrets_known)
            raise

    async def _forward(self, name: str, upstream: Upstream, body: dict, stream: bool, key: str | None,
                       secrets_known: list[str]) -> Response:
        assert self.client is not None
        payload = {**body, "model": upstream.model}
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        request = self.client.build_request("POST", f"{upstream.base_url}/chat/completions", json=payload,
                                            headers=headers, timeout=upstream.timeout_s)
        try:
            resp = await self.client.send(request, stream=True)
        except httpx.TimeoutException as err:
            raise _UpstreamFailed(name, "timeout", f"no answer within {upstream.timeout_s:g} s ({type(err).__name__})")
        except httpx.HTTPError as err:
            raise _UpstreamFailed(name, "connection", f"{type(err).__name__}: {err}")
        if resp.status_code >= 500 or resp.status_code in RETRY_STATUSES:
            text = (await resp.aread()).decode("utf-8", "replace")[:300]
            await resp.aclose()
            raise _UpstreamFailed(name, f"http_{resp.status_code}", f"HTTP {resp.status_code}: {text}")
        headers_out = {"x-locus-model": name, "x-locus-upstream-model": upstream.model}
        if stream and resp.status_code == 200:  # the first line decides: an event stream, or the next model
            lines = resp.aiter_lines()
            try:
                first = ""
                while not first.strip():
                    first = await lines.__anext__()
            except (httpx.HTTPError, StopAsyncIteration) as err:
                await resp.aclose()
                raise _UpstreamFailed(name, "bad_response" if isinstance(err, StopAsyncIteration) else "connection",
                                      f"the event stream ended before its first event ({type(err).__name__})")
            if not _is_event_line(first):
                await resp.aclose()
                raise _UpstreamFailed(name, "bad_response", f"not an event stream: {first[:200]!r}")
            return StreamingResponse(_rewrite_sse(resp, name, first, lines), status_code=200, headers=headers_out,
                                     media_type=resp.headers.get("content-type", "text/event-stream"))
        try:
            raw = await resp.aread()
        except httpx.HTTPError as err:
            raise _UpstreamFailed(name, "connection", f"{type(err).__name__}: {err}")
        finally:
            await resp.aclose()
        if resp.status_code != 200:  # relayed as it came, less any credential it echoes
            raw = scrub_credentials(raw.decode("utf-8", "replace"), secrets_known).encode("utf-8")
        try:
            data = json.loads(raw)
        except ValueError:
            if resp.status_code == 200:
                raise _UpstreamFailed(name, "bad_response", f"not JSON: {raw[:200]!r}")
            return Response(raw, status_code=resp.status_code, headers=headers_out,
                            media_type=resp.headers.get("content-type"))
        if isinstance(data, dict) and resp.status_code == 200:
            data["model"] = name
        return JSONResponse(data, status_code=resp.status_code, headers=headers_out)


class _UpstreamFailed(Exception):
    def __init__(self, model: str, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.model, self.reason, self.detail = model, reason, detail


async def _rewrite_sse(resp: httpx.Response, name: str, first: str, lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """Pass an SSE stream through line by line (``first``, then the rest of ``lines``), with each chunk's ``model``
    set to the pool model's name. An upstream that fails mid-way ends the stream with an error event
    (``data: {"error": {...}}``, as OpenAI's API sends one), not with a 200 that just stops."""

    async def all_lines() -> AsyncIterator[str]:
        yield first
        async for line in lines:
            yield line

    try:
        async for line in all_lines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    chunk = json.loads(line[5:])
                    if isinstance(chunk, dict) and "model" in chunk:
                        chunk["model"] = name
                        line = "data: " + json.dumps(chunk, separators=(",", ":"))
                except ValueError:
                    pass  # not JSON: pass it through as it came
            yield (line + "\n").encode("utf-8")
    except httpx.HTTPError as err:
        log.warning("upstream %s failed mid-stream (%s: %s)", name, type(err).__name__, scrub_credentials(str(err)))
        error = {"error": {"message": f"the upstream of {name} failed mid-stream ({type(err).__name__}); the answer "
                                      "is incomplete", "type": "upstream_error", "code": "stream_interrupted"}}
        yield f"\ndata: {json.dumps(error)}\n\n".encode("utf-8")
    finally:
        await resp.aclose()


def last_user_text(messages: Any) -> str:
    """The text of the last user message (string content, or the text parts of a content list)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content}")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
            if isinstance(content, str) and content.strip():
                return content
            raise ApiError(400, "the last user message has no text to route")
    raise ApiError(400, "messages hold no user message: the router routes the last user message")


def parse_router_model(model: Any, snap: Snapshot) -> tuple[float | None, str | None]:
    """(quality_weight or None for the default, pinned pool model or None) of a request's ``model``."""
    if not isinstance(model, str) or not model:
        raise ApiError(400, f"model must be {ROUTER_MODEL!r}, '{ROUTER_MODEL}:<quality_weight>' or a pool model")
    if model == ROUTER_MODEL:
        return None, None
    if model.startswith(ROUTER_MODEL + ":"):
        try:
            w = float(model.split(":", 1)[1])
        except ValueError:
            raise ApiError(400, f"model {model!r}: the quality weight after 'locus:' must be a number in [0, 1]")
        if not 0.0 <= w <= 1.0:
            raise ApiError(400, f"model {model!r}: quality_weight={w} must be in [0, 1]")
        return w, None
    if model in snap.index:
        return None, model
    raise ApiError(404, f"model {model!r} is neither {ROUTER_MODEL!r}, '{ROUTER_MODEL}:<w>' nor a pool model "
                        "(GET /v1/models)", kind="invalid_request_error", code="model_not_found")


# ------------------------------------------------------------------------------------------------ the app


def create_app(config: ServeConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """The router's FastAPI app. The pool is loaded here (a missing pool fails now, not at the first request);
    the lifespan starts the scorer and the pool watcher. ``transport`` replaces the network for upstream calls
    (tests)."""
    from contextlib import asynccontextmanager

    router = Router(config, transport=transport)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        import torch

        if config.threads:
            torch.set_num_threads(config.threads)
        await run_in_threadpool(router.scorer.encode, router.snapshot, ["warm up"])
        router.client = httpx.AsyncClient(transport=transport, limits=httpx.Limits(max_connections=256))
        router.scorer.start()
        tasks = [asyncio.create_task(router.watch())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await run_in_threadpool(router.scorer.stop)
            await router.client.aclose()

    app = FastAPI(title="LOCUS router", lifespan=lifespan,
                  description="Routes each query to the pool model most likely to answer it, at a cost you choose.")
    app.state.router = router
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=router.metrics)  # outermost: a 413 is counted too

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        return error_response(err.status, err.message, err.kind, **{k: v for k, v in err.extra.items() if v})

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in err.errors())
        return error_response(400, f"invalid request: {problems}")

    def authorize(request: Request) -> None:
        if config.token is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {config.token}".encode()):
            raise ApiError(401, "missing or wrong bearer token (Authorization: Bearer <token>)", kind="authentication_error")

    @app.get("/healthz")
    async def healthz(request: Request) -> dict:
        snap = router.snapshot
        try:
            authorize(request)
            names_shown = True
        except ApiError:  # the token guards the model names; the status is for anyone
            names_shown = False
        health = {"status": "ok", "checkpoint_id": snap.checkpoint_id, "encoder": snap.encoder,
                "pool_models": len(snap.names), "routable_models": len(snap.names) if snap.dry_run else len(snap.upstreams), "dry_run": snap.dry_run,
                "cost_basis": snap.costs.basis, "loaded_at": snap.loaded_at, "last_reload_error": router.last_reload_error}
        if names_shown:
            health["configured_not_in_pool"] = sorted(set(router.models.upstreams) - set(snap.names))
        return health

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        authorize(request)
        return Response(generate_latest(router.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/route")
    async def route_query(request: Request, body: RouteRequest) -> dict:
        authorize(request)
        snap = router.snapshot  # this request's pool, whatever reloads happen meanwhile
        return await router.decide(snap, body.query, candidates=body.candidates, max_cost=body.max_cost,
                                   quality_weight=body.quality_weight, input_tokens=body.input_tokens,
                                   output_tokens=body.output_tokens)

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict:
        authorize(request)
        snap = router.snapshot
        created = int(snap.loaded_at)
        data = [{"id": ROUTER_MODEL, "object": "model", "created": created, "owned_by": "locus",
                 "locus": {"router": True, "checkpoint_id": snap.checkpoint_id, "dry_run": snap.dry_run}}]
        data += [{"id": n, "object": "model", "created": created, "owned_by": "locus-pool",
                  "locus": {"source": s, "routable": (n in snap.upstreams) or snap.dry_run}}
                 for n, s in zip(snap.names, snap.sources)]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        authorize(request)
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "the body is not JSON")
        except RecursionError:
            raise ApiError(400, "the body nests JSON deeper than this router parses (about 1,000 levels)")
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        snap = router.snapshot
        weight, pinned = parse_router_model(body.get("model"), snap)
        extra = body.pop("locus", None) or {}
        if not isinstance(extra, dict):
            raise ApiError(400, "'locus' must be an object {candidates?, max_cost?, explain?}")
        text = last_user_text(body.get("messages"))
        stream = bool(body.get("stream", False))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        prompt = "\n".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
        decision = await router.decide(
            snap, text, candidates=[pinned] if pinned else extra.get("candidates"), max_cost=extra.get("max_cost"),
            quality_weight=weight, input_tokens=estimate_tokens(prompt),
            output_tokens=max_tokens if isinstance(max_tokens, int) else None, need_upstream=True)
        if pinned:  # a named model answers; its embedding neighbours are its fallbacks
            decision["fallbacks"] = [snap.names[i] for i in _neighbours(router, snap, pinned)]
        if snap.dry_run:
            return _dry_run_answer(decision, stream)
        errors = []
        for name in [decision["chosen"], *decision["fallbacks"]]:
            try:
                resp = await router.forward(name, snap.upstreams[name], body, stream)
            except _UpstreamFailed as fail:
                router.metrics.fallbacks.labels(fail.model, fail.reason).inc()
                errors.append({"model": fail.model, "reason": fail.reason, "detail": fail.detail})
                log.warning("upstream %s failed (%s); trying the next model of the fallback chain", name, fail.detail)
                continue
            router.metrics.answers.labels(name).inc()
            if extra.get("explain") is True and isinstance(resp, JSONResponse) and resp.status_code == 200:
                answer = json.loads(resp.body)  # the routing explanation in the body too: {"locus": {...}}
                if isinstance(answer, dict):
                    answer["locus"] = {**decision, "answered_by": name, "fallbacks_used": len(errors)}
                    resp = JSONResponse(answer, headers={k: v for k, v in resp.headers.items() if k.startswith("x-locus")})
            resp.headers["x-locus-chosen"] = decision["chosen"]
            resp.headers["x-locus-fallbacks-used"] = str(len(errors))
            return resp
        raise ApiError(502, f"every model of the fallback chain failed: {errors}", kind="upstream_error")

    return app


def _neighbours(router: Router, snap: Snapshot, name: str) -> list[int]:
    from locus_model.routing import fallback_chain

    among = [snap.index[n] for n in snap.upstreams] if snap.upstreams else range(len(snap.names))
    return fallback_chain(snap.embeddings, snap.index[name], among, k=router.config.n_fallbacks).tolist()


def _dry_run_answer(decision: dict, stream: bool) -> Response:
    """No upstream configured: the decision only, marked as a dry run in the body, the headers and the text."""
    content = (f"[locus dry-run: no upstream configured] would route to {decision['chosen']} "
               f"(fallbacks: {', '.join(decision['fallbacks']) or 'none'})")
    headers = {"x-locus-model": decision["chosen"], "x-locus-dry-run": "true"}
    base = {"id": f"locus-dryrun-{secrets.token_hex(6)}", "created": int(time.time()), "model": decision["chosen"],
            "locus": {"dry_run": True, **decision}}
    if stream:
        chunk = {**base, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
        body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return Response(body, media_type="text/event-stream", headers=headers)
    answer = {**base, "object": "chat.completion",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    return JSONResponse(answer, headers=headers)


def serve(config: ServeConfig, *, host: str = "127.0.0.1", port: int = 8000, access_log: bool = False,
          log_level: str = "info") -> None:
    """Run the router with uvicorn (one process; the event loop plus the scorer's thread)."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    app = create_app(config)
    uvicorn.run(app, host=host, port=port, access_log=access_log, log_level=log_level)


__all__ = ["ServeConfig", "ModelsConfig", "Upstream", "read_models_config", "load_snapshot", "Snapshot",
           "create_app", "serve", "ConfigError"]
