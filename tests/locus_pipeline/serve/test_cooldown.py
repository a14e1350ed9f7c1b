"""Cooldowns of failing upstreams: skipped after allowed_fails failures in the window, tried again after the
cooldown (an injected clock: no waiting), shown in /metrics, the log and a pinned request's 503."""

from __future__ import annotations

import httpx

from locus_pipeline.serve.cooldown import Cooldowns
from tests.locus_pipeline.serve.helpers import NAMES, FakeUpstreams, chat, client_for, host, upstream_config


def test_failures_within_the_window_cool_an_upstream_down_until_its_cooldown_ends():
    now = [0.0]
    cooled = []
    c = Cooldowns(allowed_fails=2, window_s=10, cooldown_s=30, clock=lambda: now[0], on_cooldown=cooled.append)
    assert c.failed("a") is False
    now[0] = 11  # the first failure left the window
    assert c.failed("a") is False and c.remaining("a") == 0
    now[0] = 12
    assert c.failed("a") is True and c.remaining("a") == 30 and c.cooled_down() == 1 and cooled == ["a"]
    now[0] = 42
    assert c.remaining("a") == 0 and c.cooled_down() == 0  # tried again
    assert c.failed("a") is True and c.remaining("a") == 30  # on probation: one failure cools it down again
    now[0] = 80
    c.succeeded("a")
    assert c.failed("a") is False  # a success ends its record


def test_a_failing_upstream_is_skipped_during_its_cooldown_and_tried_after_it(built, tmp_path, caplog):
    now = [1000.0]
    fake = FakeUpstreams(slow={host("gamma-70b")})
    models = upstream_config(gateway={"allowed_fails": 2, "cooldown_s": 30, "pinned_fallbacks": True})
    with client_for(
        built, tmp_path, models=models, transport=httpx.MockTransport(fake), clock=lambda: now[0]
    ) as client:
        for _ in range(2):
            assert client.post("/v1/chat/completions", json=chat(model="gamma-70b")).status_code == 200
        assert [h for h, _, _ in fake.seen].count(host("gamma-70b")) == 2
        skipped = client.post("/v1/chat/completions", json=chat(model="gamma-70b", locus={"explain": True}))
        metrics = client.get("/metrics").text
        alone = client.post("/v1/chat/completions", json=chat(model="gamma-70b", fallbacks=False))
        now[0] += 31
        fake.slow.clear()
        back = client.post("/v1/chat/completions", json=chat(model="gamma-70b"))
        after = client.get("/metrics").text
    assert skipped.status_code == 200 and skipped.headers["x-locus-model"] != "gamma-70b"
    (why,) = skipped.json()["locus"]["skipped"]
    assert why["model"] == "gamma-70b" and why["reason"] == "cooldown" and "tried again in 30 s" in why["detail"]
    assert [h for h, _, _ in fake.seen].count(host("gamma-70b")) == 3  # skipped twice, then tried after the cooldown
    assert 'locus_upstream_cooldowns_total{model="gamma-70b"} 1.0' in metrics
    assert "locus_upstreams_cooled_down 1.0" in metrics and "locus_upstreams_cooled_down 0.0" in after
    assert 'locus_fallbacks_total{model="gamma-70b",reason="cooldown"}' in metrics
    assert alone.status_code == 503 and alone.headers["retry-after"] == "30"
    assert "is cooled down after repeated failures" in alone.json()["error"]["message"]
    assert back.status_code == 200 and back.headers["x-locus-model"] == "gamma-70b"
    assert "upstream gamma-70b failed 2 times in 60 s: cooled down for 30 s" in caplog.text


def test_a_routed_503_when_every_model_is_cooled_down_says_when_to_try_again(built, tmp_path):
    now = [1000.0]
    fake = FakeUpstreams(failing={host(n) for n in NAMES})
    models = upstream_config(gateway={"allowed_fails": 1, "cooldown_s": 30})
    with client_for(
        built,
        tmp_path,
        models=models,
        transport=httpx.MockTransport(fake),
        clock=lambda: now[0],
        n_fallbacks=len(NAMES) - 1,
    ) as client:
        failed = client.post("/v1/chat/completions", json=chat())  # every model fails once: all cooled down
        now[0] += 10
        cooled = client.post("/v1/chat/completions", json=chat())
    assert failed.status_code == 502 and "retry-after" not in failed.headers
    assert cooled.status_code == 503 and cooled.headers["retry-after"] == "20"  # the soonest back, as the pinned 503
    assert cooled.json()["error"]["code"] == "cooldown"
