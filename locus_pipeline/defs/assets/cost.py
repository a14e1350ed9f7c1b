"""The quality-cost frontier of the cost-aware router (locus_model.routing) on the test queries."""

import dagster as dg
import numpy as np
import pandas as pd

from locus_model.analysis._common import left_out_note as excluded_note  # ops: one-line fix, excluded_note moved (pipe)
from locus_model.markdown import escape_frame, escape_markdown
from locus_model.routing import cost_info, cost_table, frontier_of_pool
from locus_pipeline.defs.assets.analyses import GROUP, labelled_pool, publish
from locus_pipeline.defs.metadata import OWNERS
from locus_pipeline.storage import LocusHome


@dg.asset(kinds={"numpy"}, group_name=GROUP, owners=OWNERS)
def cost_frontier(
    context: dg.AssetExecutionContext,
    model_embeddings: pd.DataFrame,
    test_query_predictions: pd.DataFrame,
    model_catalog: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Routing accuracy against mean cost per query as the router's quality weight goes from cheapest to best
    (P(correct) - lambda * cost), on the test queries, beside the best single model, the cheapest model and a
    random mix of the two; and the cost at which the router reaches 95% of the best single model's accuracy.
    The rule is locus serve's (locus_model.routing), and so are the costs: the model catalog's cost columns
    (routing.COST_KEYS: cost_per_query, or prices per million input/output tokens with the query's estimated
    tokens; else parameter counts, from the catalog or read from the name), with the basis said in the report and
    the metadata. A model with no cost on that basis is left out of the frontier and named. RouterBench's AIQ and the
    cost shares at 100% / 95% of the best single model's accuracy come from the code that gives them to
    `locus evaluate --models-file` and routing_evaluation (routing.frontier.frontier_figures)."""
    names, _, preds, excluded = labelled_pool(model_embeddings, test_query_predictions)
    table = cost_table(names, cost_info(model_catalog))
    texts = (
        evaluation_table.drop_duplicates("query_id")
        .assign(query_id=lambda t: t["query_id"].astype(str))
        .set_index("query_id")["query"]
        .astype(str)
        .reindex(preds.query_ids)
    )
    result = frontier_of_pool(preds.route, preds.labels, names, list(texts), table)  # P under the guard ranks
    basis, unknown = table.basis_means, list(result.unknown_cost)
    assert result.figures is not None  # cost_frontier, under frontier_of_pool, computes RouterBench's figures
    png = result.plot(home.dir("reports") / "cost_frontier.png", cost_label=f"mean cost per query ({basis})")
    summary = result.summary() + f" Cost basis: {basis}. Costs: {table.note}."
    body = (
        escape_frame(result.table.round(4)).to_markdown(index=False)
        + "\n\nquality_weight w ranks models by w * P(correct) - (1 - w) * cost / (largest cost); w = 1 routes by "
        "P(correct) alone, w = 0 takes the cheapest (the rule locus serve applies to each request)."
        + (
            f"\n\nLeft out, cost unknown on this basis (never charged a made-up cost): "
            f"{', '.join(map(escape_markdown, unknown))}."
            if unknown
            else ""
        )
        + f"\n\nCost basis: {basis}."
        + excluded_note(excluded)
    )
    publish(
        context,
        home,
        "cost_frontier",
        title="Quality-cost frontier",
        summary=summary,
        body=body,
        png=png,
        cost_basis=table.basis,
        cost_basis_means=basis,
        models_of_unknown_cost=len(unknown),
        best_single_accuracy=round(float(result.best_single_accuracy), 4),
        cost_at_95_percent_of_best_single=float(f"{result.cost_at_share:.4g}")
        if result.cost_at_share is not None
        else -1.0,
        # RouterBench's figures on the router's hull, by the code of locus evaluate --models-file (-1: never reached)
        **{f"frontier_{k}": round(v, 4) if np.isfinite(v) else -1.0 for k, v in result.figures.items()},
    )
    return result.table.assign(best_single=result.best_single, cheapest=result.cheapest, cost_basis=table.basis)
