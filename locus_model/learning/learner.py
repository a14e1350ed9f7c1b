"""The router learns from graded outcomes: each graded answer is an evaluation of the model that gave it, on that query.

What the learner believes of model m on query group k is a :class:`~locus_model.estimates.CellPosterior` cell whose
prior is what the estimator knows of the model there (its mean: the router's calibrated P(correct), the group
profile, moved to the router's mean P over the queries graded in that cell; its variance: the prior's measured error,
per cell: ``prior_var``). A query q of group k then gets

    learned P(m, q) = sigmoid(logit P_router(m, q) + logit(posterior mean_mk) - logit(prior mean_mk)),

the router's per-query view shifted by what the outcomes say of the cell: no outcomes, no shift (a learning router
starts exactly where frozen LOCUS is); outcomes as the router predicted, no shift; a model that does worse than
predicted on a group moves down there, as far as the evidence allows (the posterior, not a running mean). Thompson
sampling draws the cell's rate instead of its mean (``draw``). Evidence is discounted with a half-life (a model that
changes behind the same name is noticed); each client's evidence ages with its own answers, so that no client's
volume ages another's away.

Who steers whom. Outcomes come with a ``client`` (a configured credential's name, the operator's without
credentials) and ``grader`` (the operator's judge). A grader's outcomes steer everyone. A non-grader client's
outcomes steer its own routing (reads take ``client``), and every other client's only as far as the clients agree:
per cell, each non-grader client's move is its residual (its rate less the router's P on what it graded); the shared
move is the one at least two clients make in the same direction, the smaller of the two (the second largest
residual when it is positive, the second smallest when negative, none when the clients split), carried with the
evidence of the client that makes it, at most as much as its partner holds. No volume carries it: a client that
posts 400 outcomes against another's 100 moves nobody but itself; an honest client's own routing never loses its
evidence because another posts more. State: (3, M, K) sums per client, at most ``LearningConfig.max_clients``
clients (configured credentials; the rest pooled under one key); an outcome updates its cell, O(clients).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from locus_model.estimates.posterior import CellPosterior
from locus_model.stats.logistic import logit, sigmoid

Cells = tuple[np.ndarray, np.ndarray] | slice  # cells of the (M, K) table: (rows, groups) index arrays, or all
POOLED = "(pooled)"  # the key of the clients past LearningConfig.max_clients
_EPS = 1e-9


@dataclass(frozen=True)
class LearningConfig:
    """How the router learns from outcomes. The defaults, and why (then checked on the replay, bench/README.md):
    ``prior_var`` 0.01: a cell's prior is the router's calibrated P, wrong on a team's traffic by about 0.1 (~10
    pseudo-answers of prior), where the estimator gives no measured error; ``half_life`` 200: a cell rests on at most
    ~290 answers (sd >= 3 points, about the guard's 2-point margin) and a model that changes behind its name is
    outvoted within ~200 of its answers there; ``robust`` 0.01 (the estimates' is 0.05): one wrong answer on a cell at
    0.88 moves it 8 points at 0.01 but 18 at 0.05; a run of them still wins; ``explore`` 0.05: explored requests of a
    query group per graded outcome there (no outcomes, no exploration), shrinking as the posterior narrows;
    ``overturn`` 0.95: the posterior probability with which a candidate must beat the guard's incumbent (the single
    model, else frozen LOCUS's choice) on a query before it takes the query (not one lucky run)."""

    explore: float = 0.05  # explored requests per graded outcome of the query's group (0: never explore)
    prior_var: float = 0.01  # tau^2 where the estimator gives none: how wrong the router's mean P of a cell may be
    half_life: float = 200.0  # a client's graded answers of a cell after which its older ones count half (inf: never)
    robust: float = 0.01  # the cell posterior's flat component: a run of outcomes that contradicts the prior wins
    overturn: float = 0.95  # P(candidate better than the incumbent on the query) that moves the query off it
    max_clients: int = 1024  # clients whose evidence is kept apart (the rest pooled): the bound on the state

    def __post_init__(self) -> None:
        for name, lo, hi in (
            ("explore", 0.0, 1.0),
            ("prior_var", 1e-6, 0.25),
            ("robust", 0.0, 0.999),
            ("overturn", 0.5, 1.0),
        ):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
                raise ValueError(f"LearningConfig.{name} = {v!r}: give a number in [{lo}, {hi}]")
        if not (self.half_life > 0):
            raise ValueError(
                f"LearningConfig.half_life = {self.half_life!r}: give a positive number of answers (inf: never forget)"
            )
        if not (isinstance(self.max_clients, int) and self.max_clients >= 2):
            raise ValueError(f"LearningConfig.max_clients = {self.max_clients!r}: give an integer >= 2")

    @property
    def forget(self) -> float:
        return 1.0 if math.isinf(self.half_life) else 0.5 ** (1.0 / self.half_life)


def _agreement(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shared move of non-grader clients' sums (C, 3, ...): (its sums (3, ...), the index of the client whose
    evidence it is, -1 where none). See the module's docstring."""
    n = sums[:, 1]
    graded = n > _EPS
    resid = np.where(graded, (sums[:, 0] - sums[:, 2]) / np.maximum(n, _EPS), np.nan)  # (C, ...)
    shared = np.zeros(sums.shape[1:])
    picked = np.full(n.shape[1:], -1, np.int64)
    if len(sums) < 2:
        return shared, picked
    down = np.argsort(np.where(graded, -resid, np.inf), axis=0, kind="stable")  # largest residual first
    up = np.argsort(np.where(graded, resid, np.inf), axis=0, kind="stable")  # smallest first
    top, hi_at = down[0], down[1]
    bottom, lo_at = up[0], up[1]
    hi = np.take_along_axis(resid, hi_at[None], 0)[0]
    lo = np.take_along_axis(resid, lo_at[None], 0)[0]
    enough = graded.sum(axis=0) >= 2
    rise = enough & (hi > 0) & (lo >= 0)
    fall = enough & (lo < 0) & (hi <= 0)
    picked = np.where(rise, hi_at, np.where(fall, lo_at, -1))
    partner = np.where(rise, top, bottom)
    safe = np.maximum(picked, 0)
    n_pick = np.take_along_axis(n, safe[None], 0)[0]
    n_partner = np.take_along_axis(n, partner[None], 0)[0]
    scale = np.where(picked >= 0, np.minimum(1.0, n_partner / np.maximum(n_pick, _EPS)), 0.0)
    chosen = np.take_along_axis(sums, safe[None, None], 0)[0]  # (3, ...)
    return chosen * scale, picked


@dataclass
class _View:
    """One client's reading of the cells (its own evidence over the shared), or everyone's."""

    posterior: CellPosterior
    expected: np.ndarray  # (M, K)
    shift: np.ndarray  # (M, K) logit(posterior mean) - logit(its value with no outcomes); 0 exactly where none
    version: int = 0  # bumped at each change: caches of what is read from it key on it


@dataclass
class Learner:
    """The online posterior of M models over K query groups (``names``: the models, in the pool's order).

    ``start`` (M, K): each cell's prior mean before any outcome (the group profiles); ``prior_var`` (M, K): its
    variance (the estimator's measured error of the cell; a model with no evaluations: the pool's spread)."""

    names: tuple[str, ...]
    start: np.ndarray
    prior_var: np.ndarray
    config: LearningConfig = field(default_factory=LearningConfig)
    clients: dict = field(default_factory=dict)  # client -> (3, M, K) its own (right, count, expected), unweighted
    graders: set = field(default_factory=set)  # the clients whose outcomes steer everyone
    picked: np.ndarray | None = field(default=None, repr=False)  # (M, K) whose move is shared (-1: none)
    shared: _View | None = field(default=None, repr=False)
    views: dict = field(default_factory=dict, repr=False)  # non-grader client -> its _View
    _moments: dict = field(default_factory=dict, repr=False)  # (client, group) -> (view, version, mean, var)

    @classmethod
    def start_from(
        cls,
        names: Iterable[str],
        profiles: np.ndarray,
        config: LearningConfig | None = None,
        *,
        prior_var: np.ndarray | None = None,
    ) -> "Learner":
        """No outcomes yet: each cell's prior mean is the model's group profile (M, K); its variance ``prior_var``
        (M, K) where given (what the estimator measured), else ``config.prior_var``."""
        config = config or LearningConfig()
        start = np.clip(np.asarray(profiles, np.float64), 0.005, 0.995)
        if start.ndim != 2 or len(start) != len(tuple(names)):
            raise ValueError(
                f"Learner: profiles {start.shape} must be (models, groups) with one row per name ({len(tuple(names))})"
            )
        var = np.full(start.shape, config.prior_var) if prior_var is None else np.asarray(prior_var, np.float64)
        if var.shape != start.shape or not np.isfinite(var).all() or (var <= 0).any():
            raise ValueError(
                f"Learner: prior_var {var.shape} must be positive and shaped as the profiles {start.shape}"
            )
        out = cls(tuple(names), start, var.copy(), config)
        out._rebuild()
        return out

    # ------------------------------------------------------------------------------------------------ state

    def _shared(self) -> _View:
        """The shared view, built by :meth:`_rebuild` (Learner.start_from); a clear error before that."""
        if self.shared is None:
            raise RuntimeError("Learner: no views yet (make the learner with Learner.start_from or from_state)")
        return self.shared

    def _picked(self) -> np.ndarray:
        """(M, K) whose move is shared, set by :meth:`_rebuild` (Learner.start_from); a clear error before that."""
        if self.picked is None:
            raise RuntimeError("Learner: no views yet (make the learner with Learner.start_from or from_state)")
        return self.picked

    def _new_view(self) -> _View:
        post = CellPosterior.from_prior(self.start, self.prior_var, robust=self.config.robust)
        return _View(post, np.zeros_like(self.start), np.zeros_like(self.start))

    def _set(self, view: _View, cells: Cells, right: np.ndarray, count: np.ndarray, expected: np.ndarray) -> None:
        """A view's cells ``cells`` from combined sums: the evidence, the prior mean (the router's mean P on what
        was graded there, the start counting as one answer) and the shift."""
        post = view.posterior
        post.assign(cells, right, count)
        view.expected[cells] = expected
        post.prior_mean[cells] = np.clip((self.start[cells] + expected) / (1.0 + count), 0.005, 0.995)
        moved = logit(post.mean(cells)) - logit(post.unanswered_mean(cells))
        view.shift[cells] = np.where(np.asarray(count) > 0, moved, 0.0)
        view.version += 1

    def _combined(self, cells: Cells) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(graders' sums (3, ...), the shared move (3, ...), the index in ``clients`` of the client whose evidence
        it is (..., -1: none)) at ``cells``."""
        shape = self.start[cells].shape
        graded, others, at = np.zeros((3, *shape)), [], []
        for i, (c, sums) in enumerate(self.clients.items()):
            s = sums[(slice(None), *cells)] if isinstance(cells, tuple) else sums
            if c in self.graders:
                graded = graded + s
            else:
                others.append(s)
                at.append(i)
        if not others:
            return graded, np.zeros((3, *shape)), np.full(shape, -1, np.int64)
        shared, picked = _agreement(np.stack(others))
        table = np.array([*at, -1], np.int64)
        return graded, shared, table[np.where(picked >= 0, picked, len(at))]

    def _update(self, cells: Cells) -> None:
        """Recombine the cells ``cells`` (a (rows, cols) index or slice(None)) for everyone and every client view."""
        graded, shared, picked = self._combined(cells)
        if isinstance(cells, tuple):
            self._picked()[cells] = picked
        else:
            self.picked = np.asarray(picked, np.int64).reshape(self.start.shape)
        total = graded + shared
        self._set(self._shared(), cells, total[0], total[1], total[2])
        order = {c: i for i, c in enumerate(self.clients)}
        for c, view in self.views.items():
            own = self.clients[c][(slice(None), *cells)] if isinstance(cells, tuple) else self.clients[c]
            mine = np.asarray(picked) == order[c]
            sums = graded + np.where(mine, 0.0, shared) + own  # its own evidence once, not again as the shared move
            self._set(view, cells, sums[0], sums[1], sums[2])

    def _update_cell(self, m: int, k: int) -> None:
        """:meth:`_update` of one cell, every view at once (one posterior evaluation for all): O(clients)."""
        keys = list(self.clients)
        sums = np.stack([self.clients[c][:, m, k] for c in keys])  # (C, 3)
        is_grader = np.array([c in self.graders for c in keys])
        graded = sums[is_grader].sum(axis=0)
        others = np.flatnonzero(~is_grader)
        shared, picked = np.zeros(3), -1
        if len(others):
            moved, at = _agreement(sums[others])
            if at >= 0:
                shared, picked = moved, int(others[at])
        self._picked()[m, k] = picked
        order = {c: i for i, c in enumerate(keys)}
        views = [self._shared(), *self.views.values()]
        rows = [graded + shared]
        for c in self.views:
            i = order[c]
            rows.append(graded + (0.0 if picked == i else shared) + sums[i])
        total = np.stack(rows)  # (V, 3)
        right, count, expected = total[:, 0], np.maximum(total[:, 1], 0.0), total[:, 2]
        start, var = self.start[m, k], self.prior_var[m, k]
        prior = np.clip((start + expected) / (1.0 + count), 0.005, 0.995)
        cells = CellPosterior(prior[:, None], np.full((len(views), 1), var), right[:, None], count[:, None])
        cells.robust = self.config.robust
        mean = cells.mean()[:, 0]
        shift = np.where(count > 0, logit(mean) - logit(cells.unanswered_mean()[:, 0]), 0.0)
        for v, view in enumerate(views):
            post = view.posterior
            post.right[m, k], post.count[m, k] = min(max(right[v], 0.0), count[v]), count[v]
            post.prior_mean[m, k], view.expected[m, k], view.shift[m, k] = prior[v], expected[v], shift[v]
            view.version += 1

    def _rebuild(self) -> None:
        self.shared = self._new_view()
        self.views = {c: self._new_view() for c in self.clients if c not in self.graders}
        self.picked = np.full(self.start.shape, -1, np.int64)
        if self.clients:
            self._update(slice(None))

    def view(self, client: str | None = None) -> _View:
        """What ``client``'s routing reads (None, a grader, or a client with no outcomes: the shared view)."""
        shared = self._shared()
        return self.views.get(client, shared) if client is not None else shared

    @property
    def posterior(self) -> CellPosterior:
        """The shared view's cell posterior (what every client without outcomes of its own routes on)."""
        return self._shared().posterior

    @property
    def version(self) -> int:
        return self._shared().version + sum(v.version for v in self.views.values())

    # ------------------------------------------------------------------------------------------------ reading

    def shift(self, client: str | None = None) -> np.ndarray:
        """(M, K) logit(posterior mean) - its value with no outcomes: what outcomes add to the router's logit
        (exactly 0 where a cell has no outcome)."""
        return self.view(client).shift

    def profiles(self, client: str | None = None) -> np.ndarray:
        """(M, K) the group profiles the outcomes taught: each model's starting profile shifted as its queries are
        (exactly the start where no outcome moved it)."""
        shift = self.shift(client)
        return np.where(shift == 0.0, self.start, sigmoid(logit(self.start) + shift))

    def proba(
        self,
        p: np.ndarray,
        groups: Sequence[int] | np.ndarray,
        rows: np.ndarray | None = None,
        *,
        client: str | None = None,
    ) -> np.ndarray:
        """(R, Q) learned P(correct) from the router's P (R, Q) on queries of groups (Q,); ``rows``: p holds only
        these models' rows (R, Q). Where a cell has no outcome, the router's P exactly."""
        shift = self.shift(client)
        shift = (shift if rows is None else shift[np.asarray(rows)])[:, np.asarray(groups)]
        p = np.asarray(p, np.float64)
        return np.where(shift == 0.0, p, sigmoid(logit(p) + shift))

    def draw(
        self,
        p: np.ndarray,
        groups: Sequence[int] | np.ndarray,
        rng: np.random.Generator,
        rows: np.ndarray | None = None,
        *,
        client: str | None = None,
        size: int | None = None,
    ) -> np.ndarray:
        """(R, Q) one Thompson draw (``size``: (size, R, Q), that many): each cell's rate drawn from its posterior in
        place of its mean (``rows``: as in :meth:`proba`; only those cells are drawn)."""
        post = self.view(client).posterior
        rows = np.arange(len(self.names)) if rows is None else np.asarray(rows)
        cells = (rows[:, None], np.asarray(groups)[None, :])  # (R, Q)
        if size is not None:
            cells = (np.broadcast_to(rows[None, :, None], (size, len(rows), 1)), cells[1][None])
        shift = logit(post.sample(rng, cells)) - logit(post.unanswered_mean(cells))
        return sigmoid(logit(np.asarray(p, np.float64)) + shift)

    def _group(self, group: int, client: str | None) -> tuple[np.ndarray, np.ndarray]:
        """((M,) posterior mean, (M,) posterior variance) of every model's cell on ``group`` in ``client``'s view,
        read once per change of that view's evidence (a request reads an index of it)."""
        view = self.view(client)
        cached = self._moments.get((client, group))
        if cached is None or cached[0] is not view or cached[1] != view.version:
            cells = (np.arange(len(self.names)), np.full(len(self.names), int(group)))
            mean, var = view.posterior.moments(cells)
            cached = self._moments[(client, group)] = (view, view.version, mean, var)
        return cached[2], cached[3]

    def moments(
        self, rows: np.ndarray, group: int, *, client: str | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """((R,) posterior mean, (R,) posterior variance, (R,) the cell has outcomes) of the rows' cells on
        ``group``."""
        rows = np.asarray(rows)
        mean, var = self._group(int(group), client)
        return np.clip(mean[rows], 0.005, 0.995), var[rows], self.answered(rows, group, client=client)

    def answered(self, rows: np.ndarray, group: int, *, client: str | None = None) -> np.ndarray:
        """(R,) whether the rows' cells on ``group`` have outcomes (in ``client``'s view)."""
        return self.view(client).posterior.count[np.asarray(rows), int(group)] > 0

    def narrowing(self, rows: np.ndarray, group: int, *, client: str | None = None) -> float:
        """How wide the rows' cells on ``group`` still are, in [0, 1]: the mean of posterior sd / prior sd."""
        rows = np.asarray(rows)
        var = self._group(int(group), client)[1][rows]
        return float(np.clip(np.mean(np.sqrt(var / self.prior_var[rows, int(group)])), 0.0, 1.0))

    def counts(self) -> np.ndarray:
        """(M,) graded answers held per model, every client's (discounted by the half-life)."""
        if not self.clients:
            return np.zeros(len(self.names))
        return sum(s[1] for s in self.clients.values()).sum(axis=1)

    # ------------------------------------------------------------------------------------------------ updates

    def _check_cell(self, m: int, k: int, where: str) -> tuple[int, int]:
        n_models, n_groups = self.start.shape
        for name, v, n in (("model", m, n_models), ("group", k, n_groups)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < n:
                raise ValueError(
                    f"Learner.{where}: {name} index {v!r} is not one of 0..{n - 1}: give the row of a model of this "
                    f"learner ({n_models} models) and a query group of its router ({n_groups} groups)"
                )
        return int(m), int(k)

    def observe(
        self, m: int, k: int, score: float, p_router: float, *, client: str | None = None, grader: bool = True
    ) -> None:
        """One graded answer of model m on a query of group k that the router gave P ``p_router``, from ``client``
        (None: the operator) who is a ``grader`` (steers everyone) or not (steers itself, and others as far as the
        clients agree)."""
        m, k = self._check_cell(m, k, "observe")
        if not (0.0 <= score <= 1.0) or not (0.0 <= p_router <= 1.0):
            raise ValueError(f"Learner.observe: score {score!r} and P {p_router!r} must lie in [0, 1]")
        key = "" if client is None else str(client)
        if key not in self.clients and len(self.clients) >= self.config.max_clients - 1:
            key = POOLED  # one slot kept for the pool of the rest: at most max_clients keys
        sums = self.clients.get(key)
        if sums is None:
            sums = self.clients[key] = np.zeros((3, *self.start.shape))
        if grader and key not in self.graders:
            self.graders.add(key)
            self.views.pop(key, None)
            self._rebuild()
        elif not grader and key not in self.graders and key not in self.views:
            self.views[key] = view = self._new_view()
            if len(self.clients) > 1:
                graded, shared, _ = self._combined(slice(None))
                total = graded + shared
                self._set(view, slice(None), total[0], total[1], total[2])
        forget = self.config.forget
        own = CellPosterior(self.start, self.prior_var, sums[0], sums[1])  # the client's own sums, updated in place
        own.observe(m, k, score, forget=forget)
        sums[2, m, k] = sums[2, m, k] * forget + p_router  # the router's P over the same answers: what was expected
        self._update_cell(m, k)

    def reset(self, m: int) -> None:
        """Forget every outcome of model m (the per-model reset)."""
        m, _ = self._check_cell(m, 0, "reset")
        for sums in self.clients.values():
            sums[:, m] = 0.0
        self._update((np.full(self.start.shape[1], m), np.arange(self.start.shape[1])))

    def remapped(
        self,
        names: Iterable[str],
        profiles: np.ndarray,
        *,
        keep: Iterable[str] | None = None,
        prior_var: np.ndarray | None = None,
    ) -> "Learner":
        """This learner over another pool of the same query groups (profiles (M', K)): the models of ``keep``
        (default: every model in both) carry their evidence over, the others start from their profiles."""
        out = Learner.start_from(names, profiles, self.config, prior_var=prior_var)
        old = {n: i for i, n in enumerate(self.names)}
        keep = set(self.names) if keep is None else set(keep)
        pairs = [(j, old[n]) for j, n in enumerate(out.names) if n in old and n in keep]
        out.graders = set(self.graders)
        for client, sums in self.clients.items():
            mine = out.clients[client] = np.zeros((3, *out.start.shape))
            if pairs:
                new_rows, old_rows = map(list, zip(*pairs))
                mine[:, new_rows] = sums[:, old_rows]
        out._rebuild()
        return out

    def state_dict(self) -> dict:
        """Plain data (lists and floats) that :meth:`from_state` reads back: what survives a restart."""
        config = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self.config).items()}
        return {
            "names": list(self.names),
            "config": config,
            "start": self.start.tolist(),
            "prior_var": self.prior_var.tolist(),
            "clients": {c: v.tolist() for c, v in self.clients.items()},
            "graders": sorted(self.graders),
        }

    @classmethod
    def from_state(cls, state: dict, *, legacy_client: str = "") -> "Learner":
        """A learner from :meth:`state_dict`'s data, checked: every array's shape and values (ValueError saying
        which entry is wrong and how to fix it). A state written before the clients were told apart by agreement
        (no ``graders``): its evidence summed as ``legacy_client``'s, a grader's (one trust domain, as then)."""
        how = "delete traffic/learner.json to rebuild the learner from the outcome log"
        if not isinstance(state, dict) or not isinstance(state.get("names"), list) or "start" not in state:
            raise ValueError(f"learner state: not a learner's state (names and start missing): {how}")
        names = [str(n) for n in state["names"]]
        known = {f for f in LearningConfig.__dataclass_fields__}
        config: dict[str, Any] = {  # the state's values, checked by LearningConfig
            k: (math.inf if k == "half_life" and v is None else v)
            for k, v in dict(state.get("config") or {}).items()
            if k in known
        }
        try:
            start = np.asarray(state["start"], np.float64)
            prior_var = np.asarray(state["prior_var"], np.float64) if "prior_var" in state else None
        except (TypeError, ValueError) as err:
            raise ValueError(f"learner state: start / prior_var are not arrays of numbers ({err}): {how}") from None
        if start.ndim != 2 or len(start) != len(names):
            raise ValueError(f"learner state: start {start.shape} must be ({len(names)} models, groups): {how}")
        learner = cls.start_from(names, start, LearningConfig(**config), prior_var=prior_var)
        if "right" in state:  # a state written before the per-client sums: its evidence as the operator's
            raw = {"": [state[k] for k in ("right", "count", "expected")]}
        else:
            raw = dict(state.get("clients") or {})
        for client, value in raw.items():
            try:
                sums = np.asarray(value, np.float64)
            except (TypeError, ValueError):
                sums = np.zeros(0)
            if sums.shape != (3, *start.shape):
                raise ValueError(
                    f"learner state: client {str(client)[:60]!r} has sums of shape {sums.shape}, not "
                    f"(3, {start.shape[0]}, {start.shape[1]}) (right, count, expected per model and group): {how}"
                )
            if not np.isfinite(sums).all() or (sums < 0).any() or (sums[0] > sums[1] + 1e-6).any():
                raise ValueError(
                    f"learner state: client {str(client)[:60]!r} has sums that are negative, not finite, or more "
                    f"right answers than answers: {how}"
                )
            learner.clients[str(client)] = sums
        if "graders" in state:
            learner.graders = {str(g) for g in state["graders"]}
        elif learner.clients:
            learner.clients = {legacy_client: sum(learner.clients.values())}
            learner.graders = {legacy_client}
        learner._rebuild()
        return learner


__all__ = ["POOLED", "Learner", "LearningConfig"]
