"""POST /route: the decision (ranking, costs, caps, fallbacks), bad requests, the token, metrics, startup."""

from __future__ import annotations

import json

import pytest

from tests.locus_pipeline.serve.helpers import NAMES, QUERY, client_for, expected_probs, nearest


def test_route_ranks_the_pool_by_p_correct_with_nearest_neighbour_fallbacks(built, tmp_path):
    with client_for(built, tmp_path) as client:
        r = client.post("/route", json={"query": QUERY})
    assert r.status_code == 200, r.text
    body = r.json()
    probs = expected_probs(built, QUERY)
    ranking = body["ranking"]
    assert [x["model"] for x in ranking] == sorted(probs, key=lambda n: -probs[n])  # quality_weight 1: by P(correct)
    for x in ranking:
        assert x["p_correct"] == pytest.approx(probs[x["model"]], abs=1e-6) and x["score"] == pytest.approx(
            x["p_correct"], abs=1e-6
        )
    assert body["chosen"] == ranking[0]["model"]
    near = nearest(built, body["chosen"], list(built["pool"]["model"]))[:3]  # the three nearest, in ranking order
    assert body["fallbacks"] == [x["model"] for x in ranking if x["model"] in near]
    assert body["checkpoint_id"] == built["checkpoint_id"] and body["pool_models"] == len(NAMES)
    # no catalog and no prices: the sizes in the names ("alpha-7b") are the cost proxy, and the note says so
    assert body["cost_basis"] == "params_b" and "read from the name" in body["cost_note"]
    assert body["elapsed_ms"] >= 0 and body["lambda"] == 0.0


def test_the_ranking_lists_the_best_ranking_size_models_and_counts_them_all(built, tmp_path):
    with client_for(built, tmp_path, ranking_size=2) as client:
        body = client.post("/route", json={"query": QUERY}).json()
    probs = expected_probs(built, QUERY)
    assert [x["model"] for x in body["ranking"]] == sorted(probs, key=lambda n: -probs[n])[:2]
    assert body["ranked"] == len(NAMES) and body["chosen"] == body["ranking"][0]["model"]


def test_route_trades_quality_for_cost_and_honours_the_cost_cap(built, tmp_path):
    costs = {"alpha-7b": 7, "beta-13b": 13, "gamma-70b": 70, "delta-1b": 1, "org/epsilon 3b": 3}
    models = {"models": {n: {"cost_per_query": c} for n, c in costs.items()}}
    with client_for(built, tmp_path, models=models) as client:
        cheapest = client.post("/route", json={"query": QUERY, "quality_weight": 0}).json()
        capped = client.post("/route", json={"query": QUERY, "max_cost": 10}).json()
        half = client.post(
            "/route", json={"query": QUERY, "quality_weight": 0.5, "candidates": ["gamma-70b", "delta-1b"]}
        ).json()
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


@pytest.mark.parametrize(
    "body, message",
    [
        ({"query": ""}, "query is empty"),
        ({"query": "   "}, "query is empty"),
        ({}, "query: Field required"),
        ({"query": "x", "candidates": ["nope"]}, "unknown candidate model(s) ['nope']"),
        ({"query": "x", "candidates": []}, "candidates is empty"),
        ({"query": "x", "max_cost": -1}, "max_cost=-1.0 must be a number >= 0"),
        ({"query": "x", "quality_weight": 1.5}, "quality_weight=1.5 must be in [0, 1]"),
        ({"query": "x", "quality_weight": -0.1}, "quality_weight=-0.1 must be in [0, 1]"),
        ({"query": "x", "temperature": 1}, "temperature: Extra inputs are not permitted"),
    ],
)
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
    assert r.json()["error"]["code"] == "no_candidate_within_cost"  # by the error's type, not its text


def test_bearer_token_guards_everything_but_healthz(built, tmp_path):
    with client_for(built, tmp_path, token="s3cret") as client:
        assert client.get("/healthz").status_code == 200
        assert client.post("/route", json={"query": QUERY}).status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert (
            client.post("/route", json={"query": QUERY}, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        )


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


def test_healthz_without_the_token_names_no_model(built, tmp_path):
    models = {
        "models": {"not-in-pool-model": {"base_url": "http://x.test/v1"}, "alpha-7b": {"base_url": "http://a.test/v1"}}
    }
    with client_for(built, tmp_path, models=models, token="s3cret") as client:
        anonymous = client.get("/healthz").json()
        with_token = client.get("/healthz", headers={"Authorization": "Bearer s3cret"}).json()
    assert "not-in-pool-model" not in json.dumps(anonymous) and anonymous["status"] == "ok"
    assert "checkpoint_id" in with_token and "checkpoint_id" not in anonymous  # the token holder sees the pool
    with client_for(built, tmp_path, models=models, token="s3cret", learn="off") as client:
        frozen = client.get("/healthz", headers={"Authorization": "Bearer s3cret"}).json()
    assert frozen["configured_not_in_pool"] == [
        "not-in-pool-model"
    ]  # learning off: an upstream with no row is not served


def test_healthz_without_the_token_says_only_ok_and_docs_show_no_pool(built, tmp_path):
    """Without the token /healthz is a liveness answer only (no checkpoint, encoder, counts or reload error);
    /docs and /openapi.json stay open: they describe the API, not the pool (README, serve section)."""
    with client_for(built, tmp_path, token="s3cret") as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/healthz", headers={"Authorization": "Bearer wrong"}).json() == {"status": "ok"}
        full = client.get("/healthz", headers={"Authorization": "Bearer s3cret"}).json()
        spec = client.get("/openapi.json")
        assert client.get("/docs").status_code == 200
    assert {"checkpoint_id", "encoder", "pool_models", "last_reload_error"} <= set(full)
    assert spec.status_code == 200 and not any(name in spec.text for name in NAMES) and "s3cret" not in spec.text


def test_wrong_tokens_are_logged_and_limited_per_client_but_the_right_one_passes(built, tmp_path, caplog):
    with client_for(built, tmp_path, token="s3cret") as client:
        codes = [client.get("/v1/models", headers={"Authorization": f"Bearer guess{i}"}).status_code for i in range(12)]
        right = client.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code
    assert codes == [401] * 10 + [429] * 2 and right == 200
    assert "wrong or missing bearer token from testclient on /v1/models (1 in the last 60 s)" in caplog.text
    assert "more than 10 wrong bearer tokens from testclient" in caplog.text
    assert caplog.text.count("wrong or missing bearer token from") == 10  # then one line, not one per request


def test_the_wrong_token_limit_ends_with_its_window():
    from locus_pipeline.serve.http import WrongTokenLimiter

    now = [0.0]
    limiter = WrongTokenLimiter(limit=2, window_s=10, clock=lambda: now[0], max_clients=2)
    assert [limiter.refuse("a", "/route").status for _ in range(3)] == [401, 401, 429]
    assert limiter.refuse("b", "/route").status == 401  # per client
    now[0] = 10.5
    assert limiter.refuse("a", "/route").status == 401
    limiter.refuse("c", "/route")  # a third client: the oldest windows are forgotten, memory stays bounded
    assert len(limiter.failures) <= 2
