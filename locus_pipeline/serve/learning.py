"""`locus serve` learns from its own traffic: request ids, graded outcomes, the online learner, budgeted exploration.

Every routed answer gets a request id and a line in the decision log (storage/traffic.py); ``POST /v1/outcomes``
grades it ({request_id, score in [0, 1], source?}) and the outcome goes to the outcome log, then into the
:class:`~locus_model.learning.Learner` (cells: the model that answered x the query's group; prior: the router's
calibrated P(correct)). Requests are decided by the routing strategy (locus_model.learning: the learned P and standing
under the guard; the single model of ``--serve`` as the guard's incumbent the outcomes may overturn; a Thompson draw
within the exploration budget, which grows only with the outcomes of the query's group). ``--learn observe`` learns
the same and serves the frozen choice, logging the learned one beside it.

Who an outcome is from, for the learner: the credential that posted it (serve/identity.py: its configured name and
whether it grades for everyone), recorded in the outcome log. Without credentials, or with the single ``--token``,
the server is one trust domain: every outcome is the operator's, a grader's; ``x-locus-client`` is a label and never
adds influence.

Replicas sharing a home: each one tails both logs every poll, so a request routed by one can be graded at any
other, and each applies every outcome once (by request id; the first in the log counts). The learner's state and
how far it read each outcome segment are saved to ``traffic/learner.json`` (every ``save_seconds`` when changed, and
at shutdown); at start a gateway loads it and applies what the log holds past it. A new checkpoint (other query
groups) starts the learner afresh; a pool reload keeps each model's evidence unless its row changed (a model
re-embedded, e.g. from these very outcomes, starts from its new estimate).
"""

from __future__ import annotations

import base64
import logging
import math
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from locus_model.learning import Decision, Exploration, Learner, LearningConfig, prior_variance
from locus_model.learning import Learning as LearningStrategy
from locus_pipeline.serve.batcher import Scored
from locus_pipeline.serve.config import ServeConfig
from locus_pipeline.serve.snapshot import Snapshot
from locus_pipeline.storage import LocusHome
from locus_pipeline.storage.traffic import OPERATOR, SOURCES, Retention, keyed_hash, writer_id

log = logging.getLogger("locus.serve")

REQUEST_ID_HEADER = "x-locus-request-id"
EXPLORED_HEADER = "x-locus-explored"
MAX_OUTCOMES = 1000  # outcomes in one POST /v1/outcomes
MAX_PENDING = 100_000  # outcomes waiting for their decision to reach this replica's log reader


@dataclass(frozen=True)
class Issued:
    """What a gateway keeps of a request it routed, to take its outcome."""

    model: str  # the model that answered (the chosen one, or the fallback that answered)
    group: int  # the query's group (the router's)
    p: float  # the router's P(correct) of that model on the query: the learner's prior for this answer
    client: str
    checkpoint_id: str
    time: float


@dataclass(frozen=True, eq=False)
class Routed:
    """A decided request: its JSON body (POST /route's, the chat explanation's) and what the decision log keeps of
    it (the strategy's :class:`~locus_model.learning.Decision`, the scored query, the snapshot it was decided on)."""

    body: dict
    decision: Decision
    scored: Scored
    snap: Snapshot
    candidates: tuple[str, ...]
    query_sha256: str


class OutcomeRefused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Learning:
    """The gateway's learner, its logs and its exploration budget. Called on the event loop only (``observe`` is
    microseconds); the logs' reads and uploads run in the thread pool (``read_logs``, ``flush``)."""

    def __init__(
        self,
        home: LocusHome,
        snap: Snapshot,
        *,
        config: LearningConfig,
        retention: Retention,
        save_seconds: float = 30.0,
        seed: int | None = None,
        mode: str = "apply",
        metrics=None,
    ) -> None:
        self.home, self.config, self.retention, self.save_seconds = home, config, retention, save_seconds
        self.metrics = metrics
        self.writer = writer_id()
        self.secret = home.traffic_secret()  # the decision log keeps a keyed hash of each query, never its text
        self.decision_log = home.traffic_writer("decisions", self.writer, retention)
        self.outcome_log = home.traffic_writer("outcomes", self.writer, retention)
        self.mode, self.seed = mode, seed
        self.issued: dict[str, Issued] = {}
        self.graded: dict[str, float] = {}  # request id -> when its outcome was logged (each counts once)
        self.pending: list[dict] = []  # outcomes read before their decision
        self.direct: set[str] = set()  # outcomes posted here and applied, not yet read back from the log
        self.reserved: set[str] = set()  # outcomes posted here, being written to the log
        self.unscored: list[dict] = []  # graded (model, query) rows of a dropped file: the scorer places them
        self.changed, self.saved_at, self.pruned_at = False, time.monotonic(), 0.0
        self.strategy = self._fresh(snap)
        self.names, self.checkpoint_id = snap.names, snap.checkpoint_id
        self.decisions_tail = home.traffic_tail("decisions", skip_writer=self.writer)  # its own: indexed by issue()
        self.outcomes_tail = home.traffic_tail("outcomes")
        self._start(snap)

    # ------------------------------------------------------------------ state

    def _fresh(self, snap: Snapshot) -> LearningStrategy:
        """The learning strategy of this checkpoint with no outcomes yet."""
        learner = Learner.start_from(snap.names, snap.pool_scorer.profiles, self.config, prior_var=self._prior(snap))
        shares = snap.pool_scorer.router.groups.shares()
        return LearningStrategy(learner, shares=shares, mode=self.mode, seed=self.seed)

    def _prior(self, snap: Snapshot) -> np.ndarray:
        """(M, K) each cell's prior variance: what the estimator knows of the model (locus_model.learning.prior)."""
        n = snap.n_evaluations or (1 << 20,) * len(snap.names)  # a snapshot without counts: trained models
        shares = snap.pool_scorer.router.groups.shares()
        return prior_variance(snap.pool_scorer.profiles, np.asarray(n), shares, router_var=self.config.prior_var)

    @property
    def learner(self) -> Learner:
        return self.strategy.learner

    @learner.setter
    def learner(self, learner: Learner) -> None:
        self.strategy.learner = learner

    @property
    def exploration(self) -> Exploration:
        return self.strategy.exploration

    def _start(self, snap: Snapshot) -> None:
        """The saved state, then what the logs hold past it."""
        saved = self.home.read_learner_state()
        applied: dict[str, int] = {}
        if saved and saved.get("checkpoint_id") == snap.checkpoint_id:
            state = {**saved["learner"], "config": asdict(self.config)}  # the operator's settings of this start
            self.learner = Learner.from_state(state, legacy_client=OPERATOR).remapped(
                snap.names, snap.pool_scorer.profiles, prior_var=self._prior(snap)
            )
            self.strategy.exploration = Exploration.from_state(
                self.config.explore, self.learner.start.shape[1], saved.get("exploration")
            )
            applied = {str(k): int(v) for k, v in saved.get("offsets", {}).items()}
            self.pending = list(saved.get("pending", []))
            self.direct = set(saved.get("direct", []))
            self.unscored = list(saved.get("unscored", []))
            self.graded.update({rid: time.time() for rid in self.direct})
        elif saved:
            log.info(
                "the learner's saved state is of checkpoint %s, not %s: learning starts afresh",
                saved.get("checkpoint_id"),
                snap.checkpoint_id,
            )
        for _, _, record in self.decisions_tail.read():
            self._index(record)
        for segment, end, record in self.outcomes_tail.read():
            if end <= applied.get(segment, -1):  # applied before the state was saved
                if "request_id" in record:
                    self.graded[str(record["request_id"])] = float(record.get("time", 0.0))
                continue
            self._take(record)
        self._retry_pending()
        self.changed = True

    def state(self) -> dict:
        return {
            "checkpoint_id": self.checkpoint_id,
            "saved_at": time.time(),
            "writer": self.writer,
            "learner": self.learner.state_dict(),
            "exploration": self.exploration.state_dict(),
            "offsets": dict(self.outcomes_tail.offsets),
            "pending": self.pending[-MAX_PENDING:],
            "direct": sorted(self.direct),
            "unscored": self.unscored[-MAX_PENDING:],
        }

    def due(self) -> dict | None:
        """The state to save now (on the event loop: a consistent copy), None when unchanged or saved recently."""
        if not self.changed or time.monotonic() - self.saved_at < self.save_seconds:
            return None
        self.changed, self.saved_at = False, time.monotonic()
        return self.state()

    def on_pool(self, snap: Snapshot) -> None:
        """A reloaded pool: the learner over its models (evidence kept where a model's row did not change)."""
        if snap.checkpoint_id != self.checkpoint_id:
            self.strategy, self.checkpoint_id = self._fresh(snap), snap.checkpoint_id
        else:
            old = {n: i for i, n in enumerate(self.names)}
            old_profiles = self.learner.start
            keep = [
                n
                for j, n in enumerate(snap.names)
                if n in old and np.allclose(old_profiles[old[n]], snap.pool_scorer.profiles[j], atol=1e-6)
            ]
            self.learner = self.learner.remapped(
                snap.names, snap.pool_scorer.profiles, keep=keep, prior_var=self._prior(snap)
            )
        self.names, self.changed = snap.names, True

    # ------------------------------------------------------------------ decisions

    def aligned(self, snap: Snapshot) -> bool:
        return snap.names == self.names and snap.checkpoint_id == self.checkpoint_id

    def issue(self, routed: Routed, *, answered_by: str, client: str) -> str:
        """A request id for a routed answer, its line in the decision log and its entry in the index."""
        rid = "req-" + secrets.token_hex(12)
        snap, d, scored = routed.snap, routed.decision, routed.scored
        i = snap.index[answered_by]
        encoding = np.asarray(scored.encoding, np.float16)
        record = {
            "request_id": rid,
            "time": time.time(),
            "client": client,
            "checkpoint_id": snap.checkpoint_id,
            "query_key": keyed_hash(self.secret, routed.query_sha256),
            "encoding": base64.b64encode(encoding.tobytes()).decode(),
            "encoding_dtype": "float16",
            "candidates": list(routed.candidates[:64]),
            "n_candidates": routed.body.get("candidates"),
            "chosen": routed.body["chosen"],
            "answered_by": answered_by,
            "group": scored.group,
            "p_router": float(scored.probs[i]),  # unrounded: the learner's prior for the answer, as decided
            "serves": d.by,
            "learn": self.mode,
            "learned_choice": None if d.learned is None else snap.names[d.learned],
            "explored": d.explored,
            "explore_reason": d.why,
            "explore_seed": d.seed,
            "probability": round(d.probability, 6),
            "explore_share": self.config.explore,
        }
        self.decision_log.append([record], sync=False)
        self._index(record)
        return rid

    def _index(self, record: dict) -> None:
        try:
            self.issued[str(record["request_id"])] = Issued(
                str(record["answered_by"]),
                int(record["group"]),
                float(record["p_router"]),
                str(record["client"]),
                str(record["checkpoint_id"]),
                float(record["time"]),
            )
        except (KeyError, TypeError, ValueError):
            log.warning("a decision-log line lacks its fields; skipped: %.200s", record)

    # ------------------------------------------------------------------ outcomes

    def check(self, item: Any, client: str) -> dict:
        """One posted outcome, checked (OutcomeRefused with the status and reason otherwise), as its log record."""
        if not isinstance(item, dict):
            raise OutcomeRefused(422, "each outcome is an object {request_id, score, source?}")
        unknown = set(item) - {"request_id", "score", "source"}
        if unknown:
            raise OutcomeRefused(422, f"unknown field(s) {sorted(unknown)}: an outcome has request_id, score, source")
        rid, score, source = item.get("request_id"), item.get("score"), item.get("source", "user")
        if not isinstance(rid, str) or not rid:
            raise OutcomeRefused(422, "request_id must be the x-locus-request-id of an answer of this gateway")
        if (
            not isinstance(score, (int, float))
            or isinstance(score, bool)
            or not math.isfinite(score)
            or not 0 <= score <= 1
        ):
            raise OutcomeRefused(422, f"score={score!r} must be a number in [0, 1] (1: the answer was right)")
        if source not in SOURCES[:3]:
            raise OutcomeRefused(422, f"source={source!r} must be one of {list(SOURCES[:3])}")
        issued = self.issued.get(rid)
        if issued is None:
            raise OutcomeRefused(
                404,
                f"request id {rid[:80]!r} was never issued by this gateway (or is older than "
                f"the traffic log's retention, {self.retention.days:g} days)",
            )
        if issued.client != client:
            raise OutcomeRefused(
                403,
                f"request id {rid[:80]!r} was issued to another client: an outcome is taken "
                "only with the credential the request was sent with, or a grader's (docs/serve.md, Who may grade)",
            )
        if rid in self.graded or rid in self.reserved:
            raise OutcomeRefused(409, f"request id {rid[:80]!r} already has an outcome: each answer is graded once")
        return {
            "request_id": rid,
            "score": float(score),
            "source": source,
            "client": client,
            "time": time.time(),
            "model": issued.model,
            "writer": self.writer,
        }

    def log_outcomes(self, records: list[dict]) -> None:  # in the thread pool: durable before the 202
        self.outcome_log.append(records, sync=True)

    def take(self, records: list[dict]) -> None:
        """Outcomes posted here, already in the log: applied now (the log's reader skips them later)."""
        for record in records:
            self.reserved.discard(record["request_id"])
            if record["request_id"] not in self.graded:  # else the log's reader was faster
                self._take(record)
                self.direct.add(record["request_id"])
        self.publish({str(record.get("model")) for record in records})  # an outcome moves its own model's row only

    def _take(self, record: dict) -> None:
        """Apply one outcome-log record (an outcome once per request id, or a reset)."""
        if "reset" in record:
            name = str(record["reset"])
            if name in self.names:
                self.learner.reset(self.names.index(name))
                self.changed = True
                log.info("learning reset for %s (locus learn reset)", name)
            return
        rid = str(record.get("request_id", ""))
        if rid in self.direct:  # posted here and applied then: read back from the log
            self.direct.discard(rid)
            return
        if not rid or rid in self.graded:
            return
        if "model" in record and "query" in record:  # a dropped file's (model, query, score) row
            if len(self.unscored) < MAX_PENDING:
                self.unscored.append(record)
            return
        issued = self.issued.get(rid)
        if issued is None:
            if len(self.pending) < MAX_PENDING:
                self.pending.append(record)
            return
        self.graded[rid] = float(record.get("time", time.time()))
        if issued.checkpoint_id != self.checkpoint_id or issued.model not in self.names:
            return  # graded after a new checkpoint or the model's removal: logged, not learned
        try:
            score = float(record["score"])
        except (KeyError, TypeError, ValueError):
            return
        if not 0 <= score <= 1:
            return
        self.strategy.observe(
            self.names.index(issued.model),
            issued.group,
            score,
            min(max(issued.p, 0.0), 1.0),
            client=str(record.get("client") or issued.client),  # who graded, by credential (identity.py)
            grader=bool(record.get("grader", True)),  # a record from before the credentials: the operator's
        )
        self.changed = True
        if self.metrics is not None:
            self.metrics.outcomes.labels(issued.model, str(record.get("source", "user"))).inc()

    def take_scored(self, snap: Snapshot, record: dict, scored: Scored) -> None:
        """A dropped file's graded (model, query) row, its query scored by the router: learned like an answer."""
        rid, model = str(record["request_id"]), str(record["model"])
        if rid in self.graded or not self.aligned(snap):
            return
        self.graded[rid] = float(record.get("time", time.time()))
        if model not in snap.index:
            log.warning("a graded outcome of %r (a dropped file): not a pool model; not learned", model[:80])
            return
        m = snap.index[model]
        # a dropped file is the drop folder's owner's: the operator's, a grader's
        self.strategy.observe(
            m,
            scored.group,
            float(record["score"]),
            float(scored.probs[m]),
            client=str(record.get("client") or OPERATOR),
            grader=bool(record.get("grader", True)),
        )
        self.changed = True
        if self.metrics is not None:
            self.metrics.outcomes.labels(model, str(record.get("source", "file"))).inc()

    def _retry_pending(self) -> None:
        waiting, self.pending = self.pending, []
        horizon = time.time() - self.retention.days * 86400
        for record in waiting:
            if float(record.get("time", 0.0)) >= horizon:
                self._take(record)

    # ------------------------------------------------------------------ the watcher's tick

    def read_logs(self) -> tuple[list[dict], list[dict]]:  # in the thread pool
        self.decision_log.flush()  # object storage: other replicas see this one's decisions
        return ([r for _, _, r in self.decisions_tail.read()], [r for _, _, r in self.outcomes_tail.read()])

    def catch_up(self, decisions: list[dict], outcomes: list[dict]) -> None:
        for record in decisions:
            self._index(record)
        for record in outcomes:
            self._take(record)
        self._retry_pending()
        if outcomes:
            self.publish()

    def housekeeping(self, state: dict | None) -> None:  # in the thread pool
        """Save ``state`` (from :meth:`due`), prune the logs hourly and forget the index past the retention."""
        if state is not None:
            self.home.write_learner_state(state)
        now = time.monotonic()
        if now - self.pruned_at >= 3600:
            self.pruned_at = now
            removed = self.home.prune_traffic(self.retention)
            if removed:
                log.info("traffic log: %d segments past the retention removed", len(removed))
            horizon = time.time() - self.retention.days * 86400
            self.issued = {k: v for k, v in self.issued.items() if v.time >= horizon}
            self.graded = {k: t for k, t in self.graded.items() if t >= horizon}

    def close(self) -> None:
        self.decision_log.close()
        self.outcome_log.close()
        if self.changed:
            self.home.write_learner_state(self.state())
            self.changed = False

    def counts(self) -> dict[str, float]:
        """Graded answers per model held by the learner (discounted by the half-life)."""
        total = self.learner.counts()
        return {n: round(float(c), 3) for n, c in zip(self.names, total) if c > 0}

    def moved(self, threshold: float = 0.01) -> dict[str, float]:
        """{model: learned standing - trained standing} of the models whose standing the outcomes moved by at least
        ``threshold`` (the shared view: what a client without outcomes of its own is routed on)."""
        shift = self.strategy.standing_shift()
        return {n: round(float(v), 4) for n, v in zip(self.names, shift) if abs(v) >= threshold}

    def status(self) -> dict:
        """What /healthz and the start-up summary say of learning."""
        graded, explored = self.exploration.graded, self.exploration.explored
        assert graded is not None and explored is not None, "Exploration sets its counts in __post_init__"
        return {
            "learn": self.mode,
            "explore": self.config.explore,
            "explore_rule": "explored requests of a query group per graded outcome there, shrinking as the posterior "
            "narrows: nothing explored before outcomes arrive",
            "outcomes_loaded": round(float(graded.sum()), 3),
            "outcomes_held": round(float(self.learner.counts().sum()), 3),
            "explored": int(explored.sum()),
            "standing_moved": self.moved(),
            "clients": len(self.learner.clients),
        }

    def publish(self, models: set[str] | None = None) -> None:
        """The per-model learned standing shift and outcome counts into /metrics (of ``models``; None: every one)."""
        if self.metrics is None:
            return
        counts, shift = self.learner.counts(), self.strategy.standing_shift()
        for n, c, v in zip(self.names, counts, shift):
            if (models is None or n in models) and (c > 0 or v != 0):
                self.metrics.learned_shift.labels(n).set(float(v))
                self.metrics.learned_outcomes.labels(n).set(float(c))


def learning_config(config: ServeConfig) -> LearningConfig:
    """The learner's settings of this gateway: the library's defaults, ``--explore`` over them."""
    default = LearningConfig()
    return LearningConfig(explore=default.explore if config.explore is None else config.explore)
