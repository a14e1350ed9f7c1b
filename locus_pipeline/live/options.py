"""The options of a live onboarding, declared once (:class:`OnboardConfig`): ``locus onboard``'s flags
(:func:`add_options`) and the Dagster job's run config (locus_pipeline.defs.live) are made from its fields.

No torch here: the code location imports this module (the library's question choices are read when a config is
checked, not when it is declared)."""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, dataclass, field, fields

from locus_model.pool_schema import MIN_ROUTABLE_EVALUATIONS, RECOMMENDED_EVALUATIONS, accuracy_margin


class OnboardError(RuntimeError):
    """A live onboarding that cannot go on; the message says why and how to fix it. The pool is unchanged."""


def _option(help: str, default=MISSING) -> typing.Any:
    return field(default=default, metadata={"help": help}) if default is not MISSING else field(metadata={"help": help})


@dataclass(frozen=True)
class OnboardConfig:
    """What a live onboarding asks, how, and when it stops; checked once, when made."""

    endpoint: str = _option("the models config entry to onboard (its name becomes the pool model's name)")
    budget: int = _option(
        f"answers to collect (default 64: a first look, its accuracy known to about "
        f"+-{accuracy_margin(64):.0f} points; {RECOMMENDED_EVALUATIONS}, the recommended count, "
        f"+-{accuracy_margin(RECOMMENDED_EVALUATIONS):.0f}; fewer than {MIN_ROUTABLE_EVALUATIONS} "
        "are not routed to: docs/onboarding.md)",
        64,
    )
    max_cost: float | None = _option(
        "USD: no call is started that could take the spend above it (default: no limit)", None
    )
    concurrency: int = _option("calls in flight at once; also the questions of one round (default 8)", 8)
    retries: int = _option("retries of a failed call (timeout, connection, 5xx / 429), with backoff (default 2)", 2)
    choice: str | None = _option(
        "how each round's questions are chosen: random or adaptive (where the estimates' "
        "intervals narrow most; default: the library's, random: adaptive did not beat it, "
        "bench/README.md 'Adaptive onboarding')",
        None,
    )
    until: float | None = _option(
        "points: stop once every benchmark's 90% interval is narrower (default: at the budget)", None
    )

    def __post_init__(self) -> None:
        # why: the library's choices (locus_model.estimates.questions loads torch) are read when a config is checked
        from locus_model.estimates.questions import CHOICES, DEFAULT_CHOICE

        if self.budget < 1 or self.concurrency < 1 or self.retries < 0:
            raise OnboardError("budget and concurrency must be >= 1 and retries >= 0")
        if self.max_cost is not None and not self.max_cost >= 0:
            raise OnboardError(f"max_cost {self.max_cost!r} must be a number >= 0 (USD)")
        if self.choice is None:
            object.__setattr__(self, "choice", DEFAULT_CHOICE)
        if self.choice not in CHOICES:
            raise OnboardError(f"choice {self.choice!r}: use one of {', '.join(CHOICES)}")
        if self.until is not None and not self.until > 0:
            raise OnboardError(f"until {self.until!r} must be a width in points > 0 (e.g. 10)")


def options() -> list[tuple[str, type, object, str]]:
    """(name, type, default or MISSING, help) of every option, in declaration order; ``float | None`` reads as
    float with the default None."""
    hints = typing.get_type_hints(OnboardConfig)
    out = []
    for f in fields(OnboardConfig):
        kind = next((a for a in typing.get_args(hints[f.name]) if a is not type(None)), hints[f.name])
        out.append((f.name, kind, f.default, f.metadata["help"]))
    return out


def add_options(p: argparse.ArgumentParser) -> None:
    """``--endpoint``, ``--budget``, ...: one flag per option."""
    for name, kind, default, help in options():
        flag = "--" + name.replace("_", "-")
        if default is MISSING:
            p.add_argument(flag, type=kind, required=True, help=help.replace("%", "%%"))
        else:
            p.add_argument(flag, type=kind, default=default, help=help.replace("%", "%%"))


def config_from(values: typing.Mapping[str, typing.Any]) -> OnboardConfig:
    """The OnboardConfig of parsed flags or a run config (other keys ignored; the values as argparse or the run
    config typed them)."""
    return OnboardConfig(**{name: values[name] for name, *_ in options() if name in values})


__all__ = ["OnboardConfig", "OnboardError", "add_options", "config_from", "options"]
