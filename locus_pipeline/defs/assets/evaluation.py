"""Routing evaluation of LOCUS against the baselines: the same code as `locus evaluate`."""

import json

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_model.data.matrix import EvaluationMatrix
from locus_model.evaluation.results import (
    flatten_results,
    format_frontier,
    format_results,
    frontier_rows,
    headline_markdown,
    save_results,
)
from locus_model.evaluation.splits import given_fold
from locus_model.evaluation.verdict import format_verdict
from locus_model.markdown import escape_frame
from locus_model.routing import cost_info, cost_table
from locus_pipeline.defs.metadata import OWNERS, home_path, shown_whole
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome


class RoutingEvaluationConfig(dg.Config):
    methods: list[str] = Field(
        default=["locus", "embedllm_mf", "irt", "knn", "best_single", "oracle"],
        description="Methods to compare (locus is the pool's checkpoint, never retrained here).",
    )
    n_boot: int = Field(default=2000, description="Bootstrap resamples of the test queries for the paired intervals.")


@dg.asset(owners=OWNERS, kinds={"pytorch", "mlflow"}, group_name="evaluation", pool="training")
def routing_evaluation(
    context: dg.AssetExecutionContext,
    config: RoutingEvaluationConfig,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    model_split: pd.DataFrame,
    locus_checkpoint: pd.DataFrame,
    model_catalog: pd.DataFrame,
    home: LocusHome,
    mlflow: MlflowTracking,
) -> pd.DataFrame:
    """The pool's own router on the test queries: the locus_checkpoint (not retrained) beside EmbedLLM-MF, IRT,
    kNN, best single and oracle fitted on the same split and the same budget anchors. Held-out models (never
    trained on) are embedded by one forward pass from their anchor evaluations and reported apart. With costs in
    the model catalog (routing.COST_KEYS: prices, else parameter counts), every method's quality-cost frontier as
    `locus evaluate --models-file` gives it (AIQ, the cost at 100% / 95% of the best single model's accuracy; the
    figures of the cost_frontier asset, by the same code). The full JSON (as `locus evaluate` writes it) is saved
    to LOCUS_HOME/reports/routing_evaluation.json. The verdict (does routing pay over the best single model:
    evaluation.verdict) is the first line of the log, in the metadata, and on the checkpoint's MLflow run
    (``verdict/*`` metrics, tag ``verdict``)."""
    # why: torch stays out of the code location's load (test_the_code_location_loads_without_torch)
    from locus_model.evaluation.protocol import evaluate

    record = home.current_checkpoint()
    checkpoint = home.load_checkpoint(record.checkpoint_id)
    matrix = EvaluationMatrix.from_table(evaluation_table.drop(columns=["split"], errors="ignore"))
    fold = given_fold(training_split, matrix.query_ids)
    held = model_split.loc[model_split["group"] == "held_out", "model"].astype(str).tolist()
    encodings = dict(zip(query_encodings["query_id"].astype(str), query_encodings["encoding"]))
    costs = cost_table(matrix.models, cost_info(model_catalog))
    result = evaluate(
        matrix,
        encodings,
        budget=len(fold.anchors),
        fold=fold,
        held_out=held,
        router=checkpoint.router,
        seed=0,
        methods=config.methods,
        n_boot=config.n_boot,
        progress=False,
        costs=None if costs.basis == "none" else costs,  # no price and no size: no frontier
    )
    result["settings"]["checkpoint_id"] = record.checkpoint_id
    path = save_results(result, home.routing_evaluation_path)
    verdict = result["verdict"]
    text = (
        format_verdict(verdict)
        + "\n\n"
        + format_results(result)
        + ("\n\n" + format_frontier(result) if "frontier" in result else "")
    )
    context.log.info("\n" + text)
    flat = flatten_results(result)
    frontier = pd.DataFrame(frontier_rows(result))
    log_verdict(home, mlflow, record.checkpoint_id, verdict)
    context.add_output_metadata(
        {
            "verdict": shown_whole(format_verdict(verdict)),
            "verdict_figures": dg.MetadataValue.json(verdict or {}),
            "checkpoint_id": record.checkpoint_id,
            "routing_table": dg.MetadataValue.md(headline_markdown(flat)),
            "frontier_table": dg.MetadataValue.md(
                escape_frame(frontier).to_markdown(index=False) + f"\n\nCost: {costs.basis_means}. {costs.note}."
                if len(frontier)
                else f"No frontier: {costs.note}."
            ),
            "report": home_path(home, path),
            "sizes": dg.MetadataValue.json(json.loads(json.dumps(result["sizes"]))),
            "wall_s": result["wall_s"],
        }
    )
    return flat.assign(checkpoint_id=record.checkpoint_id)


def log_verdict(home: LocusHome, mlflow: MlflowTracking, checkpoint_id: str, verdict: dict | None) -> None:
    """The verdict on the checkpoint's training run, where the tracking store holds it: metrics ``verdict/pays``
    (1 or 0), ``verdict/delta``, ``verdict/lo``, ``verdict/hi`` (accuracy points), ``verdict/cost_share`` and the
    tag ``verdict`` (the line)."""
    if verdict is None:
        return
    current = home.read_table("locus_checkpoint")
    run = current.loc[current["checkpoint_id"].astype(str) == checkpoint_id, "mlflow_run_id"]
    if not len(run) or mlflow.experiment_of_run(str(run.iloc[0])) is None:
        return
    metrics = {
        f"verdict/{k}": float(verdict[k]) for k in ("pays", "delta", "lo", "hi", "cost_share") if verdict[k] is not None
    }
    mlflow.log_to_run(
        str(run.iloc[0]),
        metrics,
        {"verdict": format_verdict(verdict), "verdict.best_single": str(verdict["best_single"])},
    )
