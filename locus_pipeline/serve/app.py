"""The gateway's FastAPI app (:func:`create_app`): the endpoints, the bearer token, the lifespan that starts the
scorer and the pool watcher; :func:`serve` runs it with uvicorn."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from contextlib import asynccontextmanager
from functools import partial
from typing import Callable, Required, TypedDict

import httpx
import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from locus_pipeline.serve.chat import ROUTER_MODEL, chat_completion
from locus_pipeline.serve.config import ConfigError, ServeConfig
from locus_pipeline.serve.gateway import Gateway
from locus_pipeline.serve.http import ApiError, BodyLimitMiddleware, WrongTokenLimiter, error_response, parse_json
from locus_pipeline.serve.identity import Caller, Identity, IdentityError, OutcomeLimiter
from locus_pipeline.serve.learning import MAX_OUTCOMES, OutcomeRefused
from locus_pipeline.serve.metrics import MetricsMiddleware
from locus_pipeline.serve.serving import cost_text
from locus_pipeline.storage.traffic import LINGER_S


class RouteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str
    candidates: list[str] | None = None
    max_cost: float | None = None
    quality_weight: float | None = None
    max_params: float | None = None  # billions: only candidates of known size at most this
    input_tokens: int | None = None  # default: estimated from the query (4 characters a token)
    output_tokens: int | None = None  # default: the models config's output_tokens (256)


class OutcomeResult(TypedDict, total=False):
    """One outcome's entry in POST /v1/outcomes' results: its request id, its status and, when refused, why."""

    request_id: Required[str | None]
    status: Required[int]
    reason: str


def create_app(
    config: ServeConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FastAPI:
    """The gateway's FastAPI app. The pool is loaded here (a missing pool fails now, not at the first request);
    the lifespan starts the scorer and the pool watcher. ``transport`` replaces the network for upstream calls
    (tests); ``clock`` times the upstreams' cooldowns (tests)."""
    gateway = Gateway(config, transport=transport, clock=clock)
    try:
        gateway.identity = identity = Identity(
            token=config.token, clients=gateway.models.clients, secret=gateway.home.traffic_secret()
        )
    except IdentityError as err:
        raise ConfigError(f"the models config {config.models_config}: {err}") from None
    limiter = OutcomeLimiter(identity, clock=clock)
    learning_metrics(gateway)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        torch.set_num_threads(gateway.threads.threads)  # the predictor's, beside the encoder's (the same choice)
        await run_in_threadpool(gateway.batcher.encode, gateway.snapshot, ["warm up"])
        gateway.client = httpx.AsyncClient(transport=transport, limits=httpx.Limits(max_connections=256))
        gateway.batcher.start()
        gateway.log_lock = asyncio.Lock()  # this event loop's (an app may be started more than once, e.g. in tests)
        read_lock[0] = asyncio.Lock()
        tasks = [asyncio.create_task(gateway.watch())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await run_in_threadpool(gateway.batcher.stop)
            await gateway.client.aclose()
            if gateway.learning is not None:
                await run_in_threadpool(gateway.learning.close)

    app = FastAPI(
        title="LOCUS gateway (locus serve)",
        lifespan=lifespan,
        description="Routes each query to the pool model most likely to answer it, at a cost you choose.",
    )
    app.state.gateway = gateway
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=gateway.metrics)  # outermost: a 413 is counted too

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        response = error_response(err.status, err.message, err.kind, **{k: v for k, v in err.extra.items() if v})
        if err.extra.get("retry_after"):
            response.headers["Retry-After"] = str(err.extra["retry_after"])
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in err.errors())
        return error_response(400, f"invalid request: {problems}")

    wrong_tokens = WrongTokenLimiter()

    def authorized(request: Request) -> bool:
        return identity.client_of(request.headers) is not None

    def authorize(request: Request) -> Caller:
        """The request's caller by its credential; 401 (429 past the limit of wrong tokens) without one."""
        caller = identity.caller_of(request.headers)
        if caller is None:
            raise wrong_tokens.refuse(request.client.host if request.client else "unknown", request.url.path)
        return caller

    @app.get("/healthz")
    async def healthz(request: Request) -> dict:
        if not authorized(request):  # the status is for anyone (load balancers); the details need the token
            return {"status": "ok"}
        snap = gateway.snapshot
        health = {
            "status": "ok",
            "checkpoint_id": snap.checkpoint_id,
            "encoder": snap.encoder,
            "pool_models": len(snap.names),
            "routable_models": len(snap.routable),
            "dry_run": snap.dry_run,
            "portfolio": snap.portfolio,
            "cost_basis": snap.costs.basis,
            "cost_basis_means": snap.costs.basis_means,
            "serves": f"single:{gateway.single_model}" if gateway.single_model else "router",
            "serves_because": gateway.serve_reason,  # the verdict in words: what the guard did, on cost
            "by_cost": cost_text(gateway.verdict),  # where routing would pay: LOCUS's cost-aware operating points
            "verdict": gateway.verdict,  # reports/routing_evaluation.json's, when of this checkpoint
            "loaded_at": snap.loaded_at,
            "last_reload_error": gateway.last_reload_error,
            "configured_not_in_pool": sorted(set(gateway.models.upstreams) - set(snap.names)),
            "portfolio_not_in_pool": list(snap.portfolio_missing),
            "not_routable_by_default": list(snap.held_back),
            "learning": gateway.learning_status(),
            "traffic_log": traffic_log_health(gateway),  # learning paused while it cannot be written
            "trust": identity.describe(),
        }  # too few evaluations: only when named
        return health

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        authorize(request)
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/route")
    async def route_query(request: Request, body: RouteRequest) -> JSONResponse:
        caller = authorize(request)
        snap = gateway.snapshot  # this request's pool, whatever reloads happen meanwhile
        routed = await gateway.decide(
            snap,
            body.query,
            candidates=body.candidates,
            max_cost=body.max_cost,
            max_params=body.max_params,
            quality_weight=body.quality_weight,
            input_tokens=body.input_tokens,
            output_tokens=body.output_tokens,
            client=caller.client,
        )
        headers = gateway.issue(routed, routed.body["chosen"], caller.client)
        return JSONResponse(routed.body, headers=headers)

    @app.post("/v1/outcomes", status_code=202)
    async def outcomes(request: Request) -> JSONResponse:
        """One graded answer {request_id, score, source?} or a list of them (202); each refused one with its status
        (404 never issued here, 403 issued to another client, 409 already graded here or at another replica, 422 out
        of range) and reason; 429 past the client's rate (before any parsing), 503 while learning is paused."""
        caller = authorize(request)
        learning = gateway.learning
        if learning is None:
            raise ApiError(
                503,
                "this gateway does not learn from outcomes (started with --no-learn)",
                kind="server_error",
                code="learning_off",
            )
        rate_limit(caller.client, 1)  # before the body is parsed: a flood costs no parsing
        arrived = time.monotonic()
        body = parse_json(await request.body())
        items = body if isinstance(body, list) else [body]
        if not items or len(items) > MAX_OUTCOMES:
            raise ApiError(422, f"send 1 to {MAX_OUTCOMES} outcomes per request (got {len(items)})")
        rate_limit(caller.client, len(items) - 1)

        def unknown() -> bool:
            return any(
                isinstance(i, dict) and isinstance(i.get("request_id"), str) and i["request_id"] not in learning.issued
                for i in items
            )

        if unknown():  # another replica's request: read the log before saying 404
            await read_log_since(arrived)
            if not gateway.home.remote and unknown():  # on a disk a replica's writer writes within LINGER_S
                await asyncio.sleep(2 * LINGER_S)
                await read_log_since(arrived + 2 * LINGER_S)  # one more read, shared as the first
            # in a bucket a replica uploads its decisions at each tick: wait two ticks for them at most
            deadline = time.monotonic() + 2 * config.poll_seconds + 0.5
            while gateway.home.remote and unknown() and time.monotonic() < deadline:
                await asyncio.sleep(min(config.poll_seconds / 2, 0.5))
                await gateway.learn_from_log()
        results: list[OutcomeResult] = []
        records: list[dict] = []
        for item in items:
            try:
                record = outcome_record(learning, item, caller)
            except OutcomeRefused as refusal:
                rid = item.get("request_id") if isinstance(item, dict) else None
                results.append(
                    {
                        "request_id": rid if isinstance(rid, str) else None,
                        "status": refusal.status,
                        "reason": refusal.reason,
                    }
                )
                continue
            learning.reserved.add(record["request_id"])
            records.append(record)
            results.append({"request_id": record["request_id"], "status": 202})
        if records:
            try:
                records = await run_in_threadpool(log_claimed, learning, records, results)
            except OSError as err:
                learning.outcome_log.failing = f"{type(err).__name__}: {err}"  # until a write succeeds again
                raise ApiError(
                    503,
                    f"learning is paused: the traffic log cannot be written ({type(err).__name__}: {err}); "
                    "routing goes on. How to fix: free space or make LOCUS_HOME/traffic writable; learning "
                    "resumes with the next write that succeeds (/healthz says when)",
                    kind="server_error",
                    code="learning_paused",
                ) from None
            learning.take(records)
        refused = [r for r in results if r["status"] != 202]
        if not isinstance(body, list) and refused:
            raise ApiError(refused[0]["status"], refused[0]["reason"], code="outcome_refused")
        status = 202 if not refused else refused[0]["status"]
        return JSONResponse({"accepted": len(records), "refused": len(refused), "results": results}, status_code=status)

    last_read = [-math.inf]  # when the last read of the log for ids not known yet started
    read_lock = [asyncio.Lock()]  # made again on the serving event loop (the lifespan)

    async def read_log_since(arrived: float) -> None:
        """Read the log for ids not known yet, unless a read that started after this request arrived has (a flood
        of never-issued ids shares one read instead of one each)."""
        async with read_lock[0]:
            if last_read[0] < arrived:
                last_read[0] = time.monotonic()
                await gateway.learn_from_log()

    def rate_limit(client: str, n: int) -> None:
        wait = limiter.take(client, n) if n > 0 else 0.0
        if wait > 0:
            raise ApiError(
                429,
                f"client {client!r} posts outcomes faster than its rate "
                f"({identity.settings[client].outcomes_per_s:g}/s, {identity.settings[client].outcomes_burst:g} at "
                f"once); retry in {wait:.1f} s",
                kind="rate_limit_error",
                code="outcome_rate",
                retry_after=math.ceil(wait),
            )

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict:
        authorize(request)
        snap = gateway.snapshot
        created, routable = int(snap.loaded_at), set(snap.routable)
        data = [
            {
                "id": ROUTER_MODEL,
                "object": "model",
                "created": created,
                "owned_by": "locus",
                "locus": {
                    "router": True,
                    "checkpoint_id": snap.checkpoint_id,
                    "dry_run": snap.dry_run,
                    "portfolio": snap.portfolio,
                },
            }
        ]
        data += [
            {
                "id": n,
                "object": "model",
                "created": created,
                "owned_by": "locus-pool",
                "locus": {"source": s, "routable": n in routable},
            }
            for n, s in zip(snap.names, snap.sources)
        ]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        authorize(request)
        body = parse_json(await request.body())
        return await chat_completion(gateway, body, request.headers)

    return app


def serve(
    config: ServeConfig, *, host: str = "127.0.0.1", port: int = 8000, access_log: bool = False, log_level: str = "info"
) -> None:
    """Run the gateway with uvicorn (one process; the event loop plus the scorer's thread)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    app = create_app(config)
    print(
        f"locus serve: http://{host}:{port} (POST /route, /v1/chat/completions; GET /v1/models, /metrics, /healthz)\n"
        + app.state.gateway.summary()
        + "\n"
        + app.state.gateway.identity.describe(),
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, access_log=access_log, log_level=log_level)


def outcome_record(learning, item, caller: Caller) -> dict:
    """One posted outcome checked (learning.check) for its caller: a grader may grade any client's answer, another
    client only its own. The record names the client that graded and whether it grades for everyone."""
    owner = caller.client
    if caller.grader and isinstance(item, dict) and isinstance(item.get("request_id"), str):
        issued = learning.issued.get(item["request_id"])
        owner = issued.client if issued is not None else owner
    record = learning.check(item, owner)
    record.update(client=caller.client, grader=caller.grader)
    if caller.label:
        record["label"] = caller.label  # the pseudonym, never the header's value
    return record


def log_claimed(learning, records: list[dict], results: list[OutcomeResult]) -> list[dict]:
    """In the thread pool: claim each outcome's request id across the replicas (the first claim wins; the others
    are 409), then log the claimed ones durably (before the 202). On a failure (a full or read-only store) nothing is
    taken: the claims made are released and every id may be graded again."""
    home, kept = learning.home, []
    try:
        for record in records:
            rid = record["request_id"]
            if home.claim_outcome(rid, learning.issued[rid].time):
                kept.append(record)
                continue
            learning.reserved.discard(rid)
            for result in results:
                if result["request_id"] == rid and result["status"] == 202:
                    result["status"] = 409
                    result["reason"] = (
                        f"request id {rid[:80]!r} already has an outcome (graded at another replica): each "
                        "answer is graded once"
                    )
        if kept:
            # why: a graded answer's decision is written before its outcome is durable (a kill -9 after the 202 must
            # not leave an outcome whose decision was still queued: never applied after the restart)
            learning.decision_log.drain()
            learning.log_outcomes(kept)
    except BaseException:
        for record in kept:
            try:
                home.release_outcome(record["request_id"], learning.issued[record["request_id"]].time)
            except OSError:
                pass  # a store that fails: the claim stays, and the id answers 409 (logged nowhere: never learned)
        learning.reserved.difference_update(r["request_id"] for r in records)
        raise
    return kept


def traffic_log_health(gateway: Gateway) -> dict | None:
    """/healthz's word on the traffic log: learning paused (and why) while it cannot be written, what was dropped."""
    learning = gateway.learning
    if learning is None:
        return None
    logs = {"decisions": learning.decision_log, "outcomes": learning.outcome_log}
    failing = {kind: w.failing for kind, w in logs.items() if getattr(w, "failing", None)}
    return {
        "learning_paused": bool(failing),
        "why": "; ".join(f"the {k} log cannot be written ({v})" for k, v in failing.items()) or None,
        "records_dropped": {k: getattr(w, "dropped", 0) + getattr(w, "failed", 0) for k, w in logs.items()},
    }


def learning_metrics(gateway: Gateway) -> None:
    """The traffic log's health in /metrics: learning paused, records dropped by a full queue or a failing store."""
    registry = gateway.metrics.registry
    learning = gateway.learning
    paused = Gauge(
        "locus_learning_paused", "1 while the traffic log cannot be written (learning paused)", registry=registry
    )
    dropped = Gauge(
        "locus_traffic_records_dropped",
        "records of the traffic log dropped (a full queue) or lost (a failing store), by log",
        ["log"],
        registry=registry,
    )
    if learning is None:
        paused.set(0)
        return

    def learning_paused() -> float:
        health = traffic_log_health(gateway)
        assert health is not None, "learning is on (gateway.learning, set once): the traffic log has a health"
        return float(bool(health["learning_paused"]))

    paused.set_function(learning_paused)
    for kind, writer in (("decisions", learning.decision_log), ("outcomes", learning.outcome_log)):
        dropped.labels(kind).set_function(partial(_records_dropped, writer))


def _records_dropped(writer: object) -> float:
    """A traffic log writer's records dropped (a full queue) and lost (a failing store)."""
    return float(getattr(writer, "dropped", 0) + getattr(writer, "failed", 0))
