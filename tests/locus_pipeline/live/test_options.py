"""A live onboarding's options are declared once (locus_pipeline/live/options.py): `locus onboard`'s flags and the
Dagster job's run config are made from OnboardConfig, with the same names, defaults and descriptions."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields

import pytest

from locus_model.estimates.questions import DEFAULT_CHOICE
from locus_pipeline.defs.live import LiveOnboardingConfig
from locus_pipeline.live.options import OnboardConfig, OnboardError, add_options, config_from


def test_the_flags_and_the_run_config_are_the_config_s_fields_with_its_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    flags = {a.dest: a for a in parser._actions if a.dest != "help"}
    declared = {f.name: f for f in fields(OnboardConfig)}
    assert list(flags) == list(declared)
    run_config = LiveOnboardingConfig.model_fields
    assert set(run_config) == set(declared) | {"models_config"}
    for name, f in declared.items():
        if f.default is MISSING:
            assert flags[name].required and run_config[name].is_required()
        else:
            assert flags[name].default == f.default == run_config[name].default  # None stays None (no 0, no "random")
        assert run_config[name].description == f.metadata["help"]


def test_parsed_flags_and_a_run_config_make_the_same_config() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    args = parser.parse_args(["--endpoint", "my-copy", "--budget", "24", "--until", "10"])
    from_flags = config_from(vars(args))
    from_job = config_from(
        LiveOnboardingConfig(endpoint="my-copy", models_config="m.yaml", budget=24, until=10.0).model_dump()
    )
    assert from_flags == from_job == OnboardConfig(endpoint="my-copy", budget=24, until=10.0)
    assert from_flags.choice == DEFAULT_CHOICE and from_flags.max_cost is None  # the library's default choice


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"budget": 0}, "budget"),
        ({"choice": "greedy"}, "choice 'greedy'"),
        ({"until": -1.0}, "until"),
        ({"max_cost": -0.5}, "max_cost"),
    ],
)
def test_a_bad_option_is_refused_once_whoever_gives_it(bad, message) -> None:
    with pytest.raises(OnboardError, match=message):
        OnboardConfig(endpoint="x", **bad)
