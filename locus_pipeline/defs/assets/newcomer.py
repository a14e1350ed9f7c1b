"""One onboarded model as the pool holds it (the body of ``onboarded_model_embedding`` for one partition): its
row, its five nearest models, its per-benchmark profile beside theirs, its estimates and its two checks' results.
What every model of a run shares (the pool, the training evaluations, the per-benchmark accuracies, the pool's
checkpoint, the training source as the estimates place a model against it, with its low-rank prior) is read once
per run (:class:`PoolView`), not once per model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import dagster as dg
import pandas as pd

from locus_model.data.query_encodings import encoding_matrix
from locus_model.markdown import escape_frame, escape_markdown
from locus_model.pool_schema import MIN_ROUTABLE_EVALUATIONS
from locus_pipeline.defs.metadata import atlas_link
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome
from locus_pipeline.tracking import log_onboarding_estimates

if TYPE_CHECKING:
    from locus_pipeline.newcomers import NewcomerSource

TRUST_CHECK = "onboarded_model_trustworthy"
PRECISION_CHECK = "onboarded_estimates_precise"
MISSING = "—"  # a cell with no figure (a neighbour never evaluated on that benchmark), never "nan"
NEIGHBOURS = 5
STABILITY_DRAWS = 20  # bootstrap resamples of an onboarded model's evaluations for its neighbours' stability


@dataclass
class PoolView:
    """What the models of one run are compared with, read once: the pool as the run's pool step left it."""

    home: LocusHome

    @cached_property
    def pool(self) -> pd.DataFrame:
        return self.home.read_pool()

    @cached_property
    def training(self) -> pd.DataFrame:
        return self.home.read_table("evaluation_table", columns=["model", "query_id", "benchmark", "score"])

    @cached_property
    def accuracy(self) -> pd.DataFrame:
        from locus_pipeline.reports import per_benchmark_accuracy  # why: reports imports torch (seconds): not at load

        return per_benchmark_accuracy(self.training, self.home.onboarded_evaluations())

    @cached_property
    def checkpoint(self):
        return self.home.pool_checkpoint(self.pool)

    @cached_property
    def query_encodings(self) -> pd.DataFrame:
        return self.home.read_table("query_encodings")

    @cached_property
    def query_matrix(self):
        return encoding_matrix(self.query_encodings)

    @cached_property
    def newcomer_source(self) -> NewcomerSource:
        """The training source every onboarded model of the run is placed against (its table, its prior: fitted
        once for the run)."""
        from locus_pipeline.newcomers import NewcomerSource  # why: it imports torch (seconds): not at load

        return NewcomerSource(self.training, self.query_encodings, router=self.checkpoint.router)

    @cached_property
    def budget(self) -> int:
        return int(self.home.read_table("training_split", columns=["anchor"])["anchor"].sum())


@dataclass
class Newcomer:
    """One model's results: its nearest models (the asset's table), its materialization's metadata, its checks."""

    neighbours: pd.DataFrame
    metadata: dict
    checks: list[dg.AssetCheckEvaluation]


def newcomer(
    log, run_id: str, home: LocusHome, mlflow: MlflowTracking, view: PoolView, key: str, asset: dg.AssetKey
) -> Newcomer:
    """Model ``key`` as the pool holds it: its row, its five nearest models (Euclidean distance between model
    embeddings), its per-benchmark profile beside theirs; for an onboarded model, its neighbours' stability, its
    estimates (stored for the atlas, logged to an MLflow run linked to Dagster run ``run_id``) and the warnings of
    :func:`trust_warnings`. A model of the training source keeps its training embedding (its new evaluations are
    only recorded in its store)."""
    # why: both import torch (seconds): loaded by a run, not when the code location loads
    from locus_model.onboarding import benchmark_profile, nearest_models, neighbour_stability
    from locus_pipeline.newcomers import WIDE_INTERVAL, estimates_markdown, newcomer_estimates

    pool = view.pool
    rows = pool[pool["model_key"] == key]
    if rows.empty:
        raise dg.Failure(
            description=f"no model with key {key!r} is in the pool",
            metadata={"how_to_fix": "run the whole onboarding_job for this partition (it embeds the model first)"},
        )
    row = rows.iloc[0]
    name = str(row["model"])
    neighbours = nearest_models(pool, name, NEIGHBOURS)
    stability: dict[str, object] = {}  # metadata: the neighbours under resampling
    n_rows: dict = {}  # benchmark -> the store's evaluations there
    warnings: list[str] = []
    trust: dict = {}  # the trust check's figures beside their thresholds
    estimated: dict[str, object] = {}  # metadata: the capability estimates
    precision: dict[str, float | str] | None = None  # the precision check's metadata
    vague = ""
    if str(row["source"]) == "onboarded":  # its evaluations are its store: how much can they say?
        store = home.read_store(key)
        n_rows = store.groupby("benchmark")["score"].size().to_dict()
        checkpoint = view.checkpoint
        encodings, _ = home.encode(store, checkpoint.encoder)  # cached: the onboarding run encoded them
        result = neighbour_stability(
            checkpoint.model, store, encodings, pool, name, k=NEIGHBOURS, draws=STABILITY_DRAWS
        )
        nearest = str(neighbours["model"].iloc[0]) if len(neighbours) else ""
        stability = {
            "nearest_model_stability": round(result.share_top1(nearest), 3),
            "neighbours_under_resampling": dg.MetadataValue.md(result.to_markdown(nearest)),
        }
        warnings, trust = trust_warnings(view, store, encodings, int(row["n_evaluations"]))
        estimates = newcomer_estimates(store, encodings, view.newcomer_source, pool)
        capability, like = estimates_markdown(estimates)
        cap = estimates.capability
        width = cap["hi"] - cap["lo"]
        wide = cap[width > WIDE_INTERVAL]
        if len(wide):
            vague = (
                f"the estimate of {len(wide)} benchmark(s) spans over {WIDE_INTERVAL:.0%} (widest: "
                f"{wide['benchmark'].iloc[int(width[wide.index].argmax())]}, {width.max():.0%}): "
                "its answers there are too few to place it; ask it more questions"
            )
            log.warning(f"{name}: {vague}")
        precision = {
            "widest_interval": round(float(width.max()), 3),
            "threshold_interval": WIDE_INTERVAL,
            "wide_benchmarks": ", ".join(wide["benchmark"].astype(str)) or "none",
        }
        home.write_capability_estimates(key, cap.assign(model=name, checkpoint_id=str(row["checkpoint_id"])))
        experiment, mlflow_run = log_onboarding_estimates(mlflow, run_id, name, str(row["checkpoint_id"]), estimates)
        estimated = {
            "capability_estimates": dg.MetadataValue.md(capability),
            "answers_like": dg.MetadataValue.md(like),
            "answers_like_most": str(estimates.answers_like["model"].iloc[0]) if len(estimates.answers_like) else "",
            "widest_interval": round(float(width.max()), 3),
            "mlflow_run": dg.MetadataValue.url(mlflow.run_url(experiment, mlflow_run)),
        }
        for line in warnings:
            log.warning(f"{name}: {line}")
    shown = benchmark_profile(view.accuracy, name, neighbours["model"].tolist(), n_rows)
    metadata = {
        "model": name,
        "source": str(row["source"]),
        "n_evaluations": int(row["n_evaluations"]),
        "routable": bool(row["routable"]),
        # every check's warning, each with the check that raises it (the checks tab has its figures)
        "warnings": dg.MetadataValue.md(
            "\n".join(
                f"- {escape_markdown(w)} (check {check})"
                for check, w in [*((TRUST_CHECK, w) for w in warnings), *([(PRECISION_CHECK, vague)] if vague else [])]
            )
            or "none"
        ),
        "checkpoint_id": str(row["checkpoint_id"]),
        "nearest_model": str(neighbours["model"].iloc[0]) if len(neighbours) else "",
        **({"distance_to_nearest": round(float(neighbours["distance"].iloc[0]), 4)} if len(neighbours) else {}),
        "nearest_models": dg.MetadataValue.md(escape_frame(neighbours.round(4)).to_markdown(index=False)),
        "per_benchmark_profile": dg.MetadataValue.md(profile_markdown(shown, name, neighbours["model"].tolist())),
        **stability,
        **estimated,
        "pool_models": len(pool),
        **atlas_link(home, mlflow, str(row["checkpoint_id"])),  # the model shows there after the reports refresh
    }
    precision = precision or {
        "wide_benchmarks": "none",
        "note": "a model of the training source: no estimates (its answers over the pool's queries are its accuracy)",
    }
    checks = [
        dg.AssetCheckEvaluation(
            asset_key=asset,
            check_name=TRUST_CHECK,
            passed=not warnings,
            partition=key,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "n_evaluations": int(row["n_evaluations"]),
                "routable": bool(row["routable"]),
                **trust,
                "warnings": "; ".join(warnings) or "none",
            },
        ),
        dg.AssetCheckEvaluation(
            asset_key=asset,
            check_name=PRECISION_CHECK,
            partition=key,
            passed=precision["wide_benchmarks"] == "none",
            severity=dg.AssetCheckSeverity.WARN,
            metadata=precision,
        ),
    ]
    return Newcomer(neighbours.assign(of_model=name, checkpoint_id=str(row["checkpoint_id"])), metadata, checks)


def profile_markdown(shown: pd.DataFrame, name: str, neighbours: list[str]) -> str:
    """The per-benchmark profile (benchmark_profile: rows the model, its neighbours and ``n (<name>)``) as a narrow
    Markdown table that fits the UI's page: one row per benchmark, columns the model's accuracy, its evaluations
    (n) and its neighbours' accuracy by rank (#1 ...), named under the table; a missing accuracy is MISSING."""
    short = {name: "model", f"n ({name})": "n", **{n: f"#{i}" for i, n in enumerate(neighbours, 1)}}
    table = shown.rename(index=short).T  # (benchmarks, model / #1 ... / n)
    order = [c for c in ("model", "n", *(f"#{i}" for i in range(1, len(neighbours) + 1))) if c in table.columns]
    cells = table[order].astype(object).where(table[order].notna(), MISSING)
    if "n" in cells:
        cells["n"] = [MISSING if v is MISSING else int(v) for v in cells["n"]]
    cells = escape_frame(cells).set_axis(order, axis=1)  # the benchmarks escaped; the short headers as they are
    lines = [
        cells.rename_axis("benchmark").to_markdown(),
        "",
        f"model: {escape_markdown(name)}; n: its evaluations per benchmark; "
        + "; ".join(f"#{i}: {escape_markdown(n)}" for i, n in enumerate(neighbours, 1))
        + " (nearest_models)",
    ]
    if table.drop(columns=["n"], errors="ignore").isna().to_numpy().any():
        lines.append(f"{MISSING}: that model has no evaluation on that benchmark (no accuracy to show)")
    return "\n".join(lines)


def trust_warnings(
    view: PoolView, store: pd.DataFrame, encodings: pd.DataFrame, n_evaluations: int
) -> tuple[list[str], dict]:
    """(onboarding_warnings for the model's store, the figures beside their thresholds for the check): its count
    against the checkpoint's training budget (the training split's anchors) and the routable floor, its queries'
    overlap with the training source's (query_encodings)."""
    # why: locus_model.onboarding imports torch (seconds): loaded by a run, not when the code location loads
    from locus_model.onboarding import OVERLAP_WARN_RATIO, onboarding_warnings, query_overlap

    mine = encoding_matrix(encodings, store["query_id"].astype(str).unique(), what="the onboarded model's queries: ")
    overlap = query_overlap(mine, view.query_matrix)
    figures = {
        "threshold_budget": view.budget,
        "threshold_routable": MIN_ROUTABLE_EVALUATIONS,
        "query_overlap": round(overlap.overlap, 3),
        "query_overlap_pool_baseline": round(overlap.baseline, 3),
        "query_overlap_ratio": round(overlap.ratio, 3),
        "threshold_query_overlap_ratio": OVERLAP_WARN_RATIO,
    }
    return onboarding_warnings(n_evaluations, view.budget, overlap), figures
