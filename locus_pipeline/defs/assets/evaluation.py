"""Routing evaluation of LOCUS against the baselines: the same code as `locus evaluate`."""


import json

import dagster as dg
import pandas as pd
from pydantic import Field

from locus_pipeline.defs.assets.training import TrainingConfig
from locus_pipeline.defs.resources import LocusHome


class RoutingEvaluationConfig(dg.Config):
    budget: int = Field(default=256, description="Evaluations per model every method may use (the anchors).")
    holdout_models: float = Field(default=0.2, description="Share of models never trained on, onboarded from their budget evaluations and reported separately.")
    seed: int = Field(default=0, description="Seed of anchors, held-out models and training.")
    methods: list[str] = Field(default=["locus", "embedllm_mf", "irt", "knn", "best_single", "oracle"], description="Methods to compare.")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="LOCUS training settings inside the harness.")


def flatten_results(result: dict) -> pd.DataFrame:
    """The harness JSON as a long table: method, group, benchmark ('' = all), metric, mean, std."""
    rows = []
    for method, groups in result["methods"].items():
        for group, entry in groups.items():
            for metric, stat in entry.items():
                if metric == "per_benchmark":
                    for bench, metrics in stat.items():
                        rows += [dict(method=method, group=group, benchmark=bench, metric=m, mean=s["mean"], std=s["std"]) for m, s in metrics.items()]
                elif metric == "vs_best_single":
                    rows += [dict(method=method, group=group, benchmark="", metric=f"vs_best_single.{k}", mean=v, std=None) for k, v in stat.items()]
                elif metric == "vs_methods":  # LOCUS minus another method: vs_<method>.<metric>.<diff|ci_low|ci_high>
                    rows += [dict(method=method, group=group, benchmark="", metric=f"vs_{other}.{m}.{k}", mean=v, std=None)
                             for other, metrics in stat.items() for m, interval in metrics.items() for k, v in interval.items()]
                else:
                    rows.append(dict(method=method, group=group, benchmark="", metric=metric, mean=stat["mean"], std=stat["std"]))
    return pd.DataFrame(rows)


@dg.asset(kinds={"pytorch"}, group_name="evaluation", pool="training")
def routing_evaluation(
    context: dg.AssetExecutionContext,
    config: RoutingEvaluationConfig,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Routing and correctness accuracy of LOCUS, EmbedLLM-MF, IRT, kNN, best single, oracle on the test queries.

    Uses the pipeline's query split; held-out models are embedded without retraining and reported apart.
    The full JSON (as written by `locus evaluate`) is saved to LOCUS_HOME/reports/routing_evaluation.json.
    """
    from locus_model.evaluate import evaluate, format_results, save_results

    table = evaluation_table.drop(columns=["split"], errors="ignore").merge(training_split[["query_id", "split"]], on="query_id")
    encodings = dict(zip(query_encodings["query_id"].astype(str), query_encodings["encoding"]))
    model_config, train_config = config.training.to_library(query_dim=len(query_encodings["encoding"].iloc[0]))
    result = evaluate(
        table, encodings, budget=config.budget, folds=None, holdout_models=config.holdout_models, seed=config.seed,
        methods=config.methods, train_config=train_config, model_config=model_config, progress=False,
    )
    path = save_results(result, home.dir("reports") / "routing_evaluation.json")
    text = format_results(result)
    context.log.info("\n" + text)
    flat = flatten_results(result)
    headline = flat[(flat["benchmark"] == "") & flat["metric"].isin(["routing_acc", "correctness_acc", "auc", "brier"])]
    table_md = headline.pivot_table(index=["method", "group"], columns="metric", values="mean").round(4).to_markdown()
    context.add_output_metadata(
        {
            "routing_table": dg.MetadataValue.md(table_md),
            "report": dg.MetadataValue.path(str(path)),
            "sizes": dg.MetadataValue.json(json.loads(json.dumps(result["sizes"]))),
            "wall_s": result["wall_s"],
        }
    )
    return flat
