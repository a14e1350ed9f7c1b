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
from tests.locus_pipeline.serve.helpers import NAMES, QUERY, FakeUpstreams, chat, client_for, host, upstream_config


def usage_upstream(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
    if body.get("stream"):
        chunks = [
            {"model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]},
            {"model": "m", "choices": [], "usage": usage},
        ]
        text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, content=text.encode(), headers={"content-type": "text/event-stream"})
    if body["messages"][-1]["content"] == "lie":  # negative counts: not counted
        usage = {"prompt_tokens": -5, "completion_tokens": 10**30}
    return httpx.Response(
        200, json={"model": "m", "choices": [{"index": 0, "message": {"content": "hi"}}], "usage": usage}
    )


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
    with client_for(
        built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake), serve="single:delta-1b"
    ) as client:
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
    assert (
        "encoder hashing-256 (hashing, 1 thread(s), as requested" in text
    )  # ServeConfig's 1; locus serve's default 0 chooses
    free = create_app(ServeConfig(home=str(built["home"].path), threads=0)).state.gateway
    assert free.threads.threads >= 1 and "thread(s), the cores free (" in free.summary()
    assert "at quality weight 1, guard 0.02 toward" in text  # the default policy
    pool = built["home"].read_pool()
    top = pool["model"].iloc[int(np.argmax([p[0] for p in pool["group_profile"]]))]  # one group: its accuracy
    guarded = create_app(
        ServeConfig(home=str(built["home"].path), policy=RoutingPolicy(guard_margin=0.3))
    ).state.gateway
    assert f"at quality weight 1, guard 0.3 toward {top})" in guarded.summary()


def write_verdict(home, checkpoint_id: str, pays: bool, best: str = "beta-13b") -> None:
    verdict = {
        "pays": pays,
        "best_single": best,
        "delta": 1.5 if pays else -0.6,
        "lo": 0.4 if pays else -2.0,
        "hi": 2.6 if pays else 0.6,
        "cost_share": None,
    }
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
        assert (
            "serves: the single model beta-13b" in auto.summary()
            and "routing does not pay on this data: call "
            "beta-13b (LOCUS -0.6 [-2.0, +0.6]) (--serve router to route anyway)"
            in auto.summary()
        )
    assert forced.single_model is None  # the operator's override
    write_verdict(home, "another-checkpoint", False)  # a verdict on another checkpoint decides nothing
    stale = create_app(ServeConfig(home=str(home.path), dry_run=True)).state.gateway
    assert stale.single_model is None and "no routing evaluation of this pool" in stale.summary()


PRICES = {"alpha-7b": 0.2, "beta-13b": 0.5, "gamma-70b": 4.0, "delta-1b": 0.05, "org/epsilon 3b": 0.1}  # USD / Mtok


def priced_config() -> dict:
    models = upstream_config()
    for name, price in PRICES.items():
        models["models"][name].update(price_input_per_mtok=price, price_output_per_mtok=price)
    return models


def route_body(**fields) -> dict:
    return {"query": QUERY, **fields}


@pytest.mark.parametrize(
    "request_fields, serves",
    [
        ({}, "single"),  # nothing asked: the single model
        ({"candidates": ["gamma-70b", "delta-1b"]}, "single"),  # allowed: it answers
        ({"candidates": ["alpha-7b", "delta-1b"]}, "router"),  # not a candidate: the router among the candidates
        ({"quality_weight": 0.5}, "router"),  # the request weighs cost
        ({"quality_weight": 1.0}, "single"),
        ({"max_cost": 1e-4}, "router"),  # gamma-70b's ~264 tokens cost ~1e-3 USD at 4 USD / Mtok
        ({"max_params": 20}, "router"),  # 70 billion parameters
    ],
)
def test_single_model_mode_honours_the_requests_candidates_caps_and_weight_and_route_says_what_chat_does(
    built, tmp_path, request_fields, serves
):
    fake = FakeUpstreams()
    models = priced_config()
    for name in NAMES:
        models["models"][name]["params_b"] = float(name.split("-")[-1].rstrip("b").split(" ")[-1])
    with client_for(
        built, tmp_path, models=models, transport=httpx.MockTransport(fake), serve="single:gamma-70b"
    ) as client:
        routed = client.post("/route", json=route_body(**request_fields))
        weight = request_fields.get("quality_weight")
        extra = {k: v for k, v in request_fields.items() if k != "quality_weight"}
        body = chat(model="locus" if weight is None else f"locus:{weight:g}", **({"locus": {**extra, "explain": True}}))
        answered = client.post("/v1/chat/completions", json=body)
    assert routed.status_code == 200 and answered.status_code == 200, (routed.text, answered.text)
    decision, explained = routed.json(), answered.json()["locus"]
    assert decision["serves"]["by"] == serves == answered.headers["x-locus-serves"] == explained["serves"]["by"]
    assert answered.headers["x-locus-chosen"] == decision["chosen"] == explained["chosen"]  # /route == chat
    assert decision["fallbacks"] == explained["fallbacks"]
    allowed = set(request_fields.get("candidates", NAMES))
    if serves == "single":
        assert decision["chosen"] == "gamma-70b"
    else:
        assert decision["chosen"] != "gamma-70b" and "the single model gamma-70b" in decision["serves"]["why"]
        assert "gamma-70b" not in decision["fallbacks"]  # outside the candidates or the caps
    assert {decision["chosen"], *decision["fallbacks"]} <= allowed
    assert explained["candidates"] == len(allowed)


def test_in_single_model_mode_a_failing_upstream_falls_back_only_within_the_requests_candidates(built, tmp_path):
    fake = FakeUpstreams(failing={host(n) for n in NAMES})
    candidates = ["alpha-7b", "delta-1b"]
    with client_for(
        built, tmp_path, models=upstream_config(), transport=httpx.MockTransport(fake), serve="single:gamma-70b"
    ) as client:
        r = client.post("/v1/chat/completions", json=chat(locus={"candidates": candidates}))
        single = client.post("/v1/chat/completions", json=chat(locus={"candidates": ["gamma-70b", "beta-13b"]}))
        outside = client.post(
            "/v1/chat/completions", json=chat(locus={"candidates": candidates}, fallbacks=["alpha-7b", "beta-13b"])
        )
        pinned = client.post(
            "/v1/chat/completions", json=chat(model="beta-13b", fallbacks=True, locus={"candidates": candidates})
        )
    asked = [h for h, _, _ in fake.seen]
    assert r.status_code == 502 and sorted(asked[:2]) == sorted(host(n) for n in candidates) and len(asked) >= 5
    assert single.status_code == 502 and single.headers.get("x-locus-chosen") is None
    assert set(asked[2:4]) == {host("gamma-70b"), host("beta-13b")}  # the single model first, then the other
    assert asked[2] == host("gamma-70b")
    assert outside.status_code == 400 and "not among the request's candidates" in outside.json()["error"]["message"]
    assert pinned.status_code == 502 and asked[4] == host("beta-13b")  # the pinned model answers (and fails) first,
    assert set(asked[5:]) == set(map(host, candidates))  # then its fallbacks: the request's candidates only


def test_a_pinned_model_outside_the_requests_caps_is_refused_saying_which_cap(built, tmp_path):
    with client_for(built, tmp_path, models=priced_config(), dry_run=True) as client:
        r = client.post("/v1/chat/completions", json=chat(model="gamma-70b", locus={"max_cost": 1e-4}))
    assert r.status_code == 400 and r.json()["error"]["code"] == "no_candidate_within_cost"
    assert "the pinned model gamma-70b is outside the request's caps (it costs more than max_cost=0.0001)" in r.text


def test_the_summary_and_healthz_say_the_guard_kept_every_query_and_where_routing_would_pay_on_cost(built, tmp_path):
    """The demo's case: LOCUS +0.0 [+0.0, +0.0] because the guard keeps every query on the best single model; the
    routing evaluation's frontier says where cost-aware routing would pay."""
    home = built["home"]
    verdict = {
        "pays": False,
        "best_single": "beta-13b",
        "delta": 0.0,
        "lo": 0.0,
        "hi": 0.0,
        "cost_share": 1.0,
        "cost_note": None,
        "kept_on_best_single": 1.0,
        "cheaper": {
            "reference": "beta-13b",
            "locus": {"at_best_single": None, "at_95": 0.6},
            "at_best_single": {"router": "irt", "cost_share": 0.86, "ci_low": 0.6, "ci_high": 1.0},
            "at_95": {"router": "locus", "cost_share": 0.6, "ci_low": 0.4, "ci_high": 0.8},
        },
    }
    home.routing_evaluation_path.write_text(
        json.dumps({"settings": {"checkpoint_id": built["checkpoint_id"]}, "verdict": verdict})
    )
    with client_for(built, tmp_path, dry_run=True) as client:
        health = client.get("/healthz").json()
        summary = client.app.state.gateway.summary()
    kept = "on this pool the guard keeps every test query on beta-13b: no other model is clearly better anywhere"
    assert kept in summary and kept in health["serves_because"] and health["serves"] == "single:beta-13b"
    by_cost = (
        'requests with model "locus:<w>", w < 1, route by cost: in the routing evaluation LOCUS reached 95% of '
        "beta-13b's accuracy at 60% of its cost (its full accuracy not for less) (every router: IRT reaches beta-13b's "
        "accuracy at 86% of its cost (95% CI 60-100%); 95% of "
        "it: LOCUS at 60% (95% CI 40-80%))"
    )
    assert f"by cost: {by_cost}" in summary and health["by_cost"] == by_cost and health["verdict"] == verdict
    home.routing_evaluation_path.unlink()
    with client_for(built, tmp_path, dry_run=True) as client:
        assert (
            "no routing evaluation of this checkpoint says what that saves" in client.get("/healthz").json()["by_cost"]
        )
