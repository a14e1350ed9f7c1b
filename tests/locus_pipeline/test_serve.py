"""`locus serve`: routing decisions, OpenAI-compatible forwarding with fallback, dry run, hot reload, 4xx, metrics.

The home is tiny and untrained (tests/locus_pipeline/serve_home.py): a random checkpoint with the hashing encoder
and a pool embedded with it. Upstreams are httpx MockTransports, or real uvicorn servers on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.testclient import TestClient

from locus_model.data.encoding import encode_queries
from locus_model.infer import predict_proba
from locus_model.pool import pool_matrix
from locus_pipeline.serve import ServeConfig, create_app, read_models_config, ConfigError
from tests.locus_pipeline.serve_home import ServerThread, build_home, embed, onboard, save_random_checkpoint
from locus_pipeline.storage import write_parquet_atomic

NAMES = ["alpha-7b", "beta-13b", "gamma-70b", "delta-1b", "org/epsilon 3b"]
QUERY = "What is the derivative of x squared?"


@pytest.fixture()
def built(tmp_path: Path) -> dict:
    return build_home(tmp_path / "home", NAMES)


def client_for(built: dict, tmp_path: Path, *, models: dict | None = None, transport=None, **config) -> TestClient:
    path = None
    if models is not None:
        path = tmp_path / "models.json"
        path.write_text(json.dumps(models))
    app = create_app(ServeConfig(home=str(built["home"].path), models_config=str(path) if path else None, **config),
                     transport=transport)
    return TestClient(app)


def expected_probs(built: dict, query: str) -> dict[str, float]:
    names, z = pool_matrix(built["home"].read_pool())
    phi = encode_queries([query], encoder="hashing-256", progress=False)
    return dict(zip(names, predict_proba(built["model"], z, phi)[:, 0].tolist()))


def nearest(built: dict, chosen: str, among: list[str]) -> list[str]:
    names, z = pool_matrix(built["home"].read_pool())
    zi = dict(zip(names, z))
    others = [n for n in among if n != chosen]
    return sorted(others, key=lambda n: (float(np.linalg.norm(zi[n].astype(np.float64) - zi[chosen])), among.index(n)))


# ------------------------------------------------------------------------------------------------ /route


def test_route_ranks_the_pool_by_p_correct_with_nearest_neighbour_fallbacks(built, tmp_path):
    with client_for(built, tmp_path) as client:
        r = client.post("/route", json={"query": QUERY})
    assert r.status_code == 200, r.text
    body = r.json()
    probs = expected_probs(built, QUERY)
    ranking = body["ranking"]
    assert [x["model"] for x in ranking] == sorted(probs, key=lambda n: -probs[n])  # quality_weight 1: by P(correct)
    for x in ranking:
        assert x["p_correct"] == pytest.approx(probs[x["model"]], abs=1e-6) and x["score"] == pytest.approx(x["p_correct"], abs=1e-6)
    assert body["chosen"] == ranking[0]["model"]
    near = nearest(built, body["chosen"], list(built["pool"]["model"]))[:3]  # the three nearest, in ranking order
    assert body["fallbacks"] == [x["model"] for x in ranking if x["model"] in near]
    assert body["checkpoint_id"] == built["checkpoint_id"] and body["pool_models"] == len(NAMES)
    # no catalog and no prices: the sizes in the names ("alpha-7b") are the cost proxy, and the note says so
    assert body["cost_basis"] == "params_b" and "read from the name" in body["cost_note"]
    assert body["elapsed_ms"] >= 0 and body["lambda"] == 0.0


def test_route_trades_quality_for_cost_and_honours_the_cost_cap(built, tmp_path):
    costs = {"alpha-7b": 7, "beta-13b": 13, "gamma-70b": 70, "delta-1b": 1, "org/epsilon 3b": 3}
    models = {"models": {n: {"cost_per_query": c} for n, c in costs.items()}}
    with client_for(built, tmp_path, models=models) as client:
        cheapest = client.post("/route", json={"query": QUERY, "quality_weight": 0}).json()
        capped = client.post("/route", json={"query": QUERY, "max_cost": 10}).json()
        half = client.post("/route", json={"query": QUERY, "quality_weight": 0.5,
                                           "candidates": ["gamma-70b", "delta-1b"]}).json()
    assert cheapest["chosen"] == "delta-1b" and cheapest["lambda"] is None  # infinite
    assert [x["model"] for x in cheapest["ranking"]] == sorted(costs, key=costs.get)
    assert set(capped["over_cost"]) == {"beta-13b", "gamma-70b"}
    assert {x["model"] for x in capped["ranking"]} == {"alpha-7b", "delta-1b", "org/epsilon 3b"}
    assert set(capped["fallbacks"]) <= {"alpha-7b", "delta-1b", "org/epsilon 3b"}
    probs = expected_probs(built, QUERY)
    score = {x["model"]: x["score"] for x in half["ranking"]}
    assert score["gamma-70b"] == pytest.approx(0.5 * probs["gamma-70b"] - 0.5, abs=1e-6)  # most expensive: c~ = 1
    assert score["delta-1b"] == pytest.approx(0.5 * probs["delta-1b"] - 0.5 / 70, abs=1e-6)
    assert half["cost_basis"] == "usd"
    assert {x["model"]: x["expected_cost"] for x in half["ranking"]} == {"gamma-70b": 70.0, "delta-1b": 1.0}


@pytest.mark.parametrize("body, message", [
    ({"query": ""}, "query is empty"),
    ({"query": "   "}, "query is empty"),
    ({}, "query: Field required"),
    ({"query": "x", "candidates": ["nope"]}, "unknown candidate model(s) ['nope']"),
    ({"query": "x", "candidates": []}, "candidates is empty"),
    ({"query": "x", "max_cost": -1}, "max_cost=-1.0 must be a number >= 0"),
    ({"query": "x", "quality_weight": 1.5}, "quality_weight=1.5 must be in [0, 1]"),
    ({"query": "x", "quality_weight": -0.1}, "quality_weight=-0.1 must be in [0, 1]"),
    ({"query": "x", "temperature": 1}, "temperature: Extra inputs are not permitted"),
])
def test_route_rejects_bad_requests_with_a_clear_message(built, tmp_path, body, message):
    with client_for(built, tmp_path) as client:
        r = client.post("/route", json=body)
    assert r.status_code == 400
    assert message in r.json()["error"]["message"]


def test_a_cost_cap_below_every_candidate_is_a_400(built, tmp_path):
    models = {"models": {n: {"cost_per_query": 1.0} for n in NAMES}}
    with client_for(built, tmp_path, models=models) as client:
        r = client.post("/route", json={"query": "x", "max_cost": 0.5})
    assert r.status_code == 400 and "no candidate costs at most max_cost=0.5" in r.json()["error"]["message"]


def test_bearer_token_guards_everything_but_healthz(built, tmp_path):
    with client_for(built, tmp_path, token="s3cret") as client:
        assert client.get("/healthz").status_code == 200
        assert client.post("/route", json={"query": QUERY}).status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.post("/route", json={"query": QUERY}, headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_models_config_errors_name_the_problem(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("models:\n  a: {base_url: ftp://x, price: 3}\n")
    with pytest.raises(ConfigError, match=r"unknown keys \['price'\]"):
        read_models_config(bad)
    bad.write_text("models:\n  a: {base_url: ftp://x}\n")
    with pytest.raises(ConfigError, match="must start with http"):
        read_models_config(bad)
    bad.write_text("models:\n  a: {cost_per_query: -2}\n")
    with pytest.raises(ConfigError, match="cost_per_query=-2 must be a number >= 0"):
        read_models_config(bad)
    ok = tmp_path / "ok.yaml"
    ok.write_text("defaults: {timeout_s: 5}\nmodels:\n  a: {base_url: 'http://h/v1/', api_key_env: K, price_input_per_mtok: 1}\n")
    config = read_models_config(ok)
    assert config.upstreams["a"].base_url == "http://h/v1" and config.upstreams["a"].model == "a"
    assert config.upstreams["a"].timeout_s == 5 and config.costs["a"] == {"price_input_per_mtok": 1.0}


# ------------------------------------------------------------------------------------------------ OpenAI-compatible


def chat(query: str = QUERY, model: str = "locus", **extra) -> dict:
    return {"model": model, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": query}],
            **extra}


def test_models_lists_the_router_and_the_pool(built, tmp_path):
    with client_for(built, tmp_path) as client:
        data = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["locus", *sorted(NAMES)]


def test_dry_run_answers_with_the_decision_clearly_marked(built, tmp_path):
    with client_for(built, tmp_path) as client:
        decision = client.post("/route", json={"query": QUERY}).json()
        r = client.post("/v1/chat/completions", json=chat())
        s = client.post("/v1/chat/completions", json=chat(stream=True))
    assert r.status_code == 200 and r.headers["x-locus-dry-run"] == "true"
    body = r.json()
    assert body["model"] == decision["chosen"] == r.headers["x-locus-model"]
    assert body["locus"]["dry_run"] is True and body["locus"]["fallbacks"] == decision["fallbacks"]
    with client_for(built, tmp_path) as client:  # /healthz and /v1/models agree on what a dry run can route
        health, listed = client.get("/healthz").json(), client.get("/v1/models").json()["data"]
    assert health["routable_models"] == sum(m["locus"].get("routable", False) for m in listed) == len(NAMES)
    assert body["choices"][0]["message"]["content"].startswith("[locus dry-run: no upstream configured]")
    events = [line for line in s.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and json.loads(events[0][6:])["model"] == decision["chosen"]


@pytest.mark.parametrize("body, status, message", [
    (chat(model="gpt-4o"), 404, "neither 'locus'"),
    (chat(model="locus:2"), 400, "quality_weight=2.0 must be in [0, 1]"),
    (chat(model="locus:high"), 400, "must be a number in [0, 1]"),
    ({"model": "locus", "messages": [{"role": "system", "content": "hi"}]}, 400, "no user message"),
    ({"model": "locus", "messages": []}, 400, "non-empty list"),
    (chat(query=""), 400, "no text to route"),
    (chat(locus={"candidates": ["nope"]}), 400, "unknown candidate"),
])
def test_chat_rejects_bad_requests(built, tmp_path, body, status, message):
    with client_for(built, tmp_path) as client:
        r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == status and message in r.json()["error"]["message"]


class FakeUpstreams:
    """httpx MockTransport: one host per pool model; ``failing`` answer 500, ``slow`` time out."""

    def __init__(self, failing=(), slow=()) -> None:
        self.failing, self.slow, self.seen = set(failing), set(slow), []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        body = json.loads(request.content)
        self.seen.append((host, body, request.headers.get("authorization")))
        if host in self.failing:
            return httpx.Response(500, json={"error": {"message": "upstream broke"}})
        if host in self.slow:
            raise httpx.ReadTimeout("too slow", request=request)
        if body.get("stream"):
            chunks = [{"id": "c", "object": "chat.completion.chunk", "model": body["model"],
                       "choices": [{"index": 0, "delta": {"content": w}}]} for w in ("hello", " world")]
            text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx.Response(200, content=text.encode(), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "model": body["model"],
                                         "choices": [{"index": 0, "message": {"role": "assistant", "content": f"from {host}"}}]})


def host(name: str) -> str:
    return "up-" + "".join(c if c.isalnum() else "-" for c in name) + ".test"


def upstream_config(**extra) -> dict:
    return {"models": {n: {"base_url": f"http://{host(n)}/v1", "model": f"upstream-{n}", "api_key_env": "LOCUS_TEST_KEY"}
                       for n in NAMES}, **extra}


def test_chat_forwards_to_the_chosen_model_and_says_which_answered(built, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCUS_TEST_KEY", "k-123")
    fake = FakeUpstreams()
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake)) as client:
        decision = client.post("/route", json={"query": QUERY}).json()
        r = client.post("/v1/chat/completions", json=chat(locus={"max_cost": 100}))
    assert r.status_code == 200, r.text
    chosen = decision["chosen"]
    assert r.headers["x-locus-model"] == chosen and r.json()["model"] == chosen
    assert r.json()["choices"][0]["message"]["content"] == f"from {host(chosen)}"
    (seen_host, forwarded, auth), = fake.seen
    assert seen_host == host(chosen) and forwarded["model"] == f"upstream-{chosen}" and "locus" not in forwarded
    assert forwarded["messages"][1]["content"] == QUERY and auth == "Bearer k-123"


def test_an_upstream_error_moves_down_the_fallback_chain(built, tmp_path):
    with client_for(built, tmp_path) as dry:
        decision = dry.post("/route", json={"query": QUERY}).json()
    chosen, first, second = decision["chosen"], *decision["fallbacks"][:2]
    fake = FakeUpstreams(failing={host(chosen)}, slow={host(first)})
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake)) as client:
        r = client.post("/v1/chat/completions", json=chat())
        metrics = client.get("/metrics").text
    assert r.status_code == 200 and r.headers["x-locus-model"] == second and r.json()["model"] == second
    assert r.headers["x-locus-chosen"] == chosen and r.headers["x-locus-fallbacks-used"] == "2"
    assert [h for h, _, _ in fake.seen] == [host(chosen), host(first), host(second)]
    assert f'locus_fallbacks_total{{model="{chosen}",reason="http_500"}} 1.0' in metrics
    assert f'locus_fallbacks_total{{model="{first}",reason="timeout"}} 1.0' in metrics
    assert f'locus_answers_total{{model="{second}"}} 1.0' in metrics
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake)) as client:
        explained = client.post("/v1/chat/completions", json=chat(locus={"explain": True})).json()
    assert explained["locus"]["chosen"] == chosen and explained["locus"]["answered_by"] == second
    assert explained["locus"]["fallbacks_used"] == 2 and explained["locus"]["ranking"][0]["model"] == chosen


def test_every_upstream_failing_is_a_502_naming_them(built, tmp_path):
    fake = FakeUpstreams(failing={host(n) for n in NAMES})
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake), n_fallbacks=1) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 502 and "every model of the fallback chain failed" in r.json()["error"]["message"]
    assert len(fake.seen) == 2


def test_an_upstream_client_error_is_passed_through_without_fallback(built, tmp_path):
    def bad_request(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "max_tokens too large"}})

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(bad_request)) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 400 and r.json()["error"]["message"] == "max_tokens too large"
    assert r.headers["x-locus-fallbacks-used"] == "0"


def test_streaming_passes_through_with_the_model_named(built, tmp_path):
    fake = FakeUpstreams()
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake)) as client:
        r = client.post("/v1/chat/completions", json=chat(stream=True))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["hello", " world"]
    assert {c["model"] for c in chunks} == {r.headers["x-locus-model"]}


def test_a_pinned_pool_model_answers_itself(built, tmp_path):
    fake = FakeUpstreams()
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake)) as client:
        r = client.post("/v1/chat/completions", json=chat(model="gamma-70b"))
    assert r.headers["x-locus-model"] == "gamma-70b" and fake.seen[0][0] == host("gamma-70b")


# ------------------------------------------------------------------------------------------------ real sockets


def fake_upstream_app(kind: str) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(body: dict):
        if kind == "slow":
            await asyncio.sleep(3)
        if kind == "failing":
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        if body.get("stream"):
            async def events():
                for word in ("real", " socket"):
                    yield f"data: {json.dumps({'model': body['model'], 'choices': [{'delta': {'content': word}}]})}\n\n"
                yield "data: [DONE]\n\n"
            return StreamingResponse(events(), media_type="text/event-stream")
        return {"object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok from good"}}]}

    return app


def test_real_sockets_slow_and_failing_upstreams_fall_back(built, tmp_path):
    with client_for(built, tmp_path) as dry:
        decision = dry.post("/route", json={"query": QUERY}).json()
    chosen, first, second = decision["chosen"], *decision["fallbacks"][:2]
    with ServerThread(fake_upstream_app("slow")) as slow, ServerThread(fake_upstream_app("failing")) as failing, \
            ServerThread(fake_upstream_app("good")) as good:
        url = {chosen: slow.url, first: failing.url}
        models = {"defaults": {"timeout_s": 0.5},
                  "models": {n: {"base_url": f"{url.get(n, good.url)}/v1"} for n in NAMES}}
        path = tmp_path / "models.yaml"
        import yaml
        path.write_text(yaml.safe_dump(models))
        app = create_app(ServeConfig(home=str(built["home"].path), models_config=str(path)))
        with ServerThread(app) as router:
            with httpx.Client(base_url=router.url, timeout=30) as client:
                r = client.post("/v1/chat/completions", json=chat())
                s = client.post("/v1/chat/completions", json=chat(stream=True))
                metrics = client.get("/metrics").text
    assert r.status_code == 200, r.text
    assert r.headers["x-locus-model"] == second and r.json()["model"] == second
    assert r.json()["choices"][0]["message"]["content"] == "ok from good"
    assert s.headers["x-locus-model"] == second
    assert [json.loads(line[6:])["model"] for line in s.text.splitlines() if line.startswith("data: {")] == [second] * 2
    assert f'locus_fallbacks_total{{model="{chosen}",reason="timeout"}} 2.0' in metrics
    assert f'locus_fallbacks_total{{model="{first}",reason="http_503"}} 2.0' in metrics
    # (the streamed request is counted once its body is sent, which may land after the /metrics call)
    assert 'locus_request_latency_seconds_count{endpoint="/v1/chat/completions"}' in metrics


# ------------------------------------------------------------------------------------------------ hot reload


def wait_for(predicate, what: str, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {seconds} s")


def test_an_onboarded_model_is_routable_without_restart(built, tmp_path):
    with client_for(built, tmp_path, poll_seconds=0.05) as client:
        before = client.post("/route", json={"query": QUERY}).json()
        assert before["pool_models"] == len(NAMES)
        onboard(built, "zeta-new 2b")
        wait_for(lambda: "zeta-new 2b" in [m["id"] for m in client.get("/v1/models").json()["data"]],
                 "the onboarded model in /v1/models")
        after = client.post("/route", json={"query": QUERY}).json()
        pinned = client.post("/route", json={"query": QUERY, "candidates": ["zeta-new 2b"]}).json()
        dry = client.post("/v1/chat/completions", json=chat(model="zeta-new 2b"))
        metrics = client.get("/metrics").text
    assert after["pool_models"] == len(NAMES) + 1 and len(after["ranking"]) == len(NAMES) + 1
    assert after["checkpoint_id"] == before["checkpoint_id"]
    assert pinned["chosen"] == "zeta-new 2b" and dry.headers["x-locus-model"] == "zeta-new 2b"
    assert 'locus_pool_reloads_total{outcome="ok"} 1.0' in metrics and "locus_pool_models 6.0" in metrics


def test_a_broken_pool_keeps_the_old_one_served(built, tmp_path):
    with client_for(built, tmp_path, poll_seconds=0.05) as client:
        pool = built["home"].read_pool()
        write_parquet_atomic(pool.assign(checkpoint_id="0" * 16), built["home"].pool_path)  # no such checkpoint
        wait_for(lambda: client.get("/healthz").json()["last_reload_error"], "the reload failure in /healthz")
        r = client.post("/route", json={"query": QUERY})
    assert r.status_code == 200 and r.json()["checkpoint_id"] == built["checkpoint_id"]


def test_concurrent_requests_during_reloads_all_succeed_on_one_consistent_pool(built, tmp_path):
    """Requests race a rebuild with a new checkpoint (4 models) and back (5 models): every answer is one snapshot."""
    home = built["home"]
    model_b, cid_b = save_random_checkpoint(home, encoder="hashing-256", seed=7)
    pool_a = home.read_pool()
    pool_b = embed(model_b, cid_b, NAMES[:4], encoder="hashing-256", source="training", seed=7)
    sizes = {built["checkpoint_id"]: len(NAMES), cid_b: 4}
    app = create_app(ServeConfig(home=str(home.path), poll_seconds=0.02))

    async def hammer(url: str) -> list:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            async def one(i: int):
                return await client.post("/route", json={"query": f"{QUERY} #{i}"})

            async def flip():
                for k in range(6):
                    write_parquet_atomic(pool_b if k % 2 == 0 else pool_a, home.pool_path)
                    await asyncio.sleep(0.1)

            results = await asyncio.gather(*(one(i) for i in range(120)), flip())
            return results[:-1]

    with ServerThread(app) as server:
        responses = asyncio.run(hammer(server.url))
        reloads = httpx.get(f"{server.url}/metrics").text
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200][:2]
    bodies = [r.json() for r in responses]
    for b in bodies:
        assert len(b["ranking"]) == b["pool_models"] == sizes[b["checkpoint_id"]]
    assert 'locus_pool_reloads_total{outcome="ok"}' in reloads


def test_metrics_count_requests_and_decisions(built, tmp_path):
    with client_for(built, tmp_path) as client:
        chosen = client.post("/route", json={"query": QUERY}).json()["chosen"]
        client.post("/route", json={"query": ""})
        text = client.get("/metrics").text
    assert 'locus_requests_total{endpoint="/route",status="200"} 1.0' in text
    assert 'locus_requests_total{endpoint="/route",status="400"} 1.0' in text
    assert f'locus_decisions_total{{model="{chosen}"}} 1.0' in text
    assert 'locus_request_latency_seconds_bucket{endpoint="/route",le="0.05"}' in text


def test_a_missing_pool_fails_at_startup(tmp_path):
    from locus_pipeline.cli import main

    assert main(["serve", "--home", str(tmp_path / "empty"), "--port", "0"]) == 2


# ------------------------------------------------------------------------------------------------ hostile requests (issue 26)


def test_a_body_over_the_limit_is_a_413_and_nothing_is_forwarded(built, tmp_path):
    fake = FakeUpstreams()
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake),
                    max_body_bytes=50_000) as client:
        big = client.post("/v1/chat/completions", json=chat(padding="x" * 60_000))
        chunked = client.post("/route", content=iter([b'{"query": "', b"y" * 60_000, b'"}']),
                              headers={"content-type": "application/json"})
        small = client.post("/v1/chat/completions", json=chat(padding="x" * 1000))
    assert big.status_code == 413 and "larger than 50,000 bytes" in big.json()["error"]["message"]
    assert chunked.status_code == 413
    assert small.status_code == 200 and len(fake.seen) == 1  # only the small one reached an upstream


def test_the_default_body_limit_is_one_mib():
    assert ServeConfig().max_body_bytes == 1 << 20


def test_json_nested_10000_deep_is_a_clear_400(built, tmp_path):
    deep = '{"model": "locus", "messages": ' + "[" * 10_000 + "]" * 10_000 + "}"
    with client_for(built, tmp_path) as client:
        r = client.post("/v1/chat/completions", content=deep, headers={"content-type": "application/json"})
        route = client.post("/route", content='{"query": ' + "[" * 10_000 + "]" * 10_000 + "}",
                            headers={"content-type": "application/json"})
    assert r.status_code == 400 and "nests JSON deeper" in r.json()["error"]["message"]
    assert route.status_code == 400


def test_credentials_an_upstream_echoes_are_scrubbed_from_the_502_and_the_log(built, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LOCUS_TEST_KEY", "sk-live-0123456789abcdef")

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text=f"bad gateway; you sent Authorization: {request.headers['authorization']} "
                                        f"and api_key=other-secret-123")

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(echo), n_fallbacks=1) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 502
    for text in (r.text, caplog.text):
        assert "0123456789abcdef" not in text and "other-secret-123" not in text
    assert "[redacted]" in r.text


def test_a_relayed_client_error_is_scrubbed_too(built, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCUS_TEST_KEY", "k-very-secret")

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": f"bad key {request.headers['authorization']}"}})

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(echo)) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 401 and "k-very-secret" not in r.text


class _CutStream(httpx.AsyncByteStream):
    async def __aiter__(self):
        yield b'data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "hel"}}]}\n\n'
        raise httpx.ReadError("connection reset by peer")


def test_a_stream_cut_mid_way_ends_with_an_error_event(built, tmp_path):
    def cut(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_CutStream(), headers={"content-type": "text/event-stream"})

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(cut)) as client:
        r = client.post("/v1/chat/completions", json=chat(stream=True))
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert json.loads(events[0])["choices"][0]["delta"]["content"] == "hel"
    assert json.loads(events[-1])["error"]["code"] == "stream_interrupted"


def test_a_streamed_200_that_is_not_an_event_stream_falls_back(built, tmp_path):
    with client_for(built, tmp_path) as dry:
        chosen = dry.post("/route", json={"query": QUERY}).json()["chosen"]
    fake = FakeUpstreams()

    def broken_first(request: httpx.Request) -> httpx.Response:
        if request.url.host == host(chosen):
            return httpx.Response(200, content=b"<html>not json</html>", headers={"content-type": "text/event-stream"})
        return fake(request)

    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(broken_first)) as client:
        r = client.post("/v1/chat/completions", json=chat(stream=True))
        metrics = client.get("/metrics").text
    assert r.status_code == 200 and r.headers["x-locus-model"] != chosen and r.headers["x-locus-fallbacks-used"] == "1"
    assert f'locus_fallbacks_total{{model="{chosen}",reason="bad_response"}} 1.0' in metrics


def test_healthz_without_the_token_names_no_model(built, tmp_path):
    models = {"models": {"not-in-pool-model": {"base_url": "http://x.test/v1"}}}
    with client_for(built, tmp_path, models=models, token="s3cret") as client:
        anonymous = client.get("/healthz").json()
        with_token = client.get("/healthz", headers={"Authorization": "Bearer s3cret"}).json()
    assert "not-in-pool-model" not in json.dumps(anonymous) and anonymous["status"] == "ok"
    assert with_token["configured_not_in_pool"] == ["not-in-pool-model"]
# ------------------------------------------------------------------------------------------------ micro-batching


async def _post_all(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await asyncio.gather(*(client.post("/route", content=b, headers={"content-type": "application/json"})
                                      for b in bodies))


@pytest.mark.slow
def test_a_query_the_encoder_refuses_fails_alone_among_concurrent_ones(built, tmp_path):
    """20 legitimate queries and one with a lone surrogate (valid JSON, not valid Unicode) sent at once: the 20
    are answered as when sent alone, the poisoned one is a 400 that says what is wrong."""
    texts = [f"{QUERY} variant {i}" for i in range(20)]
    bodies = [json.dumps({"query": t}).encode() for t in texts]
    bodies.insert(7, b'{"query": "x \\ud800 y"}')
    app = create_app(ServeConfig(home=str(built["home"].path), batch_wait_ms=50))
    with ServerThread(app) as server:
        responses = asyncio.run(_post_all(server.url, bodies))
        metrics = httpx.get(f"{server.url}/metrics").text
    poisoned = responses.pop(7)
    assert poisoned.status_code == 400, poisoned.text
    error = poisoned.json()["error"]
    assert "lone surrogate '\\ud800'" in error["message"] and error["code"] == "invalid_query_text", error
    assert [r.status_code for r in responses] == [200] * 20
    for text, r in zip(texts, responses):
        probs = expected_probs(built, text)
        assert r.json()["chosen"] == max(probs, key=probs.get)
    batches = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
               if line.startswith("locus_scorer_batch_size_")}
    assert batches["locus_scorer_batch_size_count"] < 21  # some queries were encoded together


@pytest.mark.slow
def test_concurrent_clients_get_the_decisions_of_sequential_ones(tmp_path):
    """The real encoder (all-MiniLM-L6-v2, onnx-int8): 24 queries sent one after another, then at once to a
    fresh server (no cached encodings); the same choices and probabilities."""
    built = build_home(tmp_path / "home", NAMES, encoder="all-MiniLM-L6-v2", runtime="onnx-int8", n_queries=16)
    texts = [f"question {i}: " + ["Which organ makes insulin?", "Solve 3x + 5 = 20.", "Who wrote Hamlet?"][i % 3]
             + " " * (i % 5) + "Explain briefly." * (i % 4) for i in range(24)]
    bodies = [json.dumps({"query": t}).encode() for t in texts]
    config = ServeConfig(home=str(built["home"].path), batch_wait_ms=50)
    with client_for(built, tmp_path) as client:  # sequential: a batch of one each
        sequential = [client.post("/route", content=b, headers={"content-type": "application/json"}).json()
                      for b in bodies]
    with ServerThread(create_app(config)) as server:
        concurrent = [r.json() for r in asyncio.run(_post_all(server.url, bodies))]
    assert sequential[0]["encoder_runtime"] == "onnx-int8"
    for s, c in zip(sequential, concurrent):
        assert c["chosen"] == s["chosen"]
        assert [x["model"] for x in c["ranking"]] == [x["model"] for x in s["ranking"]]
        np.testing.assert_allclose([x["p_correct"] for x in c["ranking"]], [x["p_correct"] for x in s["ranking"]],
                                   atol=1e-5)
