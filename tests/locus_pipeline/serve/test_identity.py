"""Who a request comes from (serve/identity.py): the credential's client, a label that is only a pseudonym, the
outcome rate per client."""

from __future__ import annotations

import pytest

from locus_pipeline.serve.identity import ClientSettings, Identity, IdentityError, OutcomeLimiter

SECRET = b"k" * 32
ENV = {"A": "tok-a", "B": "tok-b"}


def identity(**clients) -> Identity:
    return Identity(token="op", clients=clients, secret=SECRET, environ=ENV)


def bearer(token: str, **extra) -> dict:
    return {"authorization": f"Bearer {token}", **extra}


def test_the_client_is_the_credentials_name_and_a_label_only_a_pseudonym():
    ids = identity(a=ClientSettings("A"), b=ClientSettings("B", grader=True))
    assert ids.caller_of(bearer("tok-a")).client == "a" and ids.caller_of(bearer("tok-a")).grader is False
    assert ids.caller_of(bearer("tok-b")).grader is True
    assert ids.caller_of(bearer("op")).client == "operator" and ids.caller_of(bearer("op")).grader is True
    assert ids.caller_of(bearer("tok-c")) is None and ids.caller_of({}) is None
    labelled = ids.caller_of(bearer("tok-a", **{"x-locus-client": "alice@example.com"}))
    assert labelled.client == "a" and "alice" not in labelled.label and len(labelled.label) == 24
    assert labelled.label == ids.caller_of(bearer("tok-a", **{"x-locus-client": "alice@example.com"})).label
    other_home = Identity(token="op", clients={}, secret=b"z" * 32)
    assert other_home.pseudonym("alice@example.com")[:24] != labelled.label  # keyed by the home's secret


def test_without_any_credential_every_request_is_the_operators_and_the_summary_says_so():
    open_ = Identity(token=None, clients={}, secret=SECRET)
    assert open_.open and open_.caller_of({}).client == "operator" and open_.caller_of({}).grader
    assert "anyone who can reach this port" in open_.describe()


@pytest.mark.parametrize(
    "clients, message",
    [
        ({"a": ClientSettings("MISSING")}, "MISSING is unset or empty"),
        ({"a": ClientSettings("A"), "b": ClientSettings("A")}, "the same token"),
        ({"operator": ClientSettings("A")}, "--token's client"),
    ],
)
def test_clients_that_cannot_be_told_apart_stop_the_start(clients, message):
    with pytest.raises(IdentityError, match=message):
        identity(**clients)


def test_the_outcome_bucket_refills_at_its_rate_and_says_when_to_retry():
    now = [0.0]
    ids = identity(a=ClientSettings("A", outcomes_per_s=2.0, outcomes_burst=4.0))
    limiter = OutcomeLimiter(ids, clock=lambda: now[0])
    assert limiter.take("a", 4) == 0.0
    assert limiter.take("a", 1) == pytest.approx(0.5)  # nothing charged: one outcome in half a second
    assert limiter.take("operator", 100) == 0.0  # another client's bucket
    now[0] = 1.0
    assert limiter.take("a", 2) == 0.0 and limiter.take("a", 1) > 0
