"""The models config: errors that name the problem, a valid file read."""

from __future__ import annotations


import pytest

from locus_pipeline.serve import ConfigError, ServeConfig, read_models_config


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


def test_the_default_body_limit_is_one_mib():
    assert ServeConfig().max_body_bytes == 1 << 20
