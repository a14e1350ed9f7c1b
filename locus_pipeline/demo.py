"""`make demo`: materialize the whole graph on the embedded demo data, then say where things are.

Usage: python -m locus_pipeline.demo [--source mmlu_pro|synthetic] [--max-queries N] [--size full|small] [--encoder
NAME]

The default is real data: the vendored MMLU-Pro matrix (29 models; data/mmlu-pro/README.md), on a subset of
DEMO_QUERIES of its 12,032 questions stratified by category, so that encoding the question texts stays within the
demo's time (the whole matrix: --max-queries 0). --source synthetic runs on the generated pool with a known latent
structure (the tests' planted-truth fixture).

The training uses the library's defaults (locus_model.training.TrainConfig): the demo shows the router the
defaults give, not a shortened one. Every step's wall time is printed at the end, then a few routing decisions on
test questions at two quality weights (what the cost knob of `locus serve` changes).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

from locus_pipeline.instance import prepare_dagster_home

DEMO_QUERIES = 1500  # MMLU-Pro questions in the demo (stratified by category; bench/README.md "make demo")
# The small synthetic pool (24 models, 600 queries: ~400 training queries) cannot hold the default budget of 512
# anchors.
SMALL_OPS = {"training_split": {"config": {"budget": 256}}}


EXAMPLE_WEIGHTS = (1.0, 0.5)  # the quality weights the demo's routing examples compare
EXAMPLE_QUERIES = 30  # test questions routed for the counts; one per benchmark of them shown


def routing_examples(
    home, *, weights=EXAMPLE_WEIGHTS, n_queries: int = EXAMPLE_QUERIES, shown: int = 6, seed: int = 0
) -> str:
    """Test questions of the home (never trained on) routed over its pool by `locus serve`'s rule
    (locus_model.routing.route_many) at each quality weight, with the catalog's costs: how many distinct models
    are chosen at each weight, then a few questions (one per benchmark) with the model chosen at each."""
    # why: scripts/dev.sh imports DEMO_QUERIES from here: numpy, Dagster and torch load when the demo runs
    import numpy as np

    from locus_model.routing import RoutingPolicy, cost_info, cost_table, estimate_tokens, route_many

    pool = home.read_pool()
    pool = pool[pool["routable"]]
    checkpoint = home.pool_checkpoint(pool)
    scorer = checkpoint.router.scorer(pool)
    names = list(scorer.names)
    split = home.read_table("training_split", columns=["query_id", "split"])
    table = home.read_table("evaluation_table", columns=["query_id", "query", "benchmark"]).drop_duplicates("query_id")
    test = table[table["query_id"].isin(split.loc[split["split"] == "test", "query_id"])]
    test = test.sample(min(n_queries, len(test)), random_state=seed).reset_index(drop=True)
    encodings, _ = home.encode(test, checkpoint.encoder, runtime=checkpoint.runtime)
    probs = scorer.proba(np.stack(encodings["encoding"].to_numpy()))  # (M, Q)
    catalog = home.read_table("model_catalog") if home.table_path("model_catalog").exists() else None
    costs = cost_table(names, cost_info(catalog))
    per_query = np.stack([costs.costs(estimate_tokens(q)) for q in test["query"]], axis=1)  # (M, Q)
    chosen = {
        w: route_many(probs, per_query, RoutingPolicy(quality_weight=w), standing=scorer.standing) for w in weights
    }
    lines = [
        f"Routing {len(test)} test questions over the pool's {len(names)} routable models, as `locus serve` "
        f"does: score = w * P(correct) - (1 - w) * cost / max cost (cost basis: {costs.basis}; {costs.note})"
    ]
    for w in weights:
        models = [names[i] for i in chosen[w]]
        top, count = max(((m, models.count(m)) for m in set(models)), key=lambda mc: mc[1])
        lines.append(
            f"  w={w:g}: {len(set(models))} distinct model(s) chosen; most often {top} ({count} of {len(models)})"
        )
    lines.append("")
    for q in test.drop_duplicates("benchmark").head(shown).index:
        text = " ".join(str(test.at[q, "query"]).split())

        def cost(c: float) -> str:  # a model of unknown cost (no size, no price) says so, never "nan"
            return "cost unknown" if c != c else f"cost {c:.3g}"

        picks = "   ".join(
            f"w={w:g}: {names[chosen[w][q]]} (P={probs[chosen[w][q], q]:.2f}, {cost(per_query[chosen[w][q], q])})"
            for w in weights
        )
        lines.append(f"  [{test.at[q, 'benchmark']}] {text[:60]}{'...' if len(text) > 60 else ''}\n      {picks}")
    lines += [
        "",
        "At w=1 the model with the best P(correct) wins; when one model is the strongest on nearly every "
        "question (MMLU-Pro's pool: a frontier model), it takes nearly all of them. Lower w (locus:0.5, "
        "--quality-weight) trades P(correct) for cost; models of unknown cost are left out then. Caps "
        "(max_cost, max_params) and candidates restrict the choice per request (docs/serve.md).",
    ]
    return "\n".join(lines)


def step_windows(instance, run_id: str) -> dict[str, tuple[float, float, bool]]:
    """step -> (start, end, succeeded) from the run's STEP_START / STEP_SUCCESS / STEP_FAILURE events."""
    start, out = {}, {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type_value == "STEP_START":
            start[event.step_key] = entry.timestamp
        elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and event.step_key in start:
            out[event.step_key] = (start[event.step_key], entry.timestamp, event.event_type_value == "STEP_SUCCESS")
    return out


def step_seconds(instance, run_id: str) -> dict[str, float]:
    """Wall seconds of every step of a finished run (step_windows)."""
    return {step: end - begin for step, (begin, end, _) in step_windows(instance, run_id).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source",
        default="mmlu_pro",
        choices=["mmlu_pro", "synthetic"],
        help="demo data (default mmlu_pro: real models)",
    )
    parser.add_argument(
        "--max-queries",
        type=int,
        default=DEMO_QUERIES,
        help=f"mmlu_pro: questions used (default {DEMO_QUERIES}; 0 = all 12,032)",
    )
    parser.add_argument("--size", default="full", choices=["full", "small"], help="synthetic pool size (default full)")
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2", help="sentence encoder for the queries")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore", message="Handling yaml-defined logging configuration")  # dagster.yaml's run lines

    # why: scripts/dev.sh imports DEMO_QUERIES from here: numpy, Dagster and torch load when the demo runs
    import dagster as dg

    from locus_pipeline.definitions import defs
    from locus_pipeline.intake import DropFolder
    from locus_pipeline.storage import LocusHome

    home = LocusHome()
    dagster_home = prepare_dagster_home(home.path)
    DropFolder(home).ensure()  # the drop folder exists from the start: drop files there to onboard models
    if args.source == "mmlu_pro":
        ops = {
            "raw_evaluations": {"config": {"source": "mmlu_pro"}},
            "evaluation_table": {"config": {"max_queries": args.max_queries}},
        }
    else:
        ops = {
            "raw_evaluations": {"config": {"source": "synthetic", "synthetic_size": args.size}},
            **(SMALL_OPS if args.size == "small" else {}),
        }
    run_config = {"ops": {**ops, "query_encodings": {"config": {"encoder": args.encoder}}}}
    start = time.perf_counter()
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        result = (
            defs()
            .resolve_job_def("locus_job")
            .execute_in_process(instance=instance, run_config=run_config, raise_on_error=False)
        )
        wall = time.perf_counter() - start
        print(f"\nlocus_job {'succeeded' if result.success else 'FAILED'} in {wall:.0f} s (run {result.run_id})")
        for step, seconds in sorted(step_seconds(instance, result.run_id).items(), key=lambda kv: -kv[1]):
            print(f"  {seconds:7.1f} s  {step}")
    root = home.path
    data = (
        "real MMLU-Pro results, " + (f"{args.max_queries} questions" if args.max_queries else "all questions")
        if args.source == "mmlu_pro"
        else "the SYNTHETIC pool"
    )
    print(f"  LOCUS_HOME            {root}  (data: {data})")
    print(f"  pool table            {home.pool_path}")
    print(f"  warehouse (Parquet)   {root / 'warehouse'}")
    print(f"  reports               {root / 'reports'}  (atlas.html, routing_evaluation.json, ...)")
    print(f"  drop folder           {root / 'incoming'}  (drop an evaluation file here to onboard a model)")
    print(f"  MLflow                {root / 'mlflow' / 'mlflow.db'}  (make dev opens the UI)")
    print(f"  Dagster runs          {dagster_home}  (make dev opens the UI)")
    if result.success:
        for event in result.get_asset_materialization_events():
            materialization = event.step_materialization_data.materialization
            if materialization.asset_key.to_user_string() == "locus_checkpoint":
                url = materialization.metadata.get("mlflow_run")
                print(f"  MLflow run            {url.value if url else '?'}")
        print("\n" + routing_examples(home))
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
