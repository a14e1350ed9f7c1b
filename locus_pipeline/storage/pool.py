"""The pool (``warehouse/model_embeddings.parquet``) and the onboarded models' evaluation stores
(``onboarded/<model_key>.parquet``, a removed model's set aside under ``onboarded/removed/``; its capability
estimates in ``onboarded/estimates/``): their read-modify-writes, each under its lock."""

from __future__ import annotations

import difflib
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from locus_model.data.contract import EVALUATION_COLUMNS, safe_model_key
from locus_model.pool_schema import routable
from locus_pipeline.storage.checkpoints import PoolCheckpoint
from locus_pipeline.storage.files import StorageError, read_parquet, write_parquet_atomic

POOL = "model_embeddings"


class PoolAndStores:
    """The pool and store half of LocusHome (a mixin: it uses the home's paths, tables, locks and checkpoints)."""

    if TYPE_CHECKING:  # the home's, which LocusHome gives its mixins

        @property
        def path(self) -> Any: ...
        def relative(self, path: Any) -> str: ...
        def table_path(self, name: str, partition: str | None = None) -> Any: ...
        def read_table(
            self, name: str, *, partition: str | None = None, columns: list[str] | None = None
        ) -> pd.DataFrame: ...
        def lock(self, name: str, *, blocking: bool = True) -> AbstractContextManager[bool]: ...
        def load_checkpoint(self, checkpoint_id: str) -> PoolCheckpoint: ...

    # ------------------------------------------------------------------ the pool

    @property
    def pool_path(self) -> Any:
        return self.table_path(POOL)

    def has_pool(self) -> bool:
        return self.pool_path.exists()

    def read_pool(self) -> pd.DataFrame:
        pool = self.read_table(POOL)
        if "routable" not in pool.columns:  # a pool written before the column: the same rule, from its rows
            pool = pool.assign(routable=routable(pool["source"], pool["n_evaluations"]))
        if "group_profile" not in pool.columns:  # a pool embedded before the router: its checkpoint has none either
            pool = pool.assign(group_profile=[np.zeros(0, np.float32)] * len(pool))
        return pool

    def pool_checkpoint(self, pool: pd.DataFrame | None = None) -> PoolCheckpoint:
        """The checkpoint the pool was embedded with (every row carries its id; one id per pool)."""
        # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
        from locus_model.pool import checkpoints_of

        pool = self.read_table(POOL, columns=["checkpoint_id"]) if pool is None else pool
        ids = checkpoints_of(pool)
        if len(ids) != 1:
            raise StorageError(
                f"the pool {self.pool_path} holds checkpoints {ids}, not one. How to fix: materialize "
                "model_embeddings (it re-embeds every model with the current checkpoint)"
            )
        return self.load_checkpoint(ids[0])

    def update_pool(self, change: Callable[[pd.DataFrame | None], pd.DataFrame]) -> pd.DataFrame:
        """The pool's one read-modify-write: under the pool lock, ``change(current pool or None)`` returns the
        new pool, which is checked (one checkpoint, unique models and keys) and written atomically. Whatever
        ``change`` reads (stores, checkpoint) it reads under the same lock, so no update is lost."""
        # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
        from locus_model.pool import check_pool

        with self.lock("pool"):
            current = self.read_pool() if self.has_pool() else None
            new = change(current)
            check_pool(new)
            write_parquet_atomic(new, self.pool_path)
        return new

    def remove_onboarded(self, name: str) -> tuple[pd.DataFrame, str]:
        """Remove onboarded model ``name`` from the pool: (the new pool, where its store was set aside). Under
        the pool lock (then the model's), its row leaves the pool and its store moves to
        ``onboarded/removed/<model_key>.<UTC time>.parquet``, so a rebuild does not embed it again; its evaluations
        stay there and in the drop folder's accepted/ history. A model of the training source cannot be removed (a
        rebuild embeds it from the evaluation table)."""
        kept: list[str] = []

        def change(current: pd.DataFrame | None) -> pd.DataFrame:
            rows = current[current["model"].astype(str) == name] if current is not None else pd.DataFrame()
            if current is None or rows.empty:
                near = (
                    difflib.get_close_matches(name, current["model"].astype(str).tolist(), n=3)
                    if current is not None
                    else []
                )
                raise StorageError(
                    f"model {name!r} is not in the pool {self.pool_path}"
                    + (f" (nearest names: {near})" if near else "")
                    + ". How to fix: give the name exactly as the pool's `model` column (or GET /v1/models) has it"
                )
            source, key = str(rows["source"].iloc[0]), str(rows["model_key"].iloc[0])
            if source != "onboarded":
                raise StorageError(
                    f"model {name!r} is a model of the training source ({source}), not an onboarded one: "
                    "a rebuild embeds it from the evaluation table. How to fix: leave it out of the "
                    "raw evaluations and rebuild (locus_job), or leave it out of routing with "
                    "`locus serve --portfolio` / request candidates"
                )
            with self.lock(f"model-{key}"):
                store = self.store_path(key)
                if store.exists():
                    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
                    target = self.path / "onboarded" / "removed" / f"{key}.{stamp}.parquet"
                    write_parquet_atomic(self.read_store(key), target)
                    store.unlink()
                    kept.append(self.relative(target))
                # derived from its evaluations (kept above): the atlas must not show a removed model's estimates
                self.estimates_path(key).unlink(missing_ok=True)
            return current[current["model"].astype(str) != name].reset_index(drop=True)

        pool = self.update_pool(change)
        return pool, (kept[0] if kept else "")

    # ------------------------------------------------------------------ onboarded models: their evaluation stores

    def store_path(self, model_key: str) -> Any:
        return self.path / "onboarded" / f"{model_key}.parquet"

    def read_store(self, model_key: str) -> pd.DataFrame:
        return read_parquet(
            self.store_path(model_key),
            what=f"the evaluations of onboarded model {model_key!r}",
            fix="drop an evaluation file for the model into incoming/",
        )

    def record_evaluations(self, model_key: str, fresh: pd.DataFrame) -> pd.DataFrame:
        """Merge a model's new evaluations into its store under the model's lock (newest ``received_at`` wins
        per query_id); returns all of its evaluations so far."""
        # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
        from locus_model.onboarding import merge_into_store

        path = self.store_path(model_key)
        with self.lock(f"model-{model_key}"):
            merged = merge_into_store(self.read_store(model_key) if path.exists() else None, fresh)
            write_parquet_atomic(merged, path)
        return merged

    def onboarded_keys(self) -> list[str]:
        folder = self.path / "onboarded"
        return sorted(p.name[: -len(".parquet")] for p in folder.glob("*.parquet")) if folder.exists() else []

    def onboarded_evaluations(self) -> pd.DataFrame:
        """All evaluations of all onboarded models (an empty frame when none was onboarded)."""
        frames = [self.read_store(k) for k in self.onboarded_keys()]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(EVALUATION_COLUMNS))

    def estimates_path(self, model_key: str) -> Any:
        return self.path / "onboarded" / "estimates" / f"{model_key}.parquet"

    def write_capability_estimates(self, model_key: str, frame: pd.DataFrame) -> Any:
        """An onboarded model's capability estimates (model, checkpoint_id, benchmark, estimate, lo, hi, observed,
        n), written whole under the model's lock by its onboarding: what the atlas shows for it."""
        path = self.estimates_path(model_key)
        with self.lock(f"model-{model_key}"):
            write_parquet_atomic(frame, path)
        return path

    def capability_estimates(self) -> pd.DataFrame:
        """Every onboarded model's stored capability estimates, one frame (empty when none was stored)."""
        folder = self.estimates_path("-").parent
        frames = (
            [
                read_parquet(p, what="an onboarded model's capability estimates", fix="onboard the model again")
                for p in sorted(folder.glob("*.parquet"))
            ]
            if folder.exists()
            else []
        )
        return (
            pd.concat(frames, ignore_index=True)
            if frames
            else pd.DataFrame(columns=["model", "checkpoint_id", "benchmark", "estimate", "lo", "hi", "observed", "n"])
        )

    def training_models(self) -> set[str]:
        """Models of the training source (the evaluation table); an error, never an empty set, when it is missing."""
        return set(self.read_table("evaluation_table", columns=["model"])["model"].astype(str).unique())

    def model_identities(self) -> dict[str, str]:
        """model_key -> model name for every model the home knows (training source, pool, onboarded stores)."""
        known: dict[str, str] = {}

        if self.table_path("evaluation_table").exists():
            known.update({safe_model_key(m): m for m in self.training_models()})
        if self.has_pool():
            pool = self.read_table(POOL, columns=["model", "model_key"])
            known.update(zip(pool["model_key"].astype(str), pool["model"].astype(str)))
        for key in self.onboarded_keys():
            names = read_parquet(self.store_path(key), what="an onboarded store", fix="-", columns=["model"])["model"]
            if len(names):
                known[key] = str(names.iloc[0])
        return known
