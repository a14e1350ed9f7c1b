"""The gateway's configuration: the server's options (:class:`ServeConfig`) and the models config file, per pool model
its upstream and its cost (:func:`read_models_config`)."""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import yaml

from locus_model.routing import COST_KEYS, DEFAULT_OUTPUT_TOKENS, CostError, RoutingPolicy, check_cost
from locus_pipeline.serve.identity import ClientSettings

UPSTREAM_KEYS = ("base_url", "model", "api_key_env", "timeout_s")
MODEL_KEYS = {*UPSTREAM_KEYS, *COST_KEYS}


@dataclass(frozen=True)
class Upstream:
    """An OpenAI-compatible endpoint serving one pool model."""

    base_url: str  # e.g. http://127.0.0.1:8001/v1 (POST {base_url}/chat/completions)
    model: str  # the model name the upstream expects
    api_key_env: str | None = None  # environment variable holding its API key (sent as a bearer token)
    timeout_s: float = 60.0


@dataclass(frozen=True)
class GatewaySettings:
    """The models config's ``gateway:`` section: how the gateway treats failing upstreams."""

    pinned_fallbacks: bool = False  # a request naming a pool model may be answered by its neighbours when it fails
    allowed_fails: int = 3  # failures of one upstream within cooldown_window_s that cool it down (cooldown.py)
    cooldown_window_s: float = 60.0
    cooldown_s: float = 30.0  # how long a cooled-down upstream is skipped before it is tried again
    max_response_bytes: int = 16 << 20  # an upstream answer larger than this is a failure (the next model)
    max_line_bytes: int = 1 << 20  # one line of an event stream
    max_error_bytes: int = 64 << 10  # of an error body: the prefix read, scrubbed and relayed
    max_stream_s: float = 600.0  # a whole event stream (each event must come within the upstream's timeout_s)


GATEWAY_KEYS = tuple(GatewaySettings.__dataclass_fields__)


@dataclass(frozen=True)
class ModelsConfig:
    """The --models-config file: per pool model an upstream and/or its cost."""

    upstreams: Mapping[str, Upstream] = field(default_factory=dict)
    costs: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # model -> COST_KEYS subset
    output_tokens: int = DEFAULT_OUTPUT_TOKENS  # expected answer length when a request has no max_tokens
    gateway: GatewaySettings = GatewaySettings()
    clients: Mapping[str, ClientSettings] = field(default_factory=dict)  # who may call, by bearer token (identity.py)


class ConfigError(ValueError):
    """A models config that cannot be used; the message names the file, the model and the fix."""


def read_models_config(path: str | Path | None) -> ModelsConfig:
    """Read a YAML or JSON models config::

    defaults: {timeout_s: 60, output_tokens: 256}
    gateway:                                     # optional; these are the defaults
      pinned_fallbacks: false                    # model="<pool model>" answered by a neighbour when it fails
      allowed_fails: 3                           # failures of an upstream within cooldown_window_s that
      cooldown_window_s: 60                      #   skip it for cooldown_s, then it is tried again
      cooldown_s: 30
      max_response_bytes: 16777216               # what is read of an upstream's answer at most (16 MiB);
      max_line_bytes: 1048576                    #   of one event-stream line; of an error body (its prefix)
      max_error_bytes: 65536
      max_stream_s: 600                          # a whole stream (each event within the upstream's timeout_s)
    clients:                                     # optional: who may call, by bearer token (serve/identity.py)
      team-a:
        token_env: TEAM_A_TOKEN                  # the environment variable holding its token
        grader: false                            # true: the operator's judge, its outcomes steer every client
        outcomes_per_s: 100                      # its graded outcomes per second (token bucket), and at once
        outcomes_burst: 1000
    models:
      <pool model name>:
        base_url: https://api.example.com/v1     # OpenAI-compatible; omit for a cost-only entry
        model: upstream-model-name               # default: the pool model name
        api_key_env: EXAMPLE_API_KEY             # optional
        price_input_per_mtok: 0.5                # USD per million tokens, or cost_per_query: 0.002,
        price_output_per_mtok: 1.5               # or params_b: 70 (a proxy when no price is known)
    """
    if path is None:
        return ModelsConfig()
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"the models config {path} does not exist. How to fix: pass an existing YAML or JSON file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except Exception as err:  # yaml and json raise their own types; name the file, keep the cause
        raise ConfigError(f"the models config {path} cannot be parsed ({type(err).__name__}: {err})") from err
    data = data or {}
    if not isinstance(data, dict) or not isinstance(data.get("models", {}), dict):
        raise ConfigError(f"{path}: expected a mapping with 'models: {{<model>: {{...}}}}' (and optional 'defaults')")
    gateway = _gateway_settings(path, data.get("gateway"))
    clients = _clients(path, data.get("clients"))
    defaults = dict(data.get("defaults") or {})
    unknown_defaults = set(defaults) - {"timeout_s", "output_tokens"}
    if unknown_defaults:
        raise ConfigError(f"{path}: unknown defaults {sorted(unknown_defaults)}; allowed: timeout_s, output_tokens")
    timeout = float(defaults.get("timeout_s", 60.0))
    upstreams, costs = {}, {}
    for name, entry in (data.get("models") or {}).items():
        entry = dict(entry or {})
        unknown = set(entry) - MODEL_KEYS
        if unknown:
            raise ConfigError(
                f"{path}: model {name!r} has unknown keys {sorted(unknown)}; allowed: {sorted(MODEL_KEYS)}"
            )
        try:
            costs[str(name)] = {k: check_cost(entry[k], f"model {name!r}: {k}") for k in COST_KEYS if k in entry}
        except CostError as err:
            raise ConfigError(f"{path}: {err}") from None
        if "base_url" in entry:
            url = str(entry["base_url"]).rstrip("/")
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"{path}: model {name!r}: base_url {url!r} must start with http:// or https://")
            upstreams[str(name)] = Upstream(
                url, str(entry.get("model") or name), entry.get("api_key_env"), float(entry.get("timeout_s", timeout))
            )
    return ModelsConfig(upstreams, costs, int(defaults.get("output_tokens", DEFAULT_OUTPUT_TOKENS)), gateway, clients)


CLIENT_KEYS = tuple(ClientSettings.__dataclass_fields__)


def _clients(path: Path, section) -> dict[str, ClientSettings]:
    """The ``clients:`` section: per client name its token's environment variable, whether it grades for everyone
    and its outcome rate (the tokens themselves are read when the server starts: identity.Identity)."""
    section = {} if section is None else section
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: 'clients' must be a mapping {{<name>: {{token_env: VAR, grader: false}}}}")
    out = {}
    for name, entry in section.items():
        where = f"{path}: clients.{name}"
        if not isinstance(name, str) or not name.strip() or len(name) > 64:
            raise ConfigError(f"{where}: a client's name is a non-empty string of at most 64 characters")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a mapping with token_env (and optionally grader)")
        unknown = set(entry) - set(CLIENT_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; allowed: {list(CLIENT_KEYS)}")
        env = entry.get("token_env")
        if not isinstance(env, str) or not env.strip():
            raise ConfigError(f"{where}: token_env must name the environment variable holding the client's token")
        grader = entry.get("grader", False)
        if not isinstance(grader, bool):
            raise ConfigError(f"{where}: grader={grader!r} must be true or false")
        rates = {}
        for key in ("outcomes_per_s", "outcomes_burst"):
            value = entry.get(key, getattr(ClientSettings, key))
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{where}: {key}={value!r} must be a number > 0")
            rates[key] = float(value)
        out[name] = ClientSettings(token_env=env, grader=grader, **rates)
    return out


def _gateway_settings(path: Path, section) -> GatewaySettings:
    """The ``gateway:`` section, each value checked against its default's type (a bool is a bool; a number is a
    finite number > 0)."""
    section = {} if section is None else section
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: 'gateway' must be a mapping of {list(GATEWAY_KEYS)}")
    unknown = set(section) - set(GATEWAY_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown gateway settings {sorted(unknown)}; allowed: {list(GATEWAY_KEYS)}")
    values = {}
    for key, value in section.items():
        default = getattr(GatewaySettings, key)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        else:
            ok = (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and value > 0
                and (isinstance(value, int) or not isinstance(default, int))
            )
        if not ok:
            kind = "true or false" if isinstance(default, bool) else f"a number > 0 (default {default})"
            raise ConfigError(f"{path}: gateway.{key}={value!r} must be {kind}")
        values[key] = value
    return GatewaySettings(**values)


# (field, locus serve's option, low, high, integer only): the one range check of every number of ServeConfig
# (the quality weight and the guard margin: the routing library's own checks, where they are made)
SERVE_NUMBERS = (
    ("threads", "--threads", 0, 1024, True),
    ("poll_seconds", "--poll-seconds", 0.01, 86_400, False),
    ("n_fallbacks", "--fallbacks", 0, 1_000, True),
    ("ranking_size", "--ranking-size", 0, 10**9, True),
    ("max_batch", "max_batch", 1, 1 << 16, True),
    ("cache_size", "cache_size", 0, 10**9, True),
    ("max_body_bytes", "--max-body-bytes", 0, 1 << 40, True),
    ("batch_wait_ms", "--batch-wait-ms", 0, 10_000, False),
)


LEARN_MODES = ("apply", "observe", "off")  # locus_model.learning.MODES: what graded outcomes do to routing


@dataclass(frozen=True)
class ServeConfig:
    home: str = ""  # LOCUS_HOME (empty: $LOCUS_HOME or <repo>/data)
    token: str | None = None  # bearer token every endpoint but /healthz requires
    models_config: str | None = None  # YAML or JSON (read_models_config)
    threads: int = 1  # CPU threads of the encoder and the predictor (both run in the scorer's thread); 0: the cores
    # free when it starts (locus serve's default)
    poll_seconds: float = 1.0  # how often the pool file is checked for a change
    policy: RoutingPolicy = RoutingPolicy()  # the default routing policy (guard margin, quality weight); a request
    # overrides its quality weight and caps
    n_fallbacks: int = 3  # models of the fallback chain tried after the chosen one
    ranking_size: int = 100  # models listed in a decision's ranking, best first (0: all; 100,000 take ~1 s to write)
    max_batch: int = 64  # queries encoded together at most
    cache_size: int = 100_000  # query encodings kept in memory
    max_body_bytes: int = 1 << 20  # a request body larger than this is refused with 413 (0: no limit)
    batch_wait_ms: float = 2.0  # how long the first query of a batch waits for others to join it
    encoder_runtime: str | None = None  # None: the runtime the checkpoint's training encodings came from
    portfolio: str | None = None  # serve this portfolio of the portfolios table (e.g. "k-center-15"), not the pool
    dry_run: bool = False  # chat calls answer with the decision only, never forwarded (asked for, never a fallback)
    serve: str = "auto"  # what model "locus" answers with: "auto" (the routing evaluation's verdict decides),
    # "router" or "single:<pool model>"
    learn: str = "apply"  # graded outcomes: "apply" (learned and routed on), "observe" (learned, logged beside the
    # frozen choice served), "off" (no request ids, no traffic log); True / False read as apply / off
    explore: float | None = None  # explored requests per graded outcome of a query group (None: LearningConfig's)
    explore_seed: int | None = None  # the exploration draws' seeds' source (None: fresh each start)
    traffic_days: float = 30.0  # the traffic log's retention: days, and MB per kind (storage/traffic.py)
    traffic_max_mb: float = 1024.0

    def __post_init__(self) -> None:
        """Every number finite and in its range (a NaN poll interval would spin, -1 fallbacks an empty chain): a
        ValueError naming the option (locus serve's flag) and its range."""
        if isinstance(self.learn, bool):
            object.__setattr__(self, "learn", "apply" if self.learn else "off")
        if self.learn not in LEARN_MODES:
            raise ValueError(f"--learn {self.learn!r}: choose one of {', '.join(LEARN_MODES)}")
        for field_, flag, low, high, integer in SERVE_NUMBERS:
            value = getattr(self, field_)
            ok = (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and (isinstance(value, int) or not integer)
                and math.isfinite(value)
                and low <= value <= high
            )
            if not ok:
                kind = "an integer" if integer else "a finite number"
                raise ValueError(f"{flag} {value!r}: must be {kind} from {low:g} to {high:g} (ServeConfig.{field_})")


def unmatched_entries(config: ModelsConfig, pool_names) -> dict[str, str | None]:
    """The models config's entries (upstreams and cost-only ones) that name no pool model, each with the pool
    name most like it (difflib; None when nothing is close)."""
    names = list(pool_names)
    present = set(names)
    return {
        entry: next(iter(difflib.get_close_matches(entry, names, n=1, cutoff=0.4)), None)
        for entry in dict.fromkeys([*config.upstreams, *config.costs])
        if entry not in present
    }


def check_models_against_pool(
    config: ModelsConfig, pool_names, *, path: str | None, dry_run: bool, unevaluated=()
) -> list[str]:
    """What `locus serve` says at start-up about the models config and the pool: raises ConfigError when the
    config has entries and none names a pool model (unless ``dry_run``); returns the warnings (each entry not in
    the pool with its nearest pool name; no upstream at all). ``unevaluated``: entries served with no evaluations
    (learning on), said so instead of ignored."""
    unmatched = unmatched_entries(config, pool_names)
    entries = set(config.upstreams) | set(config.costs)
    lines = [
        f"{entry!r}" + (f" (nearest pool model: {near!r})" if near else " (no pool model is close)")
        for entry, near in unmatched.items()
    ]
    if entries and len(unmatched) == len(entries) and not dry_run:
        raise ConfigError(
            f"the models config {path}: none of its {len(entries)} models is in the pool: "
            f"{'; '.join(lines)}. How to fix: name the models as the pool does (GET /v1/models, or "
            "the pool table's `model` column), or pass --dry-run to serve decisions only"
        )
    warnings = [
        f"the models config {path}: {entry} is not in the pool and is "
        + (
            "served with no evaluations, at the pool's prior (learning is on: its graded answers teach the router)"
            if name in set(unevaluated)
            else "ignored"
        )
        for name, entry in zip(unmatched, lines)
    ]
    if not dry_run and not any(name not in unmatched for name in config.upstreams):
        warnings.append(
            "no pool model has an upstream (base_url) in the models config: POST /route answers, "
            "/v1/chat/completions answers 503. How to fix: give pool models a base_url in "
            "--models-config, or pass --dry-run for chat answers that only name the decision"
        )
    return warnings
