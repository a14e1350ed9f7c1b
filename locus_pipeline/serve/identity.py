"""Who a request comes from, by its credential (never by a header it declares), and how many outcomes it may post.

The models config names the clients and their bearer tokens (``clients: {team-a: {token_env: TEAM_A_TOKEN,
grader: false}}``, serve/config.py); ``locus serve --token`` is one more client, the operator's (``operator``, a
grader). A request's client is the configured name of the credential it presents (each token compared in constant
time, every one of them, so the time taken says nothing of which came close). Without any credential the server is
one trust domain, as ``dagster dev`` and ``mlflow ui`` are: every request is the operator's, and the start-up summary
says that anyone who can reach the port can steer the router.

``x-locus-client`` is only a label inside one credential's domain (an application's user or tenant): kept as a keyed
hash (HMAC-SHA256 with the home's secret, never the raw value) and never a source of influence: a new label is the
same client. A grader (``grader: true``, the operator's judge) steers every client's routing; another client's
outcomes steer others' only as far as the clients agree (the learner's rule, docs/serve.md).

Outcomes are rate-limited per client by a token bucket (:class:`OutcomeLimiter`): a request is charged before its
body is parsed, the rest of its outcomes once counted; past the bucket it is answered 429 with Retry-After.
"""

from __future__ import annotations

import hmac
import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from locus_pipeline.storage.traffic import OPERATOR, keyed_hash

LABEL_HEADER = "x-locus-client"
MAX_LABEL_CHARS = 128
OUTCOMES_PER_S = 100.0  # a client's sustained rate of graded outcomes (the models config may set its own)
OUTCOMES_BURST = 1000.0  # and the most at once: one full POST /v1/outcomes


@dataclass(frozen=True)
class ClientSettings:
    """One entry of the models config's ``clients:`` section."""

    token_env: str  # the environment variable holding the client's bearer token
    grader: bool = False  # the operator's judge: its outcomes steer every client's routing
    outcomes_per_s: float = OUTCOMES_PER_S
    outcomes_burst: float = OUTCOMES_BURST


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the credential's client, its label (pseudonymised; "" without one), whether it grades for
    everyone."""

    client: str
    label: str
    grader: bool

    @property
    def key(self) -> str:
        """What the decision log records as the request's client: the client, and its label's pseudonym."""
        return f"{self.client}:{self.label}" if self.label else self.client


class IdentityError(ValueError):
    """A clients section that cannot be used (a token variable unset or empty, two clients with one token)."""


class Identity:
    """The gateway's credentials: token -> client. ``secret``: the home's key of pseudonyms
    (``LocusHome.traffic_secret``)."""

    def __init__(
        self,
        *,
        token: str | None,
        clients: Mapping[str, ClientSettings],
        secret: bytes,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if environ is None else environ
        self.secret = secret
        self.settings: dict[str, ClientSettings] = {}
        self._tokens: list[tuple[bytes, str]] = []
        if token is not None:
            self._tokens.append((f"Bearer {token}".encode(), OPERATOR))
            self.settings[OPERATOR] = ClientSettings(token_env="--token", grader=True)
        for name, entry in clients.items():
            if name == OPERATOR and token is not None:
                raise IdentityError(f"clients.{OPERATOR}: the name is --token's client; give this client another name")
            value = environ.get(entry.token_env, "")
            if not value.strip():
                raise IdentityError(
                    f"clients.{name}: the environment variable {entry.token_env} is unset or empty. How to fix: "
                    f"export {entry.token_env}=<the client's token> before locus serve"
                )
            given = f"Bearer {value}".encode()
            clash = next((other for tok, other in self._tokens if hmac.compare_digest(tok, given)), None)
            if clash is not None:
                raise IdentityError(f"clients.{name} and {clash} have the same token: give each client its own")
            self._tokens.append((given, str(name)))
            self.settings[str(name)] = entry
        if not self._tokens:
            self.settings[OPERATOR] = ClientSettings(token_env="", grader=True)

    @property
    def open(self) -> bool:
        """No credential configured: one trust domain, every request the operator's."""
        return not self._tokens

    def describe(self) -> str:
        """The start-up summary's line on who may steer the router."""
        if self.open:
            return (
                "trust: no credential configured (--token, or clients in the models config): one trust domain; "
                "anyone who can reach this port can grade answers and so steer the router"
            )
        graders = sorted(n for n, s in self.settings.items() if s.grader)
        return (
            f"trust: {len(self.settings)} client(s) by credential ({', '.join(sorted(self.settings))}); graders for "
            f"everyone: {', '.join(graders) or 'none'}; the others' outcomes count for everyone only as far as the "
            "clients agree"
        )

    def client_of(self, headers: Mapping[str, str]) -> str | None:
        """The configured client whose token the request presents, None when it presents none of them."""
        if self.open:
            return OPERATOR
        given = headers.get("authorization", "").encode()
        found = None
        for token, name in self._tokens:  # every token compared, whatever matched before
            if hmac.compare_digest(token, given):
                found = name
        return found

    def caller_of(self, headers: Mapping[str, str]) -> Caller | None:
        """The request's :class:`Caller`, None when credentials are configured and it presents none of them."""
        client = self.client_of(headers)
        if client is None:
            return None
        raw = headers.get(LABEL_HEADER, "").strip()[:MAX_LABEL_CHARS]
        return Caller(client, self.pseudonym(raw) if raw else "", self.settings[client].grader)

    def pseudonym(self, value: str) -> str:
        """A keyed hash of ``value`` (a label, a query): equal values match, a guessed one cannot be checked without
        the home's secret."""
        return keyed_hash(self.secret, value)[:24]


class OutcomeLimiter:
    """Per client a token bucket of outcomes: ``outcomes_per_s`` refill, ``outcomes_burst`` capacity. The clients are
    the configured ones, so its memory is bounded by the config."""

    def __init__(self, identity: Identity, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.identity, self.clock = identity, clock
        self._level: dict[str, tuple[float, float]] = {}  # client -> (tokens, when)

    def take(self, client: str, n: float = 1.0) -> float:
        """Charge ``n`` outcomes to ``client``: 0.0 when allowed, else the seconds after which they would be (nothing
        is charged then)."""
        settings = self.identity.settings.get(client) or ClientSettings(token_env="")
        rate, burst = settings.outcomes_per_s, settings.outcomes_burst
        now = self.clock()
        level, when = self._level.get(client, (burst, now))
        level = min(burst, level + (now - when) * rate)
        if level >= n:
            self._level[client] = (level - n, now)
            return 0.0
        self._level[client] = (level, now)
        return (min(n, burst) - level) / rate if rate > 0 else math.inf


__all__ = [
    "Caller",
    "ClientSettings",
    "Identity",
    "IdentityError",
    "LABEL_HEADER",
    "OPERATOR",
    "OutcomeLimiter",
]
