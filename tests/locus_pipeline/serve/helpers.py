"""What the router's tests share: the tiny pool's names, a query, a client on a home, the P(correct) and nearest
neighbours the router must agree with, chat bodies and fake upstreams (httpx MockTransport)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
from fastapi import FastAPI
from fastapi.testclient import TestClient

from locus_model.data.encoding import encode_queries
from locus_model.infer import predict_proba
from locus_model.pool import pool_matrix
from locus_model.routing import RoutingPolicy
from locus_pipeline.serve import ServeConfig, create_app

NAMES = ["alpha-7b", "beta-13b", "gamma-70b", "delta-1b", "org/epsilon 3b"]
QUERY = "What is the derivative of x squared?"


UNGUARDED = RoutingPolicy(guard_margin=0.0)  # the tiny home's router is untrained: P(correct) alone ranks


def client_for(
    built: dict, tmp_path: Path, *, models: dict | None = None, transport=None, clock=time.monotonic, **config
) -> TestClient:
    path = None
    if models is not None:
        path = tmp_path / "models.json"
        path.write_text(json.dumps(models))
    config.setdefault("policy", UNGUARDED)
    config.setdefault("explore", 0.0)  # decisions compared with P(correct): no Thompson draw (tests of it set one)
    app = create_app(
        ServeConfig(home=str(built["home"].path), models_config=str(path) if path else None, **config),
        transport=transport,
        clock=clock,
    )
    return TestClient(app)


def gateway_of(client: TestClient) -> Any:
    """The gateway (app.state.gateway) of a client_for client. TestClient types its app as any ASGI app; client_for's
    is create_app's FastAPI app, whence the cast."""
    return cast(FastAPI, client.app).state.gateway


def expected_probs(built: dict, query: str) -> dict[str, float]:
    names, z = pool_matrix(built["home"].read_pool())
    phi = encode_queries([query], encoder="hashing-256", progress=False)
    return dict(zip(names, predict_proba(built["model"], z, phi)[:, 0].tolist()))


def nearest(built: dict, chosen: str, among: list[str]) -> list[str]:
    names, z = pool_matrix(built["home"].read_pool())
    zi = dict(zip(names, z))
    others = [n for n in among if n != chosen]
    return sorted(others, key=lambda n: (float(np.linalg.norm(zi[n].astype(np.float64) - zi[chosen])), among.index(n)))


def chat(query: str = QUERY, model: str = "locus", **extra) -> dict:
    return {
        "model": model,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": query}],
        **extra,
    }


class FakeUpstreams:
    """httpx MockTransport: one host per pool model; ``failing`` answer 500, ``slow`` time out."""

    def __init__(self, failing=(), slow=()) -> None:
        self.failing, self.slow = set(failing), set(slow)
        self.seen: list[tuple[str, Any, str | None]] = []  # (host, the forwarded JSON body, its authorization)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        body = json.loads(request.content)
        self.seen.append((host, body, request.headers.get("authorization")))
        if host in self.failing:
            return httpx.Response(500, json={"error": {"message": "upstream broke"}})
        if host in self.slow:
            raise httpx.ReadTimeout("too slow", request=request)
        if body.get("stream"):
            chunks = [
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "model": body["model"],
                    "choices": [{"index": 0, "delta": {"content": w}}],
                }
                for w in ("hello", " world")
            ]
            text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx.Response(200, content=text.encode(), headers={"content-type": "text/event-stream"})
        return httpx.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": f"from {host}"}}],
            },
        )


def host(name: str) -> str:
    return "up-" + "".join(c if c.isalnum() else "-" for c in name) + ".test"


def upstream_config(**extra) -> dict:
    return {
        "models": {
            n: {"base_url": f"http://{host(n)}/v1", "model": f"upstream-{n}", "api_key_env": "LOCUS_TEST_KEY"}
            for n in NAMES
        },
        **extra,
    }


def wait_for(predicate, what: str, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {seconds} s")
