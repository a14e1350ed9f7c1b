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
    with client_for(built, tmp_path, dry_run=True) as client:  # /healthz and /v1/models agree on what a dry run can route
        health, listed = client.get("/healthz").json(), client.get("/v1/models").json()["data"]
    assert health["routable_models"] == sum(m["locus"].get("routable", False) for m in listed) == len(NAMES)
    assert body["choices"][0]["message"]["content"].startswith("[locus dry-run] would route to")
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
