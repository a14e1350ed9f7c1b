"""Hostile requests: bodies over the limit, JSON nested too deep."""

from __future__ import annotations

import httpx

from tests.locus_pipeline.serve.helpers import FakeUpstreams, chat, client_for, upstream_config


def test_a_body_over_the_limit_is_a_413_and_nothing_is_forwarded(built, tmp_path):
    fake = FakeUpstreams()
    with client_for(
        built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake), max_body_bytes=50_000
    ) as client:
        big = client.post("/v1/chat/completions", json=chat(padding="x" * 60_000))
        chunked = client.post(
            "/route", content=iter([b'{"query": "', b"y" * 60_000, b'"}']), headers={"content-type": "application/json"}
        )
        small = client.post("/v1/chat/completions", json=chat(padding="x" * 1000))
    assert big.status_code == 413 and "larger than 50,000 bytes" in big.json()["error"]["message"]
    assert chunked.status_code == 413
    assert small.status_code == 200 and len(fake.seen) == 1  # only the small one reached an upstream


def test_json_nested_10000_deep_is_a_clear_400(built, tmp_path):
    deep = '{"model": "locus", "messages": ' + "[" * 10_000 + "]" * 10_000 + "}"
    with client_for(built, tmp_path) as client:
        r = client.post("/v1/chat/completions", content=deep, headers={"content-type": "application/json"})
        route = client.post(
            "/route",
            content='{"query": ' + "[" * 10_000 + "]" * 10_000 + "}",
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 400 and "nests JSON deeper" in r.json()["error"]["message"]
    assert route.status_code == 400
