"""The models config: errors that name the problem, a valid file read; checked against the pool at start-up (no
silent dry run)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from locus_pipeline.cli import main
from locus_pipeline.serve import ConfigError, ServeConfig, create_app, read_models_config
from tests.locus_pipeline.serve.helpers import NAMES, QUERY, chat, client_for


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
    ok.write_text(
        "defaults: {timeout_s: 5}\nmodels:\n  a: {base_url: 'http://h/v1/', api_key_env: K, price_input_per_mtok: 1}\n"
    )
    config = read_models_config(ok)
    assert config.upstreams["a"].base_url == "http://h/v1" and config.upstreams["a"].model == "a"
    assert config.upstreams["a"].timeout_s == 5 and config.costs["a"] == {"price_input_per_mtok": 1.0}


# ------------------------------------------------------------------------------------------------ OpenAI-compatible


def test_the_default_body_limit_is_one_mib():
    assert ServeConfig().max_body_bytes == 1 << 20


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--fallbacks", "-1"),
        ("--poll-seconds", "nan"),
        ("--batch-wait-ms", "nan"),
        ("--poll-seconds", "inf"),
        ("--poll-seconds", "0"),
        ("--batch-wait-ms", "-1"),
        ("--threads", "-2"),
        ("--ranking-size", "-1"),
        ("--max-body-bytes", "-5"),
        ("--port", "70000"),
    ],
)
def test_locus_serve_refuses_a_number_out_of_range_naming_the_option(flag, value, tmp_path, capsys):
    from locus_pipeline.cli import main

    assert main(["serve", "--home", str(tmp_path / "no-home"), flag, value]) == 2  # before any pool is read
    err = capsys.readouterr().err
    assert err.startswith("locus serve: error: ") and flag in err and "must be" in err


def test_every_number_of_the_serve_config_is_checked_where_it_is_made():
    with pytest.raises(ValueError, match=r"--fallbacks -1: must be an integer from 0 to 1000"):
        ServeConfig(n_fallbacks=-1)
    with pytest.raises(ValueError, match=r"--poll-seconds nan: must be a finite number"):
        ServeConfig(poll_seconds=float("nan"))
    with pytest.raises(ValueError, match=r"--threads 1.5"):
        ServeConfig(threads=1.5)
    assert ServeConfig(n_fallbacks=0, batch_wait_ms=0).n_fallbacks == 0


# ------------------------------------------------------------------------------------------------ against the pool


def readme_models_yaml() -> str:
    """The models.yaml example of README.md ("Route live traffic"), as a user copies it."""
    readme = (Path(__file__).parents[3] / "README.md").read_text(encoding="utf-8")
    block = readme.split("# models.yaml:", 1)[1].split("```", 1)[0]
    return "# models.yaml:" + block


def test_a_models_config_naming_no_pool_model_refuses_to_start_unless_dry_run(built, tmp_path, capsys):
    path = tmp_path / "models.yaml"
    path.write_text(readme_models_yaml())  # its two models are not in the tiny pool
    with pytest.raises(ConfigError, match="none of its 2 models is in the pool") as err:
        create_app(ServeConfig(home=str(built["home"].path), models_config=str(path)))
    assert "'Qwen2-72B-Instruct'" in str(err.value) and "--dry-run" in str(err.value)
    assert main(["serve", "--home", str(built["home"].path), "--models-config", str(path)]) != 0  # before listening
    assert "none of its 2 models is in the pool" in capsys.readouterr().err
    with TestClient(
        create_app(ServeConfig(home=str(built["home"].path), models_config=str(path), dry_run=True))
    ) as client:
        r = client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 200 and r.headers["x-locus-dry-run"] == "true"


def test_a_partial_match_warns_naming_each_unmatched_entry_and_its_nearest_pool_model(built, tmp_path, caplog):
    models = {
        "models": {
            "alpha-7b": {"base_url": "http://a.test/v1"},
            "gamma-70B": {"base_url": "http://g.test/v1"},
            "zzz": {"cost_per_query": 1},
        }
    }
    with caplog.at_level(logging.WARNING, logger="locus.serve"):
        with client_for(built, tmp_path, models=models) as client:
            assert client.get("/healthz").json()["routable_models"] == 1
    warned = [r.getMessage() for r in caplog.records if "is not in the pool" in r.getMessage()]
    assert len(warned) == 2
    assert (
        "'gamma-70B' (nearest pool model: 'gamma-70b')" in warned[0] and "'zzz' (no pool model is close)" in warned[1]
    )


@pytest.mark.parametrize("models", [None, {"models": {n: {"cost_per_query": 1} for n in NAMES}}])
def test_a_chat_call_without_an_upstream_is_a_503_never_a_200(built, tmp_path, caplog, models):
    with caplog.at_level(logging.WARNING, logger="locus.serve"):
        with client_for(built, tmp_path, models=models) as client:
            decision = client.post("/route", json={"query": QUERY})
            r = client.post("/v1/chat/completions", json=chat())
            s = client.post("/v1/chat/completions", json=chat(stream=True))
    assert decision.status_code == 200  # the decision alone still answers
    assert r.status_code == s.status_code == 503 and r.json()["error"]["code"] == "no_upstream_configured"
    assert (
        repr(decision.json()["chosen"]) in r.json()["error"]["message"]
        and "--models-config" in r.json()["error"]["message"]
    )
    assert any("no pool model has an upstream" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize(
    "router, message",
    [
        ({"pinned_fallbacks": "yes"}, "gateway.pinned_fallbacks='yes' must be true or false"),
        ({"cooldown": 1}, "unknown gateway settings ['cooldown']"),
        ([], "'gateway' must be a mapping"),
    ],
)
def test_the_gateway_section_is_checked(tmp_path, router, message):
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"gateway": router, "models": {}}))
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_models_config(path)


@pytest.mark.parametrize(
    "clients, message",
    [
        ([1], "'clients' must be a mapping"),
        ({"a": "TOKEN"}, "clients.a must be a mapping"),
        ({"a": {}}, "clients.a: token_env must name"),
        ({"a": {"token_env": "X", "grader": "yes"}}, "grader='yes' must be true or false"),
        ({"a": {"token_env": "X", "outcomes_per_s": 0}}, "outcomes_per_s=0 must be a number > 0"),
        ({"a": {"token_env": "X", "token": "inline"}}, "unknown keys ['token']"),
    ],
)
def test_the_clients_section_is_checked(tmp_path, clients, message):
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"clients": clients}))
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_models_config(path)


def test_the_clients_section_is_read_with_its_defaults(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(
        "clients:\n  team-a: {token_env: TEAM_A}\n  judge: {token_env: JUDGE, grader: true, outcomes_per_s: 5}\n"
    )
    clients = read_models_config(path).clients
    assert clients["team-a"].grader is False and clients["team-a"].outcomes_per_s == 100.0
    assert clients["judge"].grader is True and clients["judge"].outcomes_per_s == 5.0


def test_a_client_whose_token_variable_is_unset_stops_the_start_naming_it(built, tmp_path, monkeypatch):
    monkeypatch.delenv("LOCUS_TEST_UNSET", raising=False)
    with pytest.raises(ConfigError, match="LOCUS_TEST_UNSET is unset or empty"):
        client_for(built, tmp_path, models={"clients": {"a": {"token_env": "LOCUS_TEST_UNSET"}}})
