"""POST /v1/chat/completions: the dry run, bad requests, forwarding to the chosen model, the fallback chain,
streaming, a pinned model."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.locus_pipeline.serve.helpers import NAMES, QUERY, FakeUpstreams, chat, client_for, host, upstream_config


def test_models_lists_the_router_and_the_pool(built, tmp_path):
    with client_for(built, tmp_path) as client:
        data = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["locus", *sorted(NAMES)]


def test_dry_run_answers_with_the_decision_clearly_marked(built, tmp_path):
    with client_for(built, tmp_path, dry_run=True) as client:
        decision = client.post("/route", json={"query": QUERY}).json()
        r = client.post("/v1/chat/completions", json=chat())
        s = client.post("/v1/chat/completions", json=chat(stream=True))
    assert r.status_code == 200 and r.headers["x-locus-dry-run"] == "true"
    body = r.json()
    assert body["model"] == decision["chosen"] == r.headers["x-locus-model"]
    assert body["locus"]["dry_run"] is True and body["locus"]["fallbacks"] == decision["fallbacks"]
    with client_for(
        built, tmp_path, dry_run=True
    ) as client:  # /healthz and /v1/models agree on what a dry run can route
        health, listed = client.get("/healthz").json(), client.get("/v1/models").json()["data"]
    assert health["routable_models"] == sum(m["locus"].get("routable", False) for m in listed) == len(NAMES)
    assert body["choices"][0]["message"]["content"].startswith("[locus dry-run] would route to")
    events = [line for line in s.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and json.loads(events[0][6:])["model"] == decision["chosen"]


@pytest.mark.parametrize(
    "body, status, message",
    [
        (chat(model="gpt-4o"), 404, "neither 'locus'"),
        (chat(model="locus:2"), 400, "quality_weight=2.0 must be in [0, 1]"),
        (chat(model="locus:high"), 400, "must be a number in [0, 1]"),
        ({"model": "locus", "messages": [{"role": "system", "content": "hi"}]}, 400, "no user message"),
        ({"model": "locus", "messages": []}, 400, "non-empty list"),
        (chat(query=""), 400, "no text to route"),
        (chat(locus={"candidates": ["nope"]}), 400, "unknown candidate"),
    ],
)
def test_chat_rejects_bad_requests(built, tmp_path, body, status, message):
    with client_for(built, tmp_path) as client:
        r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == status and message in r.json()["error"]["message"]


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
    ((seen_host, forwarded, auth),) = fake.seen
    assert seen_host == host(chosen) and forwarded["model"] == f"upstream-{chosen}" and "locus" not in forwarded
    assert forwarded["messages"][1]["content"] == QUERY and auth == "Bearer k-123"


def test_an_upstream_error_moves_down_the_fallback_chain(built, tmp_path):
    with client_for(built, tmp_path) as dry:
        decision = dry.post("/route", json={"query": QUERY}).json()
    chosen = decision["chosen"]
    first, second = decision["fallbacks"][:2]
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
    skipped = explained["locus"]["skipped"]  # why the chosen model and the first fallback did not answer
    assert [(s["model"], s["reason"], s["status"]) for s in skipped] == [
        (chosen, "http_500", 500),
        (first, "timeout", 504),
    ]
    assert "HTTP 500" in skipped[0]["detail"] and "no answer within" in skipped[1]["detail"]


def test_every_upstream_failing_is_a_502_naming_them(built, tmp_path):
    fake = FakeUpstreams(failing={host(n) for n in NAMES})
    with client_for(
        built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake), n_fallbacks=1
    ) as client:
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


def test_a_pinned_model_whose_upstream_fails_returns_its_error_not_another_model(built, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCUS_TEST_KEY", "k-pinned-secret-99")

    def failing_gamma(request: httpx.Request) -> httpx.Response:
        if request.url.host == host("gamma-70b"):
            return httpx.Response(500, json={"error": {"message": f"broke; key {request.headers['authorization']}"}})
        return FakeUpstreams()(request)

    seen = []
    transport = httpx.MockTransport(lambda request: seen.append(request.url.host) or failing_gamma(request))
    with client_for(built, tmp_path, models=upstream_config(), transport=transport) as client:
        r = client.post("/v1/chat/completions", json=chat(model="gamma-70b"))
        assert seen == [host("gamma-70b")]
        timeout = FakeUpstreams(slow={host("gamma-70b")})
    assert r.status_code == 500 and r.json()["error"]["type"] == "upstream_error"
    assert "the upstream of gamma-70b failed: HTTP 500" in r.json()["error"]["message"]
    assert "k-pinned-secret-99" not in r.text and "fallbacks" in r.json()["error"]["message"]
    assert r.headers["x-locus-model"] == "gamma-70b" and r.headers["x-locus-fallbacks-used"] == "0"
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(timeout)) as client:
        assert client.post("/v1/chat/completions", json=chat(model="gamma-70b")).status_code == 504


@pytest.mark.parametrize("how", ["body", "list", "header", "config"])
def test_a_pinned_model_falls_back_when_the_request_or_the_config_allows_it(built, tmp_path, how):
    fake = FakeUpstreams(failing={host("gamma-70b")})
    body = chat(
        model="gamma-70b",
        **({"fallbacks": True} if how == "body" else {"fallbacks": ["delta-1b"]} if how == "list" else {}),
    )
    headers = {"x-locus-fallbacks": "true"} if how == "header" else {}
    models = upstream_config(gateway={"pinned_fallbacks": True}) if how == "config" else upstream_config()
    with client_for(built, tmp_path, models=models, transport=httpx.MockTransport(fake)) as client:
        r = client.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-locus-chosen"] == "gamma-70b" and r.headers["x-locus-fallbacks-used"] == "1"
    assert r.headers["x-locus-model"] != "gamma-70b" and fake.seen[0][0] == host("gamma-70b")
    if how == "list":
        assert r.headers["x-locus-model"] == "delta-1b"
    assert all("fallbacks" not in forwarded for _, forwarded, _ in fake.seen)  # ours, not the upstream's


def test_a_routed_request_may_turn_fallbacks_off(built, tmp_path):
    fake = FakeUpstreams(failing={host(n) for n in NAMES})
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake)) as client:
        r = client.post("/v1/chat/completions", json=chat(disable_fallbacks=True))
        bad = client.post("/v1/chat/completions", json=chat(fallbacks="yes"))
    assert r.status_code == 500 and len(fake.seen) == 1 and "turned off by this request" in r.json()["error"]["message"]
    assert bad.status_code == 400 and "fallbacks must be true, false or a list" in bad.json()["error"]["message"]
