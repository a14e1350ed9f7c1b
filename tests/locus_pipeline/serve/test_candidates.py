"""The candidate set of a request: a size cap (max_params) beside the cost cap, models of unknown cost never charged a
made-up one, and a portfolio of the portfolios asset served as the candidate set (--portfolio)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.routing import RoutingPolicy
from locus_pipeline.serve import ServeConfig, create_app
from locus_pipeline.storage import StorageError
from tests.locus_pipeline.serve.helpers import NAMES, QUERY, chat, client_for, expected_probs, wait_for

SIZES = {"alpha-7b": 7, "beta-13b": 13, "gamma-70b": 70, "delta-1b": 1, "org/epsilon 3b": 3}  # read from the names


def test_a_size_cap_keeps_the_models_of_at_most_that_many_parameters_whatever_the_cost_basis(built, tmp_path):
    prices = {"alpha-7b": 0.5, "beta-13b": 0.1, "gamma-70b": 2.0, "delta-1b": 0.3, "org/epsilon 3b": 0.2}
    models = {"models": {n: {"cost_per_query": c} for n, c in prices.items()}}
    with client_for(built, tmp_path, models=models, dry_run=True) as client:
        capped = client.post("/route", json={"query": QUERY, "max_params": 8, "quality_weight": 0.5}).json()
        both = client.post("/route", json={"query": QUERY, "max_params": 8, "max_cost": 0.25}).json()
        none = client.post("/route", json={"query": QUERY, "max_params": 0.5})
        answer = client.post("/v1/chat/completions", json=chat(locus={"max_params": 2})).json()
    assert capped["cost_basis"] == "usd" and set(capped["over_params"]) == {"beta-13b", "gamma-70b"}
    assert {x["model"] for x in capped["ranking"]} == {"alpha-7b", "delta-1b", "org/epsilon 3b"}
    assert {x["model"]: x["params_b"] for x in capped["ranking"]} == {
        n: SIZES[n] for n in ("alpha-7b", "delta-1b", "org/epsilon 3b")
    }
    probs = expected_probs(built, QUERY)
    score = {x["model"]: x["score"] for x in capped["ranking"]}  # normalised by the dearest kept candidate (0.5)
    assert score["delta-1b"] == pytest.approx(0.5 * probs["delta-1b"] - 0.5 * 0.3 / 0.5, abs=1e-6)
    assert [x["model"] for x in both["ranking"]] == ["org/epsilon 3b"]  # a model over both caps counts as over cost
    assert set(both["over_cost"]) == {"alpha-7b", "delta-1b", "gamma-70b"} and both["over_params"] == ["beta-13b"]
    assert none.status_code == 400 and none.json()["error"]["code"] == "no_candidate_within_cost"
    assert "max_params=0.5" in none.json()["error"]["message"]
    assert answer["model"] == "delta-1b" and answer["locus"]["max_params"] == 2  # the one model of at most 2B


@pytest.mark.parametrize("body", [{"max_params": -1}, {"max_params": "big"}])
def test_a_bad_size_cap_is_a_400(built, tmp_path, body):
    with client_for(built, tmp_path) as client:
        r = client.post("/route", json={"query": QUERY, **body})
    assert r.status_code == 400 and "max_params" in r.json()["error"]["message"]


def test_a_model_of_unknown_cost_is_left_out_of_every_cost_aware_path_and_never_the_maximum(built, tmp_path):
    models = {
        "models": {n: {"cost_per_query": c} for n, c in (("alpha-7b", 0.5), ("delta-1b", 0.1), ("gamma-70b", 2.0))}
    }
    unpriced = {"beta-13b", "org/epsilon 3b"}
    with client_for(built, tmp_path, models=models, dry_run=True) as client:
        weighted = client.post("/route", json={"query": QUERY, "quality_weight": 0.5}).json()
        capped = client.post("/route", json={"query": QUERY, "max_cost": 100}).json()
        plain = client.post("/route", json={"query": QUERY}).json()
        cheapest = client.post("/v1/chat/completions", json=chat(model="locus:0")).json()
        only_unpriced = client.post(
            "/route", json={"query": QUERY, "quality_weight": 0.5, "candidates": sorted(unpriced)}
        )
    for decision in (weighted, capped):
        assert set(decision["unknown_cost"]) == unpriced and not unpriced & {x["model"] for x in decision["ranking"]}
        assert max(x["expected_cost"] for x in decision["ranking"]) == 2.0
    assert "unknown cost" in weighted["cost_note"]
    assert {x["model"] for x in plain["ranking"]} == set(NAMES) and plain["unknown_cost"] == []  # w = 1: they compete
    assert {x["model"]: x["expected_cost"] for x in plain["ranking"]}["beta-13b"] is None  # unknown, not a number
    assert cheapest["model"] == "delta-1b"
    assert only_unpriced.status_code == 400 and only_unpriced.json()["error"]["code"] == "cost_unknown"


def write_portfolios(home, rows: dict[tuple[str, float], list[str]]) -> None:
    """A portfolios table as the asset writes it (method, x, portfolio joined by ", "; other columns left out)."""
    home.write_table(
        "portfolios",
        pd.DataFrame(
            [{"method": m, "x_name": "k", "x": x, "portfolio": ", ".join(members)} for (m, x), members in rows.items()]
        ),
    )


def test_a_portfolio_is_served_as_the_candidate_set(built, tmp_path):
    home = built["home"]
    write_portfolios(
        home,
        {
            ("k_center", 2): ["gamma-70b", "delta-1b"],
            ("k_center", 3): ["gamma-70b", "delta-1b", "beta-13b"],
            ("k_medoids", 2): ["alpha-7b", "beta-13b"],
        },
    )
    with client_for(built, tmp_path, portfolio="k-center-2", poll_seconds=0.05, dry_run=True) as client:
        decision = client.post("/route", json={"query": QUERY}).json()
        inside = client.post("/route", json={"query": QUERY, "candidates": ["delta-1b"]}).json()
        outside = client.post("/route", json={"query": QUERY, "candidates": ["alpha-7b"]})
        pinned = client.post("/v1/chat/completions", json=chat(model="alpha-7b"))
        listed = {m["id"]: m["locus"] for m in client.get("/v1/models").json()["data"]}
        health = client.get("/healthz").json()
        write_portfolios(home, {("k_center", 2): ["alpha-7b", "beta-13b"]})  # the asset refreshed: served again
        wait_for(
            lambda: (
                client.get("/healthz").json()["routable_models"] == 2
                and client.post("/route", json={"query": QUERY}).json()["ranking"][0]["model"]
                in {"alpha-7b", "beta-13b"}
            ),
            "the refreshed portfolio served",
        )
        refreshed = client.post("/route", json={"query": QUERY}).json()
    probs = expected_probs(built, QUERY)
    assert [x["model"] for x in decision["ranking"]] == sorted(["gamma-70b", "delta-1b"], key=lambda n: -probs[n])
    assert (
        decision["portfolio"] == "k-center-2" and decision["candidates"] == 2 and decision["pool_models"] == len(NAMES)
    )
    assert set(decision["fallbacks"]) <= {"gamma-70b", "delta-1b"}
    assert inside["chosen"] == "delta-1b"
    assert outside.status_code == pinned.status_code == 400 and outside.json()["error"]["code"] == "not_in_portfolio"
    assert "k-center-2" in outside.json()["error"]["message"]
    assert {n for n, m in listed.items() if m.get("routable")} == {"gamma-70b", "delta-1b"}
    assert listed["locus"]["portfolio"] == "k-center-2" and health["portfolio"] == "k-center-2"
    assert health["routable_models"] == 2 and health["portfolio_not_in_pool"] == []
    assert {x["model"] for x in refreshed["ranking"]} == {"alpha-7b", "beta-13b"}


def test_an_unknown_portfolio_names_the_available_ones(built, tmp_path):
    home = built["home"]
    config = ServeConfig(home=str(home.path), portfolio="k-center-15")
    with pytest.raises(StorageError, match="materialize the portfolios asset"):
        create_app(config)
    write_portfolios(home, {("k_center", k): NAMES[:k] for k in (1, 2, 3)} | {("coverage_greedy", 80.5): NAMES[:2]})
    with pytest.raises(
        StorageError,
        match=r"'k-center-15' is not in the portfolios table. Available: "
        r"coverage-greedy-80.5; k-center-1 \.\.\. k-center-3 \(3\)",
    ):
        create_app(config)
    from locus_pipeline.cli import main

    assert main(["serve", "--home", str(home.path), "--port", "0", "--portfolio", "k-medoids-4"]) == 2


def test_a_model_with_too_few_evaluations_is_routed_to_only_when_a_request_names_it(built, tmp_path):
    from locus_model.pool import upsert_rows
    from locus_model.pool_schema import MIN_ROUTABLE_EVALUATIONS
    from locus_pipeline.storage import write_parquet_atomic
    from tests.locus_pipeline.serve_home import embed

    home = built["home"]
    tiny = embed(
        built["model"],
        built["checkpoint_id"],
        ["tiny-drop 1b"],
        encoder=built["encoder"],
        source="onboarded",
        seed=5,
        n_queries=9,
        cache_dir=home.encoding_cache(built["encoder"]),
    )
    assert tiny["n_evaluations"].iloc[0] == 9 < MIN_ROUTABLE_EVALUATIONS and not tiny["routable"].iloc[0]
    write_parquet_atomic(upsert_rows(home.read_pool(), tiny), home.pool_path)
    with client_for(built, tmp_path, learn="off") as client:  # frozen: only when named
        default = client.post("/route", json={"query": QUERY}).json()
        named = client.post("/route", json={"query": QUERY, "candidates": ["tiny-drop 1b", "alpha-7b"]}).json()
        health = client.get("/healthz").json()
        listed = {m["id"]: m["locus"] for m in client.get("/v1/models").json()["data"]}
    assert {x["model"] for x in default["ranking"]} == set(NAMES) and default["pool_models"] == len(NAMES) + 1
    assert {x["model"] for x in named["ranking"]} == {"tiny-drop 1b", "alpha-7b"}
    assert health["not_routable_by_default"] == ["tiny-drop 1b"] and health["routable_models"] == len(NAMES)
    assert listed["tiny-drop 1b"]["routable"] is False
    with client_for(built, tmp_path) as client:  # learning on: routable, its prior as wide as its 9 answers allow
        default = client.post("/route", json={"query": QUERY}).json()
    assert {x["model"] for x in default["ranking"]} == {*NAMES, "tiny-drop 1b"}


def test_the_guard_keeps_queries_on_the_candidate_of_highest_standing_unless_another_is_clearly_better(built, tmp_path):
    pool = built["home"].read_pool()
    standing = dict(zip(pool["model"], np.stack(pool["group_profile"].to_numpy())[:, 0]))  # one group: its accuracy
    top = max(standing, key=standing.get)
    probs = expected_probs(built, QUERY)
    with client_for(built, tmp_path) as client:  # client_for's policy: no guard
        plain = client.post("/route", json={"query": QUERY}).json()
    with client_for(
        built, tmp_path, policy=RoutingPolicy(guard_margin=0.99)
    ) as client:  # nothing beats the incumbent by 0.99
        guarded = client.post("/route", json={"query": QUERY}).json()
        among = client.post("/route", json={"query": QUERY, "candidates": [n for n in NAMES if n != top]}).json()
    assert plain["guard"]["margin"] == 0.0 and plain["chosen"] == max(probs, key=probs.get)
    assert guarded["guard"] == {"incumbent": top, "margin": 0.99} and guarded["chosen"] == top
    second = max((n for n in NAMES if n != top), key=standing.get)  # the incumbent among the candidates left
    assert among["chosen"] == among["guard"]["incumbent"] == second
    score = {x["model"]: x["score"] for x in guarded["ranking"]}
    assert score[top] == pytest.approx(probs[top], abs=1e-6)
    assert all(score[n] == pytest.approx(probs[n] - 0.99, abs=1e-6) for n in NAMES if n != top)
