"""The trained router: what training's last stage produces and every user of P(correct) reads.

One object (:class:`Router`): the set encoder and the correctness predictor (:class:`~locus_model.model.Locus`), the
query groups and the blend of the predictor with the group table (locus_model.query_groups), calibrated once (the
blend's logistic regression on the validation cells is the predictor's Platt scaling too). It is saved as one
checkpoint (``save``: the model's config and weights nanoGPT-style, the groups and the blend as plain data, read
back with ``weights_only=True`` by ``Router.load``).

A pool -- rows carrying each model's embedding and group profile, made by :meth:`Router.pool_rows` (one forward pass
of the set encoder and the profile in closed form; locus_model.pool.embed_models writes them as a table) -- turns it
into a :class:`PoolScorer` with one call, :meth:`Router.scorer`; the scorer's ``proba`` is the one scoring path of
the evaluation protocol, ``locus serve``, the reports and the MLflow pyfunc.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from locus_model.infer import EvaluationSet, embed_evaluation_sets, predict_proba
from locus_model.model import Locus, load_checkpoint, save_checkpoint
from locus_model.query_groups import (
    SMOOTHING,
    Blend,
    QueryGroups,
    fit_blend,
    fit_groups,
    group_proba,
    group_profiles,
    logit,
)

RETRAIN = "How to fix: retrain (make demo), which re-embeds the pool with the new checkpoint"


@dataclass(frozen=True)
class Router:
    """The trained router: P(correct) of (model, query) = the blend of the correctness predictor's logit (the model
    embedded by the set encoder) with the group table's (the model's group profile, the query's group membership).
    How queries are then routed (the guard, the quality weight, the caps) is a policy, not trained:
    locus_model.routing.policy."""

    model: Locus  # set encoder + correctness predictor, eval mode
    groups: QueryGroups
    blend: Blend
    noise: tuple[float, ...] | None = None  # (G,) P's measured error per query group (measure_noise); None: unmeasured

    def with_noise(self, encodings: np.ndarray, val_scores: np.ndarray, embeddings: np.ndarray, profiles: np.ndarray):
        """This router with its ``noise`` measured (measure_noise) on the validation cells ``val_scores`` (M, Q) of
        models with these pool rows (embeddings (M, d), profiles (M, G)); itself when no cell is given."""
        val_scores = np.asarray(val_scores, np.float32)
        val_q = np.flatnonzero(~np.isnan(val_scores).all(0))
        if len(val_q) == 0:
            return self
        enc = np.asarray(encodings, np.float32)[val_q]
        p = self.proba(embeddings, profiles, enc)
        noise = measure_noise(p, val_scores[:, val_q], self.groups.membership(enc))
        return replace(self, noise=tuple(float(x) for x in noise))

    def query_noise(self, encodings: np.ndarray) -> np.ndarray | None:
        """(Q,) the measured error of P on each query: its groups' ``noise`` by membership; None when unmeasured."""
        if self.noise is None:
            return None
        return self.groups.membership(encodings) @ np.asarray(self.noise, np.float64)

    def standing(self, profiles: np.ndarray) -> np.ndarray:
        """(M,) each model's accuracy on its own evaluations from its group profile (M, G): the profile weighted by
        the groups' shares of the training queries, so that models evaluated on different queries compare on one
        mix. The guard's reference is the model of highest standing."""
        return np.asarray(profiles, np.float64) @ self.groups.shares()

    def pool_rows(
        self, encodings: np.ndarray, scores: np.ndarray, labels: np.ndarray | None = None, *, device: str = "cpu"
    ) -> tuple[np.ndarray, np.ndarray]:
        """(embeddings (M, d), group profiles (M, G)) of models from their scores (M, Q), NaN = not evaluated, on
        queries with these encodings (Q, D) and benchmark labels (Q,) where known: what a pool row carries."""
        scores = np.asarray(scores, np.float32)
        sets = [(np.flatnonzero(~np.isnan(row)), row[~np.isnan(row)]) for row in scores]
        return self.embed(encodings, sets, device=device), self.profiles(encodings, scores, labels)

    def embed(self, encodings: np.ndarray, sets: Sequence[EvaluationSet], *, device: str = "cpu") -> np.ndarray:
        """(M, d) model embeddings of evaluation sets (query indices into encodings (Q, D), scores): one forward
        pass."""
        return embed_evaluation_sets(self.model, encodings, sets, device=device)

    def profiles(self, encodings: np.ndarray, scores: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
        """(M, G) group profiles of models from their scores (M, Q) on queries with these encodings (Q, D) and
        labels (Q,) where known: the one place a profile is computed."""
        return group_profiles(self.groups, encodings, scores, labels)

    def proba(
        self, embeddings: np.ndarray, profiles: np.ndarray, encodings: np.ndarray, *, device: str = "cpu"
    ) -> np.ndarray:
        """(M, Q) P(correct) of models (embeddings (M, d), profiles (M, G)) on queries (encodings (Q, D))."""
        logits = _predictor_logits(self.model, embeddings, encodings, device)
        return self.blend.proba(logits, group_proba(profiles, self.groups.membership(encodings)))

    def scorer(self, pool: pd.DataFrame | tuple[np.ndarray, np.ndarray], *, device: str = "cpu") -> "PoolScorer":
        """The scorer of a pool: a pool table (columns model, embedding, group_profile: locus_model.pool) or the
        (embeddings, profiles) of :meth:`pool_rows`."""
        if isinstance(pool, pd.DataFrame):
            names = tuple(pool["model"].astype(str))
            embeddings = (
                np.stack(pool["embedding"].to_numpy()).astype(np.float32)
                if len(pool)
                else np.zeros((0, self.model.config.d), np.float32)
            )
            profiles = _pool_profiles(pool, len(self.groups.names))
        else:
            embeddings, profiles = (np.asarray(a, np.float32) for a in pool)
            names = tuple(str(i) for i in range(len(embeddings)))
        return PoolScorer(self, names, embeddings, profiles, device)

    def describe(self) -> str:
        """The groups and the blend, in words (the run's metadata, `locus evaluate`)."""
        kind = "the data's benchmarks" if self.groups.labelled else "k-means clusters of the query encodings"
        return (
            f"{len(self.groups.names)} query groups ({kind}), profiles shrunk toward each model's accuracy by "
            f"{self.groups.smoothing:.1f} pseudo-answers; {self.blend.describe()}"
        )

    def to_dict(self) -> dict:
        """The groups and the blend as plain data (the model's weights are saved beside them)."""
        noise = {} if self.noise is None else {"noise": list(self.noise)}
        return {"groups": self.groups.to_dict(), "blend": self.blend.to_dict(), **noise}

    def save(self, path: str | Path, **extra: Any) -> None:
        """One checkpoint: the model's config and weights, ``router`` (to_dict) and extra plain data."""
        save_checkpoint(path, self.model, router=self.to_dict(), **extra)

    @classmethod
    def load(cls, path: str | Path, map_location: str | torch.device = "cpu") -> tuple["Router", dict]:
        """(the router, the checkpoint's other entries) of a checkpoint written by :meth:`save`."""
        model, extra = load_checkpoint(path, map_location)
        return cls.from_checkpoint(model, extra, where=str(path)), {k: v for k, v in extra.items() if k != "router"}

    @classmethod
    def from_checkpoint(cls, model: Locus, extra: dict, *, where: str = "the checkpoint") -> "Router":
        """The router of a loaded checkpoint (load_checkpoint's model and extra dict)."""
        if not extra.get("router"):
            raise ValueError(
                f"{where} has no router (query groups and blend): it predates the trained router. {RETRAIN}."
            )
        d = extra["router"]  # a "guard_margin" saved by older checkpoints is a policy, not trained: left unread
        noise = None if d.get("noise") is None else tuple(float(x) for x in d["noise"])  # older checkpoints: none
        return cls(model=model, groups=QueryGroups.from_dict(d["groups"]), blend=Blend(**d["blend"]), noise=noise)


@dataclass(frozen=True)
class PoolScorer:
    """A router with a pool's rows: P(correct) of the pool's models on any queries."""

    router: Router
    names: tuple[str, ...]  # (M,)
    embeddings: np.ndarray  # (M, d)
    profiles: np.ndarray  # (M, G)
    device: str = "cpu"

    def proba(self, encodings: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """(M, Q) P(correct) of the pool's models (or of ``rows`` of them) on queries with encodings (Q, D)."""
        z, g = (self.embeddings, self.profiles) if rows is None else (self.embeddings[rows], self.profiles[rows])
        return self.router.proba(z, g, encodings, device=self.device)

    @cached_property
    def standing(self) -> np.ndarray:
        """(M,) the pool's models' standing (Router.standing), computed once per scorer: a request indexes it."""
        return self.router.standing(self.profiles)

    def extended(self, embeddings: np.ndarray, profiles: np.ndarray, names: Sequence[str] = ()) -> "PoolScorer":
        """This scorer with more models' rows after its own (an onboarding)."""
        names = tuple(names) or tuple(str(i) for i in range(len(self.names), len(self.names) + len(embeddings)))
        return PoolScorer(
            self.router,
            self.names + names,
            np.concatenate([self.embeddings, embeddings]),
            np.concatenate([self.profiles, profiles]),
            self.device,
        )


def _predictor_logits(model: Locus, embeddings: np.ndarray, encodings: np.ndarray, device: str) -> np.ndarray:
    """(M, Q) the correctness predictor's logits (the checkpoint's stored temperature and bias applied: identity
    since the router's blend calibrates; checkpoints from before keep theirs)."""
    return logit(predict_proba(model, embeddings, encodings, device=device))


def _pool_profiles(pool: pd.DataFrame, n_groups: int) -> np.ndarray:
    rows = pool["group_profile"].to_numpy() if "group_profile" in pool.columns else None
    if rows is None or any(len(r) != n_groups for r in rows):
        raise ValueError(
            f"the pool's rows carry no group profile of the router's {n_groups} groups (a pool embedded "
            f"by an older checkpoint). How to fix: re-embed the pool with this checkpoint (make demo)"
        )
    return np.stack(rows).astype(np.float32) if len(rows) else np.zeros((0, n_groups), np.float32)


def fit_router(
    model: Locus,
    encodings: np.ndarray,
    train_scores: np.ndarray,
    val_scores: np.ndarray,
    benchmarks: np.ndarray | None = None,
    *,
    smoothing: float = SMOOTHING,
    device: str = "cpu",
) -> tuple[Router, np.ndarray]:
    """The router of a trained LOCUS (training's last stage) and the in-training models' embeddings (M, d): the query
    groups (query_groups.fit_groups; their profiles' pseudo-count ``smoothing``), each model embedded from its train
    cells (one forward pass) and profiled on them, the blend fitted on the validation cells (the predictor alone
    when there are none)."""
    encodings = np.asarray(encodings, np.float32)
    train_scores, val_scores = np.asarray(train_scores, np.float32), np.asarray(val_scores, np.float32)
    labels = None if benchmarks is None else np.asarray(["" if b is None else str(b) for b in benchmarks])
    router = Router(
        model=model, groups=fit_groups(encodings, train_scores, val_scores, labels, smoothing=smoothing), blend=Blend()
    )
    embeddings, profiles = router.pool_rows(encodings, train_scores, labels, device=device)
    val_q = np.flatnonzero(~np.isnan(val_scores).all(0))
    if len(val_q) == 0:
        return router, embeddings
    val_enc = encodings[val_q]
    blend = fit_blend(
        _predictor_logits(model, embeddings, val_enc, device),
        group_proba(profiles, router.groups.membership(val_enc)),
        val_scores[:, val_q],
    )
    fitted = Router(model=model, groups=router.groups, blend=blend)
    return fitted.with_noise(encodings, val_scores, embeddings, profiles), embeddings


def measure_noise(probs: np.ndarray, labels: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """(G,) how far P(correct) is from what the answers say, per query group: the root mean square over models of a
    model's mean error (label - P) on the group's cells, the cells weighted by their queries' membership (Q, G).
    ``probs``, ``labels``: (M, Q) on validation queries, NaN = no cell. What the validation answers cannot tell
    apart from zero counts in: a group seen on few cells is known less well, and measures larger. A group without a
    cell takes the mean over the others (every group 0 when none has one)."""
    p, y = np.asarray(probs, np.float64), np.asarray(labels, np.float64)
    seen = ~np.isnan(y)
    r = np.where(seen, y - p, 0.0)  # (M, Q)
    w = np.asarray(membership, np.float64)  # (Q, G)
    weight = seen.astype(np.float64) @ w  # (M, G) the cells' membership weight
    with np.errstate(invalid="ignore", divide="ignore"):
        bias = (r @ w) / weight  # (M, G) each model's mean error on each group
    has = weight > 0
    count = has.sum(axis=0)
    noise = np.full(w.shape[1], np.nan)
    ok = count > 0
    noise[ok] = np.sqrt(np.where(has, bias**2, 0.0).sum(axis=0)[ok] / count[ok])
    return np.where(ok, noise, np.nanmean(noise) if ok.any() else 0.0)


__all__ = ["PoolScorer", "RETRAIN", "Router", "fit_router", "measure_noise"]
