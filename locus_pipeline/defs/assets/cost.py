"""The quality-cost frontier of the cost-aware router (locus_model.routing) on the held-out queries."""


import dagster as dg
import numpy as np
import pandas as pd

from locus_model.markdown import escape_frame, escape_markdown
from locus_pipeline.defs.assets.analyses import GROUP, labelled_pool, publish
from locus_pipeline.defs.metadata import OWNERS
from locus_pipeline.storage import LocusHome


@dg.asset(kinds={"numpy"}, group_name=GROUP, owners=OWNERS)
def cost_frontier(
    context: dg.AssetExecutionContext,
    model_embeddings: pd.DataFrame,
    heldout_predictions: pd.DataFrame,
    model_catalog: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Routing accuracy against mean cost per query as the router's quality weight goes from cheapest to best
    (P(correct) - lambda * cost), on the held-out queries, beside the best single model, the cheapest model and a
    random mix of the two; and the cost at which the router reaches 95% of the best single model's accuracy.
    Costs come from the models file (cost_per_query, or prices per million input/output tokens with the query's
    estimated tokens); where no price is known, parameter counts serve as the cost (from the catalog, else read from
    the name) and the report says so. A model with no cost on that basis is left out of the frontier and named."""
    from locus_model.routing import COST_KEYS, cost_table, estimate_tokens
    from locus_model.routing import cost_frontier as frontier

    names, _, preds, excluded = labelled_pool(model_embeddings, heldout_predictions)
    catalog = model_catalog.assign(model=model_catalog["model"].astype(str)).set_index("model")
    info = {n: {c: catalog.at[n, c] for c in COST_KEYS if c in catalog.columns} for n in names if n in catalog.index}
    table = cost_table(names, info)
    unknown = list(table.unknown)
    if table.unknown and table.known.any():  # an unknown cost is never made up: those models are left out, named
        known = table.known
        names, preds, table = [n for n, k in zip(names, known) if k], preds.subset(known), table.subset([n for n, k in zip(names, known) if k])
    basis = table.basis_means
    texts = (evaluation_table.drop_duplicates("query_id").assign(query_id=lambda t: t["query_id"].astype(str))
             .set_index("query_id")["query"].astype(str).reindex(preds.query_ids))
    costs = np.stack([table.costs(input_tokens=estimate_tokens(t)) for t in texts], axis=1)  # (M, Q)
    result = frontier(preds.probs, preds.labels, costs, names=names)
    png = result.plot(home.dir("reports") / "cost_frontier.png",
                      cost_label="mean cost per query" + (" (USD)" if table.basis == "usd" else " (billions of parameters)" if table.basis == "params_b" else ""))
    summary = result.summary() + f" Cost basis: {basis}. Costs: {table.note}."
    body = (escape_frame(result.table.round(4)).to_markdown(index=False)
            + "\n\nquality_weight w ranks models by w * P(correct) - (1 - w) * cost / (largest cost); w = 1 routes by "
              "P(correct) alone, w = 0 takes the cheapest." + (f"\n\nLeft out, cost unknown on this basis (never charged a made-up "
                                                               f"cost): {', '.join(map(escape_markdown, unknown))}." if unknown else "")
            + f"\n\nCost basis: {basis}."
            + ("\n\nLeft out (no held-out labels, e.g. onboarded): " + ", ".join(map(escape_markdown, excluded[:20])) if excluded else ""))
    publish(context, home, "cost_frontier", title="Quality-cost frontier", summary=summary, body=body,
            png=png, cost_basis=table.basis, cost_basis_means=basis, models_of_unknown_cost=len(unknown),
            best_single_accuracy=round(float(result.best_single_accuracy), 4),
            cost_at_95_percent_of_best_single=float(f"{result.cost_at_share:.4g}") if result.cost_at_share is not None else -1.0)
    return result.table.assign(best_single=result.best_single, cheapest=result.cheapest, cost_basis=table.basis)
