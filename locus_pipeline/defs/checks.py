"""Asset checks: each reports the actual value beside its threshold."""

import dagster as dg
import numpy as np
import pandas as pd

from locus_model.data.contract import validate_evaluations
from locus_model.data.errors import EvaluationDataError
from locus_pipeline.defs.assets.evaluation import routing_evaluation
from locus_pipeline.defs.assets.ingestion import evaluation_table
from locus_pipeline.defs.assets.onboarding import onboarded_evaluations
from locus_pipeline.defs.assets.pool import NEW_EVALUATIONS, model_embeddings, pool_metadata_in_run
from locus_pipeline.defs.partitions import run_model_keys
from locus_pipeline.storage import LocusHome


@dg.asset_check(asset=evaluation_table, description="The stored table passes the evaluation data contract again.")
def evaluation_table_valid(evaluation_table: pd.DataFrame) -> dg.AssetCheckResult:
    try:
        validate_evaluations(evaluation_table, source="the evaluation_table asset")
        problem = ""
    except EvaluationDataError as err:
        problem = str(err)
    return dg.AssetCheckResult(
        passed=not problem,
        metadata={
            "rows": len(evaluation_table),
            "problem": problem or "none",
            "scores_in_0_1": bool(evaluation_table["score"].between(0, 1).all()),
        },
    )


@dg.asset_check(asset=model_embeddings, description="Every model in the pool has a finite embedding.")
def pool_embeddings_finite(home: LocusHome) -> dg.AssetCheckResult:
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.pool import pool_matrix

    _, z = pool_matrix(home.read_pool())
    bad = int((~np.isfinite(z)).any(axis=1).sum())
    return dg.AssetCheckResult(
        passed=bad == 0, metadata={"models_with_non_finite_embedding": bad, "threshold": 0, "models": len(z)}
    )


REPRODUCED_SAMPLE = 32  # a rebuild's rows with evaluations the pool already held: this many re-embedded (seeded)
REPRODUCED_MAX_CHANGED = (
    256  # a rebuild's rows with new evaluations: all of them up to this many, a seeded sample beyond
)


def new_evaluations_in_run(context: dg.AssetCheckExecutionContext) -> list[str] | None:
    """The models whose evaluations this run's materialization of the pool made new to it (None: the run did not
    materialize the pool, e.g. the check run on its own)."""
    found = pool_metadata_in_run(context.instance, context.run.run_id, NEW_EVALUATIONS)
    return None if found is None else list(found)


@dg.asset_check(
    asset=model_embeddings,
    blocking=True,
    description="Re-embedding pool rows from their evaluations (training source or onboarded store) with the pool's "
    "checkpoint reproduces them within float32 noise (each coordinate within 1e-5 x (1 + |value|): another "
    "process or thread count sums in another order, ~1e-7 apart; a changed row moves >= 1e-3): the onboarded models "
    "after an onboarding; after a rebuild, every "
    f"row with new evaluations (up to {REPRODUCED_MAX_CHANGED}, a seeded sample beyond) and a seeded sample "
    f"of {REPRODUCED_SAMPLE} other rows, so the check costs at most {REPRODUCED_SAMPLE + REPRODUCED_MAX_CHANGED} "
    "rows of a rebuild's embedding work whatever the pool's size.",
)
def pool_embeddings_reproducible(context: dg.AssetCheckExecutionContext, home: LocusHome) -> dg.AssetCheckResult:
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.pool import check_pool, compare_embeddings, reproduction_sample
    from locus_pipeline.pool_rows import embed_again

    keys = run_model_keys(context.instance, context.run.tags)  # an onboarding run's models, None for a rebuild
    changed = new_evaluations_in_run(context) if keys is None else None
    with home.lock("pool"):  # the state the last materialization left, not one half-way through another write
        pool = home.read_pool()
        check_pool(pool)
        checkpoint = home.pool_checkpoint(pool)
        if keys is None:
            chosen = reproduction_sample(
                pool, changed or [], sample=REPRODUCED_SAMPLE, max_changed=REPRODUCED_MAX_CHANGED
            )
            rows = pool[pool["model"].astype(str).isin(set(chosen.models))]
        else:
            rows = pool[pool["model_key"].isin(keys)]
        again, pending = embed_again(home, checkpoint, rows)
    result = compare_embeddings(pool, again)
    scope: dict[str, str | float] = (
        {"scope": f"model key(s) {', '.join(keys[:20])}" + (f" and {len(keys) - 20} more" if len(keys) > 20 else "")}
        if keys is not None
        else {
            "scope": f"rebuild: {chosen.changed_checked} of {chosen.changed} rows with new evaluations"
            + ("" if changed is not None else " (this run did not materialize the pool)")
            + f", {chosen.others_checked} sampled of the other {chosen.rows - chosen.changed} (seed 0)",
            "share_of_rebuild": round(chosen.share_of_rebuild, 4),
        }
    )
    return dg.AssetCheckResult(
        passed=not result.differing,
        metadata={
            "models_checked": result.models_checked,
            "models_differing": len(result.differing),
            "threshold": 0,
            "tolerance": result.tolerance,
            "max_abs_diff": dg.MetadataValue.float(result.max_abs_diff),
            # why: the UI rounds a float of 3.6e-07 to 0; the text says it as computed
            "max_abs_diff_vs_tolerance": (
                f"{result.max_abs_diff:.2e} (tolerance {result.tolerance:.0e} x (1 + |value|))"
            ),
            "models_not_bit_identical": result.not_bit_identical,
            "checkpoint_id": checkpoint.checkpoint_id,
            "pool_rows": len(pool),
            **scope,
            "differing_models": ", ".join(result.differing[:20]) or "none",
            "pending_onboarded_models": ", ".join(pending) or "none",
        },
    )


@dg.asset_check(
    asset=routing_evaluation, description="LOCUS routing accuracy above the best single model (warning only)."
)
def locus_beats_best_single(routing_evaluation: pd.DataFrame) -> dg.AssetCheckResult:
    head = routing_evaluation[(routing_evaluation["benchmark"] == "") & (routing_evaluation["group"] == "all")]
    acc = head[head["metric"] == "routing_acc"].set_index("method")["mean"]
    diff = head[(head["method"] == "locus") & (head["metric"].str.startswith("vs_best_single"))].set_index("metric")[
        "mean"
    ]
    return dg.AssetCheckResult(
        passed=bool(acc.get("locus", np.nan) > acc.get("best_single", np.nan)),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "locus_routing_acc": float(acc.get("locus", np.nan)),
            "threshold_best_single_routing_acc": float(acc.get("best_single", np.nan)),
            "bootstrap_ci_low": float(diff.get("vs_best_single.ci_low", np.nan)),
            "bootstrap_ci_high": float(diff.get("vs_best_single.ci_high", np.nan)),
        },
    )


REJECTION_CHECK = "dropped_files_accepted"  # the drop-folder sensor reports each rejected file as its failed evaluation


@dg.asset_check(
    asset=onboarded_evaluations,
    name=REJECTION_CHECK,
    description="The drop folder takes its files in: the sensor reports every rejected file as a failed "
    "evaluation of this check (warning) with the reason; run by hand, it fails while the "
    "newest file of incoming/ was rejected.",
)
def dropped_files_accepted(home: LocusHome) -> dg.AssetCheckResult:
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_pipeline.intake import REASON_SUFFIX, DropFolder, manifest_stems

    folder = DropFolder(home)
    rejected = (
        sorted(p.name[: -len(REASON_SUFFIX)] for p in folder.rejected.glob(f"*{REASON_SUFFIX}"))
        if folder.rejected.exists()
        else []
    )
    accepted = manifest_stems(folder)
    newest_rejected = bool(rejected) and (not accepted or rejected[-1] > accepted[-1])  # stems start with the UTC time
    return dg.AssetCheckResult(
        passed=not newest_rejected,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "rejected_files": len(rejected),
            "accepted_files": len(accepted),
            "newest_rejected": rejected[-1] if rejected else "none",
            "reason_file": f"incoming/rejected/{rejected[-1]}{REASON_SUFFIX}" if rejected else "none",
        },
    )
