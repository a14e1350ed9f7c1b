"""The model embedding pool: one table of model embeddings, all from one checkpoint.

The table's schema is ``POOL_SCHEMA`` in locus_model.pool_schema (column, Arrow type as written to Parquet,
meaning), the one source of the pool's columns.

A pool embedding is computed from all of the model's evaluations outside the test queries (the
test queries stay unseen so that routing accuracy on them is honest). Rows from different checkpoints are
never mixed: a new checkpoint re-embeds the whole pool, and an upsert with another checkpoint is refused.
Every embedding is computed by one forward pass of the checkpoint, so re-embedding the same evaluations
reproduces a row up to float32 rounding (``REPRODUCTION_TOLERANCE``): bit for bit in one process, within a few
units in the last place in another process or at another thread count, where the sums run in another order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from locus_model.data.contract import safe_model_key
from locus_model.data.matrix import evaluations_digests
from locus_model.data.query_encodings import encoding_matrix, query_rows
from locus_model.pool_schema import POOL_COLUMNS, routable
from locus_model.router import Router


def embed_models(
    router: Router,
    table: pd.DataFrame,  # long table: model, query_id, score (the evaluations to embed from)
    encodings: pd.DataFrame,  # query encodings: columns query_id, encoding (list of floats)
    *,
    checkpoint: str,
    source: str,
    device: str = "cpu",
) -> pd.DataFrame:
    """Pool rows for every model in ``table``: its model embedding (one forward pass of the router's set encoder, no
    training) and its group profile (closed form from the same evaluations and their benchmark labels)."""
    phi = encoding_matrix(encodings)
    models = sorted(table["model"].astype(str).unique())
    digests = evaluations_digests(table)
    sets, prints, counts = [], [], []
    for name, rows in table.groupby(table["model"].astype(str), sort=True):
        idx = query_rows(encodings, rows["query_id"], what=f"model {name!r}: ")
        sets.append((idx, rows["score"].to_numpy(np.float32)))
        prints.append(digests[name])
        counts.append(len(rows))
    # a set's embedding does not depend on the other sets of its batch (embed_evaluation_sets pads by the set's
    # own length), so re-embedding any subset of the pool reproduces its rows bit for bit
    z = router.embed(phi, sets, device=device)  # (M, d)
    profiles = list(group_profiles_of(router, table, encodings, phi))
    now = pd.Timestamp.now(tz="UTC")
    return pd.DataFrame(
        {
            "model": models,
            "model_key": [safe_model_key(m) for m in models],
            "embedding": list(z.astype(np.float32)),
            "group_profile": profiles,
            "n_evaluations": np.asarray(counts, dtype=np.int64),
            "evaluations_digest": prints,
            "checkpoint_id": checkpoint,
            "source": source,
            "embedded_at": now,
            "routable": routable([source] * len(models), counts),
        }
    )


def group_profiles_of(router: Router, table: pd.DataFrame, encodings: pd.DataFrame, phi: np.ndarray) -> np.ndarray:
    """(M, G) float32 group profiles of the models of a long table (sorted by name, as embed_models' rows), from
    their scores and the queries' benchmark labels (Router.profiles)."""
    q = query_rows(encodings, table["query_id"], what="group profiles: ")
    names, m = np.unique(table["model"].astype(str).to_numpy(), return_inverse=True)
    used, cols = np.unique(q, return_inverse=True)
    scores = np.full((len(names), len(used)), np.nan, np.float32)
    scores[m, cols] = table["score"].to_numpy(np.float32)
    labels = None
    if "benchmark" in table.columns:
        labels = np.empty(len(used), object)
        labels[cols] = table["benchmark"].astype(str).to_numpy()
    return router.profiles(phi[used], scores, labels).astype(np.float32)


def pool_matrix(pool: pd.DataFrame) -> tuple[list[str], np.ndarray]:
    """(names, (M, d) float32 embeddings) of a pool table."""
    return pool["model"].astype(str).tolist(), np.stack(pool["embedding"].to_numpy()).astype(np.float32)


def checkpoints_of(table: pd.DataFrame) -> list[str]:
    """The checkpoints a pool table's rows were embedded with (sorted; one for a valid non-empty pool)."""
    return sorted(set(table["checkpoint_id"].astype(str)))


class PoolError(ValueError):
    """A pool table that breaks its invariants (one checkpoint, one row per model and per key)."""


def check_pool(pool: pd.DataFrame, dim: int | None = None) -> None:
    """Raise PoolError unless every row comes from one checkpoint, models and model keys are unique and every
    embedding is a finite vector of one width (``dim``, the checkpoint's d, when given)."""
    missing = [c for c in POOL_COLUMNS if c not in pool.columns]
    if missing:
        raise PoolError(f"the pool table lacks the columns {missing}")
    ids = checkpoints_of(pool)
    if len(ids) > 1:
        raise PoolError(
            f"the pool mixes checkpoints {ids}: embeddings of different checkpoints live in different spaces"
        )
    for column in ("model", "model_key"):
        dup = pool[pool[column].duplicated(keep=False)]
        if len(dup):
            raise PoolError(
                f"{column} {dup[column].iloc[0]!r} appears twice in the pool "
                f"(models {sorted(dup['model'].astype(str))[:4]})"
            )
    if len(pool) == 0:
        return
    shapes = [np.shape(e) for e in pool["embedding"]]
    want = (dim,) if dim is not None else shapes[0]
    wrong = [i for i, shape in enumerate(shapes) if shape != want or len(shape) != 1]
    if wrong:
        raise PoolError(
            f"model {pool['model'].iloc[wrong[0]]!r}'s embedding has shape {shapes[wrong[0]]}, not {want} "
            f"({len(wrong)} of {len(pool)} rows)"
        )
    finite = np.isfinite(np.stack(pool["embedding"].to_numpy()).astype(np.float64)).all(axis=1)
    if not finite.all():
        raise PoolError(
            f"model {pool['model'].iloc[int(np.argmin(finite))]!r}'s embedding is not finite (NaN or inf; "
            f"{int((~finite).sum())} of {len(pool)} rows)"
        )


def upsert_rows(pool: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """``pool`` with ``rows`` inserted or replaced (by model); every other row unchanged, in its place.

    Refused when the rows come from another checkpoint than the pool's."""
    ours, theirs = checkpoints_of(rows), checkpoints_of(pool)
    if theirs and ours != theirs:
        raise PoolError(f"rows from checkpoint {sorted(ours)} cannot join a pool embedded with {sorted(theirs)}")
    kept = pool[~pool["model"].isin(rows["model"])]
    return pd.concat([kept, rows[list(POOL_COLUMNS)]], ignore_index=True)


# ----------------------------------------------------------------------------- reproducibility at a bounded cost


def models_with_new_evaluations(previous: pd.DataFrame | None, pool: pd.DataFrame) -> list[str]:
    """Models of ``pool`` whose evaluations are new to it (sorted): not in ``previous`` (None: no pool before), or
    with another evaluations digest than their previous row. A rebuild's other rows re-embed evaluations the pool
    already held."""
    before = {} if previous is None else dict(zip(previous["model"].astype(str), previous["evaluations_digest"]))
    return sorted(m for m, f in zip(pool["model"].astype(str), pool["evaluations_digest"]) if before.get(m) != f)


@dataclass(frozen=True)
class ReproductionSample:
    """The pool rows a reproducibility check re-embeds: the rows with new evaluations (at most ``max_changed``,
    a seeded sample beyond that) and a seeded sample of at most ``sample`` of the other rows."""

    models: list[str]  # the rows to re-embed, in pool order
    rows: int  # rows in the pool
    changed: int  # rows with new evaluations
    changed_checked: int
    others_checked: int

    @property
    def share_of_rebuild(self) -> float:
        """Rows re-embedded / rows a rebuild embeds: the check's cost beside the rebuild's."""
        return len(self.models) / self.rows if self.rows else 0.0


def reproduction_sample(
    pool: pd.DataFrame, changed: Sequence[str], *, sample: int = 32, max_changed: int = 256, seed: int = 0
) -> ReproductionSample:
    """Which rows to re-embed so that a check costs at most ``sample + max_changed`` rows whatever the pool's
    size: every row in ``changed`` (a seeded sample of ``max_changed`` of them if there are more) and a seeded
    sample of ``sample`` other rows (numpy default_rng(seed) over the sorted model names)."""
    names = pool["model"].astype(str).tolist()
    changed_set = set(map(str, changed)) & set(names)
    rng = np.random.default_rng(seed)

    def draw(candidates: list[str], k: int) -> list[str]:
        candidates = sorted(candidates)
        return (
            candidates
            if len(candidates) <= k
            else [candidates[i] for i in rng.choice(len(candidates), size=k, replace=False)]
        )

    picked_changed = draw(list(changed_set), max(0, max_changed))
    picked_others = draw([n for n in names if n not in changed_set], max(0, sample))
    chosen = set(picked_changed) | set(picked_others)
    return ReproductionSample(
        models=[n for n in names if n in chosen],
        rows=len(names),
        changed=len(changed_set),
        changed_checked=len(picked_changed),
        others_checked=len(picked_others),
    )


# why: float32 keeps ~7 significant digits and a forward pass in another process or at another thread count sums
# in another order (BLAS kernels, intra-op threads): rows of one model differ by up to a few 1e-7 (3.6e-7 measured
# between two processes). 1e-5 (absolute, plus 1e-5 of the value) is ~100 ulps at the embeddings' scale, far above
# that noise and far below what a changed evaluation or a corrupted row moves (>= 1e-3).
REPRODUCTION_TOLERANCE = 1e-5


@dataclass(frozen=True)
class Reproduction:
    """Stored pool rows against the same rows embedded again."""

    models_checked: int
    differing: list[str]  # models whose two embeddings differ by more than the tolerance
    max_abs_diff: float  # over every checked row and coordinate
    not_bit_identical: int = 0  # rows that differ in any bit (float noise included)
    tolerance: float = REPRODUCTION_TOLERANCE


def compare_embeddings(
    stored: pd.DataFrame, again: pd.DataFrame, *, tolerance: float = REPRODUCTION_TOLERANCE
) -> Reproduction:
    """Each row of ``again`` (pool rows embedded again) against the row of the same model in ``stored``: a row
    differs when any coordinate is off by more than ``tolerance * (1 + |stored value|)``."""
    if not len(again):
        return Reproduction(0, [], 0.0, 0, tolerance)
    names = again["model"].astype(str).tolist()
    _, b = pool_matrix(again)
    a = pool_matrix(stored.set_index(stored["model"].astype(str)).loc[names].reset_index(drop=True))[1]
    gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
    differ = (gap > tolerance * (1.0 + np.abs(a))).any(axis=1)
    return Reproduction(
        len(names),
        [n for n, d in zip(names, differ) if d],
        float(gap.max()),
        int((a != b).any(axis=1).sum()),
        tolerance,
    )
