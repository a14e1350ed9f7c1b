"""The pool being served: one immutable :class:`Snapshot` (pool, checkpoint, costs, upstreams), swapped whole on a
reload; :func:`watched_key` tells when the pool file (or the served portfolio's table) changed. Storage goes through
LocusHome only."""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Mapping, TypeAlias

import numpy as np

from locus_model.data.encoders import resolve_runtime
from locus_model.learning.prior import pool_prior
from locus_model.pool import PoolError, check_pool
from locus_model.routing import CostTable, cost_info, cost_table
from locus_pipeline.serve.config import ModelsConfig, Upstream
from locus_pipeline.serve.portfolio import read_portfolio
from locus_pipeline.storage import LocusHome, StorageError
from locus_pipeline.storage.files import FileVersion, version_of

if TYPE_CHECKING:  # why: the router module loads torch, which the snapshot's readers get through the checkpoint
    from locus_model.router import PoolScorer


# what a reload watches (watched_key): the pool file's version and the portfolios table's (None: no portfolio served)
WatchedKey: TypeAlias = tuple[FileVersion, FileVersion | None]
TYPO_CUTOFF = 0.85  # difflib ratio from which a models config name not in the pool is read as a pool model's typo


def pool_key(path) -> FileVersion | None:
    """What changes whenever the file is replaced, None when it is missing: (mtime_ns, size, inode) on a local home
    (an atomic rewrite changes the inode), the object's ETag in object storage (storage.files.version_of)."""
    return version_of(path)


@dataclass(frozen=True)
class Snapshot:
    """One pool with its checkpoint and costs; immutable, swapped whole on a reload."""

    key: FileVersion
    checkpoint_id: str
    encoder: str
    runtime: str  # the encoder runtime (locus_model.data.encoders.RUNTIMES)
    pool_scorer: "PoolScorer"  # the checkpoint's trained router with the pool's rows: P(correct), standing (only read)
    names: tuple[str, ...]
    sources: tuple[str, ...]
    costs: CostTable
    upstreams: Mapping[str, Upstream]  # pool models with an upstream
    output_tokens: int
    loaded_at: float
    portfolio: str | None = None  # the portfolio served as the candidate set (None: the whole pool)
    served: tuple[str, ...] = ()  # the candidate set: the portfolio's members in the pool, else every pool model,
    # less the rows the pool marks not routable (too few evaluations: reached only when a request names them)
    held_back: tuple[str, ...] = ()  # pool models not routable by default (the pool's `routable` column)
    portfolio_missing: tuple[str, ...] = ()  # members of the portfolio that are not in the pool (not served)
    portfolio_key: FileVersion | None = None  # pool_key of the portfolios table it was read from
    dry_run: bool = False  # asked for (--dry-run): chat calls answer with the decision, never forwarded
    n_evaluations: tuple[int, ...] = ()  # per row: the evaluations its pool row was computed from (0: none, a model
    # of the models config not in the pool, served at the pool's prior while learning is on)

    @property
    def embeddings(self) -> np.ndarray:  # (M, d) the pool's model embeddings (the fallback chains' distances)
        return self.pool_scorer.embeddings

    # computed once per snapshot (a pool of 100,000 models: tens of ms each, too much for every request)
    @cached_property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    @cached_property
    def routable(self) -> tuple[str, ...]:
        """The served models a request may be sent to: those with an upstream (a dry run, or no upstream at all
        where only POST /route answers: every served one)."""
        if self.dry_run or not self.upstreams:
            return self.served
        return tuple(n for n in self.served if n in self.upstreams)

    @cached_property
    def routable_rows(self) -> np.ndarray:  # (R,) rows of ``routable`` in names / embeddings
        index = self.index
        return np.array([index[n] for n in self.routable], dtype=np.int64)


def load_snapshot(
    home: LocusHome,
    config: ModelsConfig,
    runtime: str | None = None,
    *,
    portfolio: str | None = None,
    dry_run: bool = False,
    learning: bool = False,
) -> Snapshot:
    """The pool as it is now, with the checkpoint it was embedded with; costs from the model catalog when it exists
    (its cost columns, as the cost_frontier asset reads them), with the models config's costs on top, and
    upstreams from the models config. ``runtime``: the encoder runtime (None: the checkpoint's). ``portfolio``: a
    portfolio of the portfolios table served as the candidate set (read again with each pool). ``dry_run``: chat
    calls answer with the decision only. ``learning`` (outcomes are learned): the pool's models under the routing
    minimum are served too, and the models config's upstreams not in the pool (and not named like a pool model: a
    typo) are served as rows at the pool's prior (locus_model.learning.pool_prior; no evaluations: the learner
    starts them wide and explores them)."""
    for _ in range(5):  # the pool may be replaced between stat and read: retry until both see one version
        key = pool_key(home.pool_path)
        if key is None:
            raise StorageError(f"no pool at {home.pool_path}. How to fix: materialize model_embeddings (make demo)")
        pool = home.read_pool()
        if pool_key(home.pool_path) == key:
            break
    assert key is not None  # each pass above raised on a missing pool
    if len(pool) == 0:
        raise StorageError(f"the pool {home.pool_path} is empty. How to fix: materialize model_embeddings")
    checkpoint = home.pool_checkpoint(pool)
    try:  # the pipeline's own validator: a pool it would refuse to write is refused here too
        check_pool(pool, dim=checkpoint.model.config.d)
    except PoolError as err:
        raise StorageError(
            f"the pool {home.pool_path} is not valid: {err}. How to fix: rebuild it (materialize "
            "model_embeddings) or put back the last good pool file; a running locus serve keeps "
            "serving the pool it loaded last"
        ) from None
    pool_scorer = checkpoint.router.scorer(pool)
    names = list(pool_scorer.names)
    n_evaluations = [int(n) for n in pool["n_evaluations"]]
    sources = list(pool["source"].astype(str))
    routable = dict(zip(names, pool["routable"].astype(bool) | learning))
    # a name very close to a pool model's is a typo of it (the start-up warning says which), not a new model
    known = set(names)
    unevaluated = [
        n
        for n in (config.upstreams if learning and not portfolio else ())
        if n not in known and not difflib.get_close_matches(n, names, n=1, cutoff=TYPO_CUTOFF)
    ]
    if unevaluated:  # rows at the pool's prior: the mean embedding and group profile of the evaluated models
        emb, prof = pool_prior(pool_scorer.profiles, pool_scorer.embeddings, np.asarray(n_evaluations) > 0)
        pool_scorer = pool_scorer.extended(
            np.repeat(emb[None], len(unevaluated), 0).astype(pool_scorer.embeddings.dtype),
            np.repeat(prof[None], len(unevaluated), 0).astype(pool_scorer.profiles.dtype),
            tuple(unevaluated),
        )
        names += unevaluated
        n_evaluations += [0] * len(unevaluated)
        sources += ["unevaluated"] * len(unevaluated)
        routable.update(dict.fromkeys(unevaluated, True))
    catalog = home.read_table("model_catalog") if home.table_path("model_catalog").exists() else None
    portfolio_key = pool_key(home.table_path("portfolios")) if portfolio else None  # before it is read
    members = read_portfolio(home, portfolio) if portfolio else tuple(names)
    member_set, name_set = set(members), set(names)
    served = tuple(n for n in names if n in member_set and routable[n])  # pool order, as the whole pool is served
    if not served and not portfolio:
        raise StorageError(
            f"no model of the pool {home.pool_path} is routable (each has too few evaluations, the "
            "pool's `routable` column). How to fix: onboard models with more evaluations"
        )
    if not served:
        raise StorageError(
            f"--portfolio {portfolio}: none of its {len(members)} models is in the pool "
            f"{home.pool_path} (a pool rebuilt since?). How to fix: re-materialize the portfolios asset"
        )
    return Snapshot(
        key=key,
        checkpoint_id=checkpoint.checkpoint_id,
        encoder=checkpoint.encoder,
        runtime=resolve_runtime(checkpoint.encoder, runtime or checkpoint.runtime),
        pool_scorer=pool_scorer,
        names=tuple(names),
        sources=tuple(sources),
        costs=cost_table(names, cost_info(catalog, config.costs)),
        upstreams={n: u for n, u in config.upstreams.items() if n in name_set},
        output_tokens=config.output_tokens,
        loaded_at=time.time(),
        portfolio=portfolio,
        served=served,
        portfolio_missing=tuple(n for n in members if n not in name_set),
        portfolio_key=portfolio_key,
        held_back=tuple(n for n in names if not routable[n]),
        dry_run=dry_run,
        n_evaluations=tuple(n_evaluations),
    )


def watched_key(home: LocusHome, portfolio: str | None) -> WatchedKey | None:
    """What a reload watches: the pool file's key and, when a portfolio is served, the portfolios table's (a
    portfolios refresh after a rebuild changes the candidate set). None while there is no pool."""
    key = pool_key(home.pool_path)
    return None if key is None else (key, pool_key(home.table_path("portfolios")) if portfolio else None)
