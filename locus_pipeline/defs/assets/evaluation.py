"""Routing evaluation of LOCUS against the baselines: the same code as `locus evaluate`."""


import json

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_pipeline.defs.metadata import OWNERS, home_path
from locus_pipeline.storage import LocusHome


class RoutingEvaluationConfig(dg.Config):
    methods: list[str] = Field(default=["locus", "embedllm_mf", "irt", "knn", "best_single", "oracle"], description="Methods to compare (locus is the pool's checkpoint, never retrained here).")
    n_boot: int = Field(default=2000, description="Bootstrap resamples of the test queries for the paired intervals.")


@dg.asset(owners=OWNERS, kinds={"pytorch"}, group_name="evaluation", pool="training")
def routing_evaluation(
    context: dg.AssetExecutionContext,
    config: RoutingEvaluationConfig,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    model_split: pd.DataFrame,
    locus_checkpoint: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """The pool's own router on the test queries: the locus_checkpoint (not retrained) beside EmbedLLM-MF, IRT,
    kNN, best single and oracle fitted on the same split and the same budget anchors. Held-out models (never
    trained on) are embedded by one forward pass from their anchor evaluations and reported apart. The full
    JSON (as `locus evaluate` writes it) is saved to LOCUS_HOME/reports/routing_evaluation.json."""
    from locus_model.data.matrix import EvaluationMatrix
    from locus_model.evaluation.protocol import evaluate
    from locus_model.evaluation.results import flatten_results, format_results, headline_markdown, save_results
    from locus_model.evaluation.splits import given_fold

    record = home.current_checkpoint()
    checkpoint = home.load_checkpoint(record.checkpoint_id)
    matrix = EvaluationMatrix.from_table(evaluation_table.drop(columns=["split"], errors="ignore"))
    fold = given_fold(training_split, matrix.query_ids)
    held = model_split.loc[model_split["group"] == "held_out", "model"].astype(str).tolist()
    encodings = dict(zip(query_encodings["query_id"].astype(str), query_encodings["encoding"]))
    result = evaluate(
        matrix, encodings, budget=len(fold.anchors), fold=fold, held_out=held, locus_model=checkpoint.model,
        seed=0, methods=config.methods, n_boot=config.n_boot, progress=False,
    )
    result["settings"]["checkpoint_id"] = record.checkpoint_id
    path = save_results(result, home.dir("reports") / "routing_evaluation.json")
    text = format_results(result)
    context.log.info("\n" + text)
    flat = flatten_results(result)
    context.add_output_metadata(
        {
            "checkpoint_id": record.checkpoint_id,
            "routing_table": dg.MetadataValue.md(headline_markdown(flat)),
            "report": home_path(home, path),
            "sizes": dg.MetadataValue.json(json.loads(json.dumps(result["sizes"]))),
            "wall_s": result["wall_s"],
        }
    )
    return flat.assign(checkpoint_id=record.checkpoint_id)
