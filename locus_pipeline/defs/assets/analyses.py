"""What the embedding space is for (arXiv 2601.21082, downstream uses): one asset per analysis.

Each asset reads the pool (model_embeddings) and what it needs, calls one function of locus_model.analysis,
writes LOCUS_HOME/reports/<name>.md + <name>.png, returns its table (warehouse Parquet) and shows the report
as Dagster metadata. heldout_predictions is shared: P(correct) of every pool model on the held-out test
queries, beside its labels. Onboarded models have no held-out labels: label-based analyses (geometry,
portfolios, fallback) leave them out, the others (clustering, near-duplicates, search, atlas) keep them.
"""


import dagster as dg
import numpy as np
import pandas as pd
from pydantic import Field

from locus_model.markdown import escape_frame, escape_markdown
from locus_pipeline.defs.metadata import ATLAS_ARTIFACT, OWNERS, atlas_link, home_path, ui_png_markdown
from locus_pipeline.defs.resources import MlflowTracking
from locus_pipeline.storage import LocusHome

GROUP = "analyses"

# ----------------------------------------------------------------------------- shared plumbing


def data_note(home: LocusHome) -> str:
    """One line saying what the numbers are computed on; the synthetic pool is called SYNTHETIC. Read from the
    raw_evaluations table through LocusHome: the note is no data dependency, so no lineage edge is drawn for it."""
    raw = home.read_table("raw_evaluations", columns=["source", "root"])
    source, root = str(raw["source"].iloc[0]), str(raw["root"].iloc[0])
    if source == "synthetic":
        return ("Data: the **SYNTHETIC** pool (`locus_model.data.demo`: made-up models drawn from a known latent "
                "model, not real LLMs): its numbers are not findings about real models.")
    if source == "mmlu_pro":
        return f"Data: **real** MMLU-Pro results of real models (`{root}`, data/mmlu-pro/README.md)."
    return f"Data: `{source}` evaluations from `{root}`."


PREVIEW_ROWS = 10  # markdown tables in the UI's report are cut to this many rows; the asset's Parquet has them all


def shorten_tables(markdown: str, name: str, max_rows: int = PREVIEW_ROWS) -> str:
    """Every markdown table longer than ``max_rows`` rows cut to its first ``max_rows``, with a line saying how
    many more there are and where (the asset's Parquet output, warehouse/<name>.parquet)."""
    out, block = [], []

    def flush() -> None:
        rows = block[2:]  # header and separator first
        out.extend(block[:2 + max_rows])
        if len(rows) > max_rows:
            out.append(f"\n*... {len(rows) - max_rows} more rows: the full table is the asset's output "
                       f"(`warehouse/{name}.parquet`) and `reports/{name}.md`.*")
        block.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            flush()
        out.append(line)
    if block:
        flush()
    return "\n".join(out)


def publish(context: dg.AssetExecutionContext, home: LocusHome, name: str, *, title: str, summary: str, body: str,
            png=None, **metadata) -> None:
    """Write reports/<name>.md (summary, figure, data note, body) and attach it as Dagster metadata: the summary
    and the figure first (scaled to UI_FIGURE_PX wide, so the UI's modal shows all of it), long tables shortened
    to a preview (the full table is the asset's Parquet output)."""
    from locus_pipeline.reports import write_report

    report = write_report(home.dir("reports"), name, title=title, summary=summary, body=body, note=data_note(home), png=png)
    shown = report.markdown if png is None else report.markdown.replace(f"![{name}]({png.name})", ui_png_markdown(png))
    figures = {k: float(f"{v:.4g}") if isinstance(v, float) and np.isfinite(v) else v for k, v in metadata.items()}  # 4 digits
    context.add_output_metadata({"summary": summary, "report": dg.MetadataValue.md(shorten_tables(shown, name)),
                                 "report_path": home_path(home, report.md_path), **figures})


def labelled_pool(model_embeddings: pd.DataFrame, heldout_predictions: pd.DataFrame):
    """(names, embeddings, Predictions, excluded names): pool models with held-out labels only, as the pool was
    when heldout_predictions read it. Models onboarded since are left for the next refresh (their rows carry no
    labels anyway); a pool rebuilt since (another checkpoint) is a failure that says so."""
    from locus_model.pool import checkpoints_of, pool_matrix
    from locus_pipeline.reports import prediction_matrices

    snapshot, current = checkpoints_of(heldout_predictions), checkpoints_of(model_embeddings)
    if snapshot != current:
        raise dg.Failure(description=f"the pool was re-embedded with checkpoint {sorted(current)} after heldout_predictions "
                                     f"read it with {sorted(snapshot)}",
                         metadata={"how_to_fix": "nothing to do: the refresh requested after the rebuild replaces this one"})
    pool = model_embeddings[model_embeddings["model"].astype(str).isin(set(heldout_predictions["model"].astype(str)))]
    names, z = pool_matrix(pool)
    preds = prediction_matrices(heldout_predictions, names)
    keep = preds.labelled
    return ([n for n, k in zip(names, keep) if k], z[keep], preds.subset(keep),
            [n for n, k in zip(names, keep) if not k])


def excluded_note(excluded: list[str]) -> str:
    if not excluded:
        return ""
    return (f"\n\nLeft out (no held-out labels, e.g. onboarded): {len(excluded)} model(s): "
            + ", ".join(map(escape_markdown, excluded[:20])) + (" ..." if len(excluded) > 20 else "") + ".")


def catalog_column(names: list[str], model_catalog: pd.DataFrame, column: str = "family") -> list[str]:
    """The catalog's `column` (family, variant ...) for each name, "" where unknown."""
    values = model_catalog.assign(model=model_catalog["model"].astype(str)).set_index("model")[column]
    return ["" if pd.isna(v) else str(v) for v in values.reindex(names)]


# ----------------------------------------------------------------------------- held-out predictions


@dg.asset(kinds={"pytorch"}, group_name=GROUP, owners=OWNERS)
def heldout_predictions(
    context: dg.AssetExecutionContext,
    model_embeddings: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """One row per (pool model, held-out test query): model, query_id, benchmark, prob (the correctness
    predictor's P(correct) from the pool embedding), label (NaN where unknown, e.g. onboarded models),
    checkpoint_id. The analyses of one refresh use the pool as this asset read it."""
    from locus_model.evaluation.metrics import correctness_accuracy, routing_accuracy
    from locus_pipeline.reports import prediction_matrices, test_query_predictions as predict

    checkpoint = home.pool_checkpoint(model_embeddings)
    table = predict(model_embeddings, evaluation_table, query_encodings, training_split, checkpoint.model)
    preds = prediction_matrices(table, model_embeddings["model"].astype(str).tolist())
    lab = preds.subset(preds.labelled)
    context.add_output_metadata({
        "models": len(preds.names), "models_with_labels": len(lab.names), "test_queries": len(preds.query_ids),
        "routing_accuracy_full_pool": float(routing_accuracy(lab.probs, lab.labels)),
        "correctness_accuracy": float(correctness_accuracy(lab.probs, lab.labels)),
        "checkpoint_id": checkpoint.checkpoint_id,
    })
    return table.assign(checkpoint_id=checkpoint.checkpoint_id)

# ----------------------------------------------------------------------------- distance vs behaviour


@dg.asset(kinds={"scipy"}, group_name=GROUP, owners=OWNERS)
def embedding_geometry(
    context: dg.AssetExecutionContext,
    model_embeddings: pd.DataFrame,
    heldout_predictions: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Per model pair: Euclidean and cosine embedding distance vs the correctness disagreement rate on the
    held-out test queries; Pearson, Spearman and Kendall over pairs (paper: Pearson 0.887 Euclidean)."""
    from locus_model.analysis import distance_vs_disagreement

    names, z, preds, excluded = labelled_pool(model_embeddings, heldout_predictions)
    result = distance_vs_disagreement(z, preds.labels, names=names)
    png = result.plot(home.dir("reports") / "embedding_geometry.png")
    eu, co = result.euclidean_corr, result.cosine_corr
    summary = result.headline()
    body = (result.to_markdown() + f"\n\nDisagreement is measured on the {len(preds.query_ids)} held-out test "
            "queries, which no pool embedding was computed from." + excluded_note(excluded))
    publish(context, home, "embedding_geometry", title="Embedding distance vs behaviour", summary=summary, body=body,
            png=png,
            pearson_euclidean=eu.pearson, pearson_cosine=co.pearson, spearman_euclidean=eu.spearman,
            spearman_cosine=co.spearman, kendall_euclidean=eu.kendall, kendall_cosine=co.kendall,
            correlations=dg.MetadataValue.md(escape_frame(result.correlation_table().round(4)).to_markdown(index=False)))
    return result.table()

# ----------------------------------------------------------------------------- family clustering


class FamilyClusteringConfig(dg.Config):
    method: str = Field(default="average", description="scipy linkage: average (UPGMA, default), complete, "
                        "single, or ward (needs metric euclidean).")
    metric: str = Field(default="cosine", description="Distance between model embeddings: cosine or euclidean.")


@dg.asset(kinds={"scipy"}, group_name=GROUP, owners=OWNERS)
def family_clusters(
    context: dg.AssetExecutionContext,
    config: FamilyClusteringConfig,
    model_embeddings: pd.DataFrame,
    model_catalog: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Hierarchical clustering of the whole pool (dendrogram by model name); where families are known (models
    file, or the demo pool's own), the tree cut at the number of families is scored by purity and adjusted Rand.
    A models file with a `variant` column (base / chat / math / code ..., as the demo pool's) is scored too: the
    paper finds math- and code-finetuned models cluster together across base families."""
    from locus_model.analysis import family_clustering
    from locus_model.pool import pool_matrix

    names, z = pool_matrix(model_embeddings)
    groupings = ["family"] + (["variant"] if "variant" in model_catalog.columns else [])
    results = {g: family_clustering(z, names, catalog_column(names, model_catalog, g), method=config.method,
                                    metric=config.metric) for g in groupings}
    result = results["family"]
    png = result.plot(home.dir("reports") / "family_clusters.png")
    scored = {g: r for g, r in results.items() if r.clusters is not None}
    if not scored:
        summary = f"{len(names)} models clustered ({result.method} linkage, {result.metric}); no family labels to score."
    else:
        summary = (f"{result.method}-linkage tree ({result.metric} distance) of {len(names)} models, cut at the "
                   "number of known groups: " + "; ".join(
                       f"{g} ({r.n_families} groups): adjusted Rand {r.adjusted_rand:.3f}, purity {r.purity:.3f}"
                       for g, r in scored.items()) + ".")
    body = result.to_markdown()
    if "variant" in scored:
        r = scored["variant"]
        body += (f"\n\nThe same tree cut at the {r.n_families} fine-tune variants: adjusted Rand {r.adjusted_rand:.3f}, "
                 f"purity {r.purity:.3f}.")
    body += ("\n\nLinkage: average (UPGMA) on cosine distance by default: every pair between two clusters counts, "
             "so one close pair cannot chain two families (as single linkage can), and it is valid for a "
             "non-Euclidean distance; cosine ignores embedding norms, which follow overall accuracy more than family.")
    table = result.table()
    if "variant" in scored:
        by_model = dict(zip(names, scored["variant"].clusters))
        table = table.assign(variant=catalog_column(table["model"].tolist(), model_catalog, "variant"),
                             variant_cluster=[int(by_model[m]) for m in table["model"]])
    publish(context, home, "family_clusters", title="Family clustering", summary=summary, body=body,
            png=png, adjusted_rand=float(result.adjusted_rand),
            purity=float(result.purity), n_families=int(result.n_families),
            **{f"adjusted_rand_{g}": float(r.adjusted_rand) for g, r in scored.items() if g != "family"})
    return table

# ----------------------------------------------------------------------------- portfolios


DENSE_K = 50  # the k curves take every size up to this, then GEOMETRIC_K sizes more up to the whole pool
GEOMETRIC_K = 20


class PortfolioConfig(dg.Config):
    max_k: int = Field(default=0, description="Largest portfolio size on the k-center / k-medoids curves; "
                       f"0 = the whole pool (every size up to {DENSE_K}, then {GEOMETRIC_K} sizes spaced "
                       "geometrically up to the pool).")
    max_k_medoids: int = Field(default=DENSE_K, description="Largest k-medoids portfolio (PAM: each size is a "
                               "search over (M, M) distances); 0 = as far as the k-center curve.")
    n_budgets: int = Field(default=12, description="Parameter budgets on the coverage-greedy curve: geometric "
                           "from the smallest model to the whole pool's parameters.")
    tolerance: float = Field(default=0.005, description="A portfolio matches the full pool within this much "
                             "routing accuracy (0.005 = 0.5 point).")
    n_random: int = Field(default=5, description="Random portfolios per size (the baseline curve).")
    seed: int = Field(default=0, description="Seed of the random portfolios.")


def budget_grid(params_b: np.ndarray, n: int) -> list[float]:
    """Geometric budgets from the smallest known model to the pool's total known parameters (both included)."""
    known = params_b[np.isfinite(params_b) & (params_b > 0)]
    if len(known) == 0:
        return []
    return sorted({round(float(b), 3) for b in np.geomspace(known.min(), known.sum(), max(2, n))} | {float(known.sum())})


def portfolio_sizes(m: int, max_k: int = 0) -> list[int]:
    """The k curves' portfolio sizes: every k up to max_k (0 = the pool) while k <= DENSE_K, then GEOMETRIC_K
    sizes spaced geometrically up to max_k, which is always included (pools up to DENSE_K models: 1..m)."""
    top = min(max_k, m) if max_k > 0 else m
    dense = list(range(1, min(top, DENSE_K) + 1))
    if top <= DENSE_K:
        return dense
    return sorted(set(dense) | {int(round(k)) for k in np.geomspace(DENSE_K, top, GEOMETRIC_K + 1)} | {top})


@dg.asset(kinds={"numpy"}, group_name=GROUP, owners=OWNERS)
def portfolios(
    context: dg.AssetExecutionContext,
    config: PortfolioConfig,
    model_embeddings: pd.DataFrame,
    heldout_predictions: pd.DataFrame,
    model_catalog: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """k-center and k-medoids portfolios (curve over k) and coverage-greedy per parameter (curve over a
    total-parameter budget): routing accuracy when routing among the portfolio only, on the held-out queries,
    and the smallest portfolio within `tolerance` of the full pool. Parameter counts: the models file's
    params_b, else parsed from the name ("7b", "8x7b", "350m"); models with neither are never budgeted.
    Pools of more than 50 models get every k up to 50, then sizes spaced geometrically up to the pool
    (portfolio_sizes); k-medoids stops at max_k_medoids."""
    from locus_model.analysis import portfolio_curve
    from locus_model.analysis.portfolio import plot_curves
    from locus_model.data.catalog import params_for_models

    names, z, preds, excluded = labelled_pool(model_embeddings, heldout_predictions)
    ks = portfolio_sizes(len(names), config.max_k)
    medoid_ks = [k for k in ks if config.max_k_medoids <= 0 or k <= config.max_k_medoids]
    common = dict(names=names, tolerance=config.tolerance, n_random=config.n_random, seed=config.seed)
    curves = [portfolio_curve(z, preds.probs, preds.labels, method=m, ks=k, **common)
              for m, k in (("k_center", ks), ("k_medoids", medoid_ks))]
    params = params_for_models(names, model_catalog[["model", "params_b"]])
    budgets = budget_grid(params, config.n_budgets)
    if budgets:
        curves.append(portfolio_curve(z, preds.probs, preds.labels, method="coverage_greedy", budgets_b=budgets,
                                      params_b=params, **common))
    png = plot_curves(curves, home.dir("reports") / "portfolios.png")
    frames = []
    for c in curves:
        t = c.table().rename(columns={c.x_name: "x"})
        frames.append(t.assign(method=c.method, x_name=c.x_name, full_pool_accuracy=c.full_accuracy,
                               smallest_matching=(t["x"] == c.smallest_matching) if c.smallest_matching is not None else False))
    out = pd.concat(frames, ignore_index=True)[["method", "x_name", "x", "n_models", "routing_accuracy",
                                                "random_portfolio_accuracy", "params_b", "full_pool_accuracy",
                                                "smallest_matching", "portfolio"]]
    match = {c.method: c.smallest_matching for c in curves}
    fmt = {m: ("none on the curve" if v is None else f"{v:g}") for m, v in match.items()}
    unknown = int(np.isnan(params).sum())
    if budgets:
        found = match["coverage_greedy"]
        greedy = (("; coverage-greedy: no budget matches" if found is None else f"; coverage-greedy: budget {found:g}B")
                  + f" of the {float(np.nansum(params)):g}B known"
                  + (f" ({unknown} model(s) of unknown size are never chosen)" if unknown else ""))
    else:
        greedy = "; coverage-greedy: no parameter counts known"
    summary = (f"full pool of {len(names)} models: routing accuracy {curves[0].full_accuracy:.4f}; smallest k within "
               f"{100 * config.tolerance:g} point: k-center k = {fmt['k_center']}, k-medoids k = {fmt['k_medoids']}"
               + greedy + ".")
    body = "\n\n".join(c.to_markdown() for c in curves)
    if not budgets:
        body += "\n\nNo parameter count is known (models file or name), so there is no coverage-greedy curve."
    body += ("\n\nRouting among a portfolio: for every held-out query, the member with the highest predicted "
             "P(correct) answers (the correctness predictor's probabilities from the pool embeddings)."
             + excluded_note(excluded))
    publish(context, home, "portfolios", title="Portfolio selection", summary=summary, body=body,
            png=png, full_pool_routing_accuracy=float(curves[0].full_accuracy),
            **{f"smallest_{m}": (float(v) if v is not None else -1.0) for m, v in match.items()})
    return out

# ----------------------------------------------------------------------------- fallback


class FallbackConfig(dg.Config):
    n_random: int = Field(default=20, description="Draws of the random-substitute baseline.")
    seed: int = Field(default=0, description="Seed of the random substitutes.")
    metric: str = Field(default="euclidean", description="Nearest neighbour by euclidean or cosine distance.")


@dg.asset(kinds={"numpy"}, group_name=GROUP, owners=OWNERS)
def fallback_report(
    context: dg.AssetExecutionContext,
    config: FallbackConfig,
    model_embeddings: pd.DataFrame,
    heldout_predictions: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """When the routed model is unavailable, its nearest embedding neighbour answers: the share of routing
    accuracy kept (paper: 85%) against a random substitute and the router's own second choice."""
    from locus_model.analysis import fallback

    names, z, preds, excluded = labelled_pool(model_embeddings, heldout_predictions)
    result = fallback(z, preds.probs, preds.labels, names=names, seed=config.seed, n_random=config.n_random,
                      metric=config.metric)
    png = result.plot(home.dir("reports") / "fallback_report.png")
    summary = result.headline()
    publish(context, home, "fallback_report", title="Fallback routing", summary=summary,
            body=result.to_markdown() + excluded_note(excluded), png=png,
            share_kept=float(result.share_kept), random_share_kept=float(result.random_share_kept),
            second_choice_share_kept=float(result.second_choice_share_kept))
    return result.summary().assign(n_queries=result.n_queries)

# ----------------------------------------------------------------------------- near-duplicates


class NearDuplicatesConfig(dg.Config):
    resamples: int = Field(default=8, description="Independently resampled evaluation subsets per model (R); "
                           "the score's spread across seeds shrinks with R (about +-15% at R=5 on the demo pool).")
    fraction: float = Field(default=0.5, description="Share of a model's evaluation set kept in each resample.")
    threshold: float = Field(default=1.1, description="Near-duplicate when between-model distance / mean "
                             "within-model resampling spread is at most this (1 = indistinguishable).")
    seed: int = Field(default=0, description="Seed of the resamples.")
    max_pairs: int = Field(default=100_000, description="Model pairs kept in the output, lowest score first "
                           "(every pair is scored; a pool of 2,001 models has 2.0 million pairs).")


FLAGGED_LISTED = 50  # flagged pairs listed in the report; all of them are in the asset's output


@dg.asset(kinds={"pytorch"}, group_name=GROUP, owners=OWNERS)
def near_duplicates(
    context: dg.AssetExecutionContext,
    config: NearDuplicatesConfig,
    model_embeddings: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    model_catalog: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """Fingerprinting: every model embedded from `resamples` random subsets of the evaluation set its pool
    embedding came from; pairs whose distance stays within the models' own resampling spread are flagged.
    Also shows the cosine distance of the pool embeddings (paper: near-duplicates < 1e-5) and, where the
    models file has a duplicate_of column (the demo pool), which known re-uploads were found."""
    from locus_model.analysis import near_duplicates as score_pairs
    from locus_model.analysis import resample_embeddings
    from locus_model.analysis._common import paired_distances
    from locus_model.infer import embed_evaluation_sets
    from locus_model.pool import pool_matrix
    from locus_pipeline.reports import pool_evaluation_sets, torch_threads

    checkpoint = home.pool_checkpoint(model_embeddings)
    model = checkpoint.model
    onboarded = home.onboarded_evaluations()
    onboarded_enc = home.encode(onboarded, checkpoint.encoder, runtime=checkpoint.runtime)[0] if len(onboarded) else None
    sets = pool_evaluation_sets(model_embeddings, evaluation_table, training_split, query_encodings,
                                onboarded, onboarded_enc)
    with torch_threads(1):  # R batched forward passes over the M subsets (see torch_threads)
        resampled = resample_embeddings(None, sets.sets, config.resamples, config.fraction, config.seed,
                                        embed_many=lambda subsets: embed_evaluation_sets(model, sets.encodings, subsets))
    result = score_pairs(resampled, sets.names, threshold=config.threshold, max_pairs=config.max_pairs)
    png = result.plot(home.dir("reports") / "near_duplicates.png")
    names, z = pool_matrix(model_embeddings)
    rows = pd.Index(names)
    pairs = result.pairs.assign(pool_cosine_distance=paired_distances(
        z[rows.get_indexer(result.pairs["model_a"])], z[rows.get_indexer(result.pairs["model_b"])], metric="cosine"))
    known = _known_duplicates(model_catalog)
    pairs["known_duplicate"] = [frozenset((a, b)) in known for a, b in zip(pairs["model_a"], pairs["model_b"])]
    flagged = pairs[pairs["near_duplicate"]]
    summary = f"{result.n_flagged} near-duplicate pair(s) among {len(sets.names)} models ({config.resamples} resamples at {config.fraction:g})"
    if known:
        found = int(flagged["known_duplicate"].sum())
        summary += f"; known re-uploads found: {found} of {len(known)}, other pairs flagged: {result.n_flagged - found}"
    summary += "."
    listed = flagged.head(FLAGGED_LISTED)
    body = result.to_markdown() + "\n\nFlagged pairs with the pool embeddings' cosine distance:\n\n" + (
        escape_frame(listed[["model_a", "model_b", "score", "pool_cosine_distance", "known_duplicate"]]).to_markdown(index=False)
        if len(flagged) else "(none)") + (
        f"\n\n({result.n_flagged - len(listed)} more flagged pairs: the asset's output, `warehouse/near_duplicates.parquet`.)"
        if result.n_flagged > len(listed) else "")
    if sets.missing:
        body += f"\n\nNot resampled (evaluations not found): {', '.join(map(escape_markdown, sets.missing[:20]))}."
    publish(context, home, "near_duplicates", title="Near-duplicates / fingerprinting", summary=summary, body=body,
            png=png, flagged_pairs=len(flagged),
            known_duplicates_found=int(flagged["known_duplicate"].sum()), known_duplicates=len(known))
    return pairs


def _known_duplicates(model_catalog: pd.DataFrame) -> set[frozenset[str]]:
    if "duplicate_of" not in model_catalog.columns:
        return set()
    dup = model_catalog[model_catalog["duplicate_of"].fillna("").astype(str) != ""]
    return {frozenset((str(m), str(o))) for m, o in zip(dup["model"], dup["duplicate_of"])}

# ----------------------------------------------------------------------------- capability-profile search


class CapabilitySearchConfig(dg.Config):
    target: dict[str, float] = Field(default_factory=dict, description="Benchmark -> accuracy in [0, 1], e.g. "
                                     "{'synth-gsm8k': 0.9, 'synth-mmlu': 0.5}; empty = every benchmark at the "
                                     "pool's median accuracy.")
    k: int = Field(default=5, description="Nearest pool models to return.")
    n_per_benchmark: int = Field(default=64, description="Synthetic evaluations per benchmark.")
    seed: int = Field(default=0, description="Seed of the synthetic evaluation set.")


@dg.asset(kinds={"pytorch"}, group_name=GROUP, owners=OWNERS)
def capability_search(
    context: dg.AssetExecutionContext,
    config: CapabilitySearchConfig,
    model_embeddings: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    query_encodings: pd.DataFrame,
    training_split: pd.DataFrame,
    home: LocusHome,
) -> pd.DataFrame:
    """A synthetic evaluation set with the target per-benchmark accuracy (non-test queries), embedded with the
    pool's checkpoint; the k nearest pool models with their actual per-benchmark accuracy (same as `locus search`)."""
    from locus_pipeline.reports import capability_search_from_tables

    result = capability_search_from_tables(
        config.target, pool=model_embeddings, table=evaluation_table, encodings=query_encodings,
        split=training_split, model=home.pool_checkpoint(model_embeddings).model, onboarded=home.onboarded_evaluations(), k=config.k,
        n_per_benchmark=config.n_per_benchmark, seed=config.seed)
    png = result.plot(home.dir("reports") / "capability_search.png")
    summary = result.headline("pool median" if not config.target else "given")
    publish(context, home, "capability_search", title="Capability-profile search", summary=summary,
            body=result.to_markdown(), png=png,
            target=dg.MetadataValue.json(result.target))
    return result.neighbours

# ----------------------------------------------------------------------------- the atlas


@dg.asset(kinds={"plotly"}, group_name=GROUP, owners=OWNERS)
def model_atlas(
    context: dg.AssetExecutionContext,
    model_embeddings: pd.DataFrame,
    model_catalog: pd.DataFrame,
    evaluation_table: pd.DataFrame,
    portfolios: pd.DataFrame,
    home: LocusHome,
    mlflow: MlflowTracking,
) -> pd.DataFrame:
    """reports/atlas.html (also an artifact of the pool checkpoint's MLflow run, linked from here, the pool and
    every onboarded model): one self-contained page (Plotly inlined, opens offline) placing every pool model by
    a PCA of its embedding, the smallest k-center portfolio matching the full pool drawn as diamonds; clicking
    a model lists its nearest neighbours and per-benchmark accuracy."""
    from locus_model.analysis._common import new_figure, save_figure
    from locus_model.analysis.atlas import pca_projection, write_atlas
    from locus_model.pool import pool_matrix
    from locus_pipeline.reports import per_benchmark_accuracy

    names, z = pool_matrix(model_embeddings)
    families = catalog_column(names, model_catalog)
    kc = portfolios[portfolios["method"] == "k_center"]
    chosen = kc[kc["smallest_matching"]] if kc["smallest_matching"].any() else kc.tail(1)
    pool_names = set(names)  # built once: membership tests below are per model (a portfolio can be the whole pool)
    members = [m for m in str(chosen["portfolio"].iloc[0]).split(", ") if m in pool_names] if len(chosen) else []
    accuracy = per_benchmark_accuracy(evaluation_table, home.onboarded_evaluations())
    path = write_atlas(home.dir("reports") / "atlas.html", embeddings=z, names=names, families=families,
                       per_benchmark_acc=accuracy, portfolio=members,
                       onboarded=model_embeddings.loc[model_embeddings["source"] == "onboarded", "model"].astype(str).tolist(),
                       title="LOCUS model atlas" + (" (SYNTHETIC pool)" if "SYNTHETIC" in data_note(home) else ""))
    checkpoint_id = str(model_embeddings["checkpoint_id"].iloc[0])
    current = home.read_table("locus_checkpoint")
    run = current.loc[current["checkpoint_id"].astype(str) == checkpoint_id, "mlflow_run_id"]
    if len(run) and mlflow.experiment_of_run(str(run.iloc[0])) is not None:  # where the pool's atlas link points
        mlflow.log_artifact(str(run.iloc[0]), path, ATLAS_ARTIFACT.rsplit("/", 1)[0])
    coords, ratio = pca_projection(z, 3)
    fig = new_figure(6.4, 5.0)
    ax = fig.add_subplot(1, 1, 1)
    member_set = set(members)
    member = np.array([n in member_set for n in names])
    ax.scatter(coords[~member, 0], coords[~member, 1], s=14, alpha=0.7, label="model")
    ax.scatter(coords[member, 0], coords[member, 1], s=60, marker="D", edgecolor="k", label="k-center portfolio")
    ax.set_xlabel(f"PC1 ({100 * ratio[0]:.1f}% of variance)")
    ax.set_ylabel(f"PC2 ({100 * ratio[1]:.1f}% of variance)")
    ax.set_title("Model embeddings, PCA (diamond = k-center portfolio)")
    ax.legend(fontsize=8)
    png = save_figure(fig, home.dir("reports") / "model_atlas.png")
    summary = (f"[atlas.html](atlas.html): {len(names)} models, k-center portfolio of {len(members)} highlighted; "
               "self-contained, opens without network.")
    publish(context, home, "model_atlas", title="Model atlas", summary=summary,
            body=f"Open `$LOCUS_HOME/{home.relative(path)}` in a browser (PCA 2-D/3-D, click a model for its neighbours).",
            png=png, atlas_path=home_path(home, path), portfolio_size=len(members),
            **atlas_link(home, mlflow, checkpoint_id))
    return pd.DataFrame({"model": names, "family": families, "pc1": coords[:, 0], "pc2": coords[:, 1],
                         "pc3": coords[:, 2], "in_portfolio": member})

# ----------------------------------------------------------------------------- the index


REPORTS = ("embedding_geometry", "family_clusters", "portfolios", "fallback_report", "near_duplicates",
           "capability_search", "model_atlas", "cost_frontier")


@dg.asset(kinds={"markdown"}, group_name=GROUP, owners=OWNERS, deps=list(REPORTS))
def analysis_reports(context: dg.AssetExecutionContext, home: LocusHome) -> pd.DataFrame:
    """reports/README.md: every analysis report with its one-line summary, and the other files in reports/."""
    from locus_pipeline.reports import report_summary

    folder = home.dir("reports")
    rows = []
    for name in REPORTS:
        md = folder / f"{name}.md"
        title = md.read_text(encoding="utf-8").splitlines()[0].lstrip("# ") if md.exists() else name
        rows.append({"report": name, "title": title, "file": md.name, "summary": report_summary(md) if md.exists() else "missing"})
    index = pd.DataFrame(rows)
    listed = {f"{n}.{ext}" for n in REPORTS for ext in ("md", "png")} | {"README.md"}
    others = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in listed)
    lines = ["# LOCUS reports", "", data_note(home), ""]
    lines += [f"- [{r.title}]({r.file}): {r.summary}" for r in index.itertuples()]
    if others:
        lines += ["", "Other files: " + ", ".join(f"[{o}]({o})" for o in others)]
    path = folder / "README.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    context.add_output_metadata({"index": dg.MetadataValue.md("\n".join(lines)), "path": home_path(home, path)})
    return index
