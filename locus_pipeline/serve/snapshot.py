"""The pool being served: one immutable :class:`Snapshot` (pool, checkpoint, costs, upstreams), swapped whole on a
reload; :func:`pool_key` tells when the pool file changed. Storage goes through LocusHome only."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from locus_model.routing import CostTable, cost_table
from locus_pipeline.serve.config import ModelsConfig, Upstream
from locus_pipeline.storage import LocusHome, StorageError

def pool_key(path: Path) -> tuple[int, int, int] | None:
    """(mtime_ns, size, inode) of the pool file, None when it is missing: an atomic rewrite changes the inode."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass(frozen=True)
class Snapshot:
    """One pool with its checkpoint and costs; immutable, swapped whole on a reload."""

    key: tuple[int, int, int]
    checkpoint_id: str
    encoder: str
    runtime: str  # the encoder runtime (locus_model.data.encoding.RUNTIMES)
    model: Any  # locus_model.model.Locus (eval mode; only read)
    names: tuple[str, ...]
    sources: tuple[str, ...]
    embeddings: np.ndarray  # (M, d)
    costs: CostTable
    upstreams: Mapping[str, Upstream]  # pool models with an upstream
    output_tokens: int
    loaded_at: float

    @property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    @property
    def dry_run(self) -> bool:
        return not self.upstreams


def load_snapshot(home: LocusHome, config: ModelsConfig, runtime: str | None = None) -> Snapshot:
    """The pool as it is now, with the checkpoint it was embedded with; parameter counts from the model catalog
    when it exists, costs and upstreams from the models config. ``runtime``: the encoder runtime (None: the
    checkpoint's)."""
    from locus_model.data.encoding import resolve_runtime
    from locus_model.pool import pool_matrix

    for _ in range(5):  # the pool may be replaced between stat and read: retry until both see one version
        key = pool_key(home.pool_path)
        if key is None:
            raise StorageError(f"no pool at {home.pool_path}. How to fix: materialize model_embeddings (make demo)")
        pool = home.read_pool()
        if pool_key(home.pool_path) == key:
            break
    if len(pool) == 0:
        raise StorageError(f"the pool {home.pool_path} is empty. How to fix: materialize model_embeddings")
    checkpoint = home.pool_checkpoint(pool)
    names, z = pool_matrix(pool)
    info: dict[str, dict] = {}
    if home.table_path("model_catalog").exists():
        catalog = home.read_table("model_catalog", columns=["model", "params_b"])
        info = {str(m): {"params_b": p} for m, p in zip(catalog["model"], catalog["params_b"])}
    for name, costs in config.costs.items():
        info.setdefault(name, {}).update(costs)
    return Snapshot(key=key, checkpoint_id=checkpoint.checkpoint_id, encoder=checkpoint.encoder,
                    runtime=resolve_runtime(checkpoint.encoder, runtime or checkpoint.runtime), model=checkpoint.model,
                    names=tuple(names), sources=tuple(pool["source"].astype(str)), embeddings=z,
                    costs=cost_table(names, info),
                    upstreams={n: u for n, u in config.upstreams.items() if n in set(names)},
                    output_tokens=config.output_tokens, loaded_at=time.time())

