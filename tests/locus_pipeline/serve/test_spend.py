"""Per-model spend in /metrics (the upstreams' reported tokens, their cost at the configured prices), what model
"locus" answers with (--serve auto | router | single:MODEL: auto follows the routing evaluation's verdict) and the
start-up summary."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from locus_model.routing import RoutingPolicy
from locus_pipeline.serve import ServeConfig, create_app
from tests.locus_pipeline.serve.helpers import NAMES, FakeUpstreams, chat, client_for, host, upstream_config


def usage_upstream(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
    if body.get("stream"):
        chunks = [{"model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]},
                  {"model": "m", "choices": [], "usage": usage}]
        text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, content=text.encode(), headers={"content-type": "text/event-stream"})
    if body["messages"][-1]["content"] == "lie":  # negative counts: not counted
        usage = {"prompt_tokens": -5, "completion_tokens": 10**30}
    return httpx.Response(200, json={"model": "m", "choices": [{"index": 0, "message": {"content": "hi"}}],
                                     "usage": usage})


def test_metrics_count_each_models_tokens_and_spend_at_its_prices(built, tmp_path):
    models = upstream_config()
    for name in NAMES:
        models["models"][name].update(price_input_per_mtok=2.0, price_output_per_mtok=10.0)
    with client_for(built, tmp_path, models=models, transport=httpx.MockTransport(usage_upstream)) as client:
        a = client.post("/v1/chat/completions", json=chat(model="gamma-70b"))
        b = client.post("/v1/chat/completions", json=chat(model="gamma-70b", stream=True))
        client.post("/v1/chat/completions", json=chat(query="lie", model="gamma-70b"))
        metrics = client.get("/metrics").text
    assert a.status_code == b.status_code == 200
    assert 'locus_tokens_total{direction="input",model="gamma-70b"} 2000.0' in metrics
    assert 'locus_tokens_total{direction="output",model="gamma-70b"} 1000.0' in metrics
    assert 'locus_cost_usd_total{model="gamma-70b"} 0.014' in metrics  # 2 x (1000 x 2 + 500 x 10) / 1e6


def test_serve_single_answers_locus_with_that_model_and_the_router_by_default(built, tmp_path):
    fake = FakeUpstreams()
    with client_for(built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake),
                    serve="single:delta-1b") as client:
        r = client.post("/v1/chat/completions", json=chat())
        pinned = client.post("/v1/chat/completions", json=chat(model="gamma-70b"))
        health = client.get("/healthz").json()
    assert r.headers["x-locus-model"] == "delta-1b" and pinned.headers["x-locus-model"] == "gamma-70b"
    assert health["serves"] == "single:delta-1b"
    with pytest.raises(ValueError, match="--serve 'single:nope': 'nope' is not a routable pool model"):
        create_app(ServeConfig(home=str(built["home"].path), serve="single:nope"))
    with pytest.raises(ValueError, match="expected 'auto', 'router' or 'single:<pool model>'"):
        create_app(ServeConfig(home=str(built["home"].path), serve="best"))


def test_the_startup_summary_names_the_pool_what_it_serves_the_upstreams_and_the_policy(built, tmp_path):
    path = tmp_path / "models.json"
    path.write_text(json.dumps(upstream_config(gateway={"allowed_fails": 2})))
    router = create_app(ServeConfig(home=str(built["home"].path), models_config=str(path))).state.gateway
    text = router.summary()
    assert f"pool: {len(NAMES)} models ({len(NAMES)} routable), checkpoint {built['checkpoint_id']}" in text
    assert 'serves: the router (model "locus": the best of 5 routable models at quality weight 1' in text
    assert f"upstreams: {len(NAMES)}: alpha-7b -> http://{host('alpha-7b')}/v1 (upstream-alpha-7b)" in text
    assert "an upstream failing 2 times in 60 s is skipped for 30 s" in text
    single = create_app(ServeConfig(home=str(built["home"].path), serve="single:beta-13b", dry_run=True)).state.gateway
    assert "serves: the single model beta-13b" in single.summary() and "DRY RUN" in single.summary()
    assert "at quality weight 1, guard 0.02 toward" in text  # the default policy
    pool = built["home"].read_pool()
    top = pool["model"].iloc[int(np.argmax([p[0] for p in pool["group_profile"]]))]  # one group: its accuracy
    guarded = create_app(ServeConfig(home=str(built["home"].path), policy=RoutingPolicy(guard_margin=0.3))).state.gateway
    assert f"at quality weight 1, guard 0.3 toward {top})" in guarded.summary()


def write_verdict(home, checkpoint_id: str, pays: bool, best: str = "beta-13b") -> None:
    verdict = {"pays": pays, "best_single": best, "delta": 1.5 if pays else -0.6, "lo": 0.4 if pays else -2.0,
               "hi": 2.6 if pays else 0.6, "cost_share": None}
    path = home.routing_evaluation_path
    path.write_text(json.dumps({"settings": {"checkpoint_id": checkpoint_id}, "verdict": verdict}))


@pytest.mark.parametrize("pays", [True, False])
def test_auto_serves_the_best_single_model_where_the_verdict_says_routing_does_not_pay(built, tmp_path, pays):
    home = built["home"]  # this test's own home
    write_verdict(home, built["checkpoint_id"], pays)
    auto = create_app(ServeConfig(home=str(home.path), dry_run=True)).state.gateway
    forced = create_app(ServeConfig(home=str(home.path), dry_run=True, serve="router")).state.gateway
    if pays:
        assert auto.single_model is None and "routing pays: +1.5 [+0.4, +2.6]" in auto.summary()
    else:
        assert auto.single_model == "beta-13b"
        assert ("serves: the single model beta-13b" in auto.summary() and "routing does not pay on this data: call "
                "beta-13b (LOCUS -0.6 [-2.0, +0.6]) (--serve router to route anyway)" in auto.summary())
    assert forced.single_model is None  # the operator's override
    write_verdict(home, "another-checkpoint", False)  # a verdict on another checkpoint decides nothing
    stale = create_app(ServeConfig(home=str(home.path), dry_run=True)).state.gateway
    assert stale.single_model is None and "no routing evaluation of this pool" in stale.summary()
