"""From evaluation tables and a pool table to the downstream analyses (locus_model.analysis): what the
analysis assets and the `locus search` command share.

- test_query_predictions: P(correct) of every pool model on the test queries (asset test_query_predictions), beside its
labels
- prediction_matrices: that long table as (M, Q) probs / labels in pool order
- per_benchmark_accuracy / per_benchmark_answers: each model's actual accuracy per benchmark, and its answer count
- pool_evaluation_sets / embed_fn: the evaluation set every pool embedding came from, and a function that
  embeds new sets with the same checkpoint (for resampling and capability search)
- capability_search_from_tables: capability-profile search over a pool
- data_note: the line saying what data a report's numbers come from
- render_report: the text of one analysis's report (reports/<name>.md); render_index: reports/README.md's text
  (the assets write both through LocusHome.write_text: storage/ is the only writer under the home)

Onboarded models (source "onboarded" in the pool) have no labels on the test queries:
their label rows are all NaN, so label-based analyses leave them out while geometric ones keep them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from locus_model.analysis import CapabilitySearch, EmbedFn, capability_search
from locus_model.data.query_encodings import encoding_matrix
from locus_model.infer import embed_evaluation_sets
from locus_model.model import Locus
from locus_model.pool import pool_matrix
from locus_model.router import PoolScorer
from locus_model.routing.policy import RoutingPolicy, routing_scores
from locus_pipeline.tables import pool_evaluations

# ----------------------------------------------------------------------------- predictions on the test queries


def test_query_ids(split: pd.DataFrame) -> list[str]:
    """The test queries of the pipeline's split, sorted (never used for any pool embedding)."""
    ids = sorted(split.loc[split["split"] == "test", "query_id"].astype(str))
    if not ids:
        raise ValueError(
            "the training split has no test queries, so nothing is held out for the analyses. "
            "How to fix: split the queries with test_fraction > 0."
        )
    return ids


def test_query_predictions(
    scorer: PoolScorer,
    table: pd.DataFrame,
    encodings: pd.DataFrame,
    split: pd.DataFrame,
    policy: RoutingPolicy = RoutingPolicy(),
) -> pd.DataFrame:
    """Long table, one row per (pool model, test query): model, query_id, benchmark, prob, route_score, label.

    prob = the router's P(correct) of the pool's model (``scorer``: the checkpoint's Router.scorer of the pool);
    route_score = what ranks under the policy's guard (routing.policy.routing_scores) among the models with labels
    (the ones the analyses route among); label = its score on the query from the evaluation table, NaN where
    it has none (every onboarded model).
    """
    names = list(scorer.names)  # M
    qids = test_query_ids(split)
    phi = encoding_matrix(encodings, qids)  # (Q, D)
    probs = scorer.proba(phi)  # (M, Q)
    test = table[table["query_id"].astype(str).isin(set(qids))]
    labels = (
        test.assign(model=test["model"].astype(str), query_id=test["query_id"].astype(str))
        .pivot_table(index="model", columns="query_id", values="score", aggfunc="last")
        .reindex(index=names, columns=qids)
    )
    labelled = labels.notna().any(axis=1).to_numpy()  # (M,)
    route = routing_scores(probs, scorer.standing, policy.fixed_margin, labelled[:, None])
    bench = (
        table.drop_duplicates("query_id")
        .assign(query_id=lambda t: t["query_id"].astype(str))
        .set_index("query_id")["benchmark"]
        .astype(str)
        .reindex(qids)
        .to_numpy()
    )
    return pd.DataFrame(
        {
            "model": np.repeat(names, len(qids)),
            "query_id": np.tile(qids, len(names)),
            "benchmark": np.tile(bench, len(names)),
            "prob": probs.reshape(-1).astype(np.float64),
            "route_score": route.reshape(-1),
            "label": labels.to_numpy(np.float64).reshape(-1),
        }
    )


@dataclass(frozen=True)
class Predictions:
    """Held-out predictions as dense matrices, rows in the requested model order."""

    names: list[str]  # M
    query_ids: list[str]  # Q
    probs: np.ndarray  # (M, Q)
    labels: np.ndarray  # (M, Q), NaN = unknown
    route: np.ndarray  # (M, Q) what ranks: probs less the guard's handicap (test_query_predictions)

    @property
    def labelled(self) -> np.ndarray:
        """(M,) bool: the model has at least one label on the test queries (False for onboarded models)."""
        return ~np.isnan(self.labels).all(axis=1)

    def subset(self, keep: np.ndarray) -> "Predictions":
        keep = np.asarray(keep, dtype=bool)
        return Predictions(
            [n for n, k in zip(self.names, keep) if k],
            self.query_ids,
            self.probs[keep],
            self.labels[keep],
            self.route[keep],
        )


def prediction_matrices(predictions: pd.DataFrame, names: Sequence[str]) -> Predictions:
    """(M, Q) probs and labels from the test_query_predictions table, rows in `names` order."""
    names = [str(n) for n in names]
    missing = sorted(set(names) - set(predictions["model"].astype(str)))
    if missing:
        raise ValueError(
            f"no test-query predictions for models {missing[:5]}. How to fix: predict for the same pool "
            "the analysis reads (the pool changed in between)."
        )
    wide = predictions.assign(model=predictions["model"].astype(str), query_id=predictions["query_id"].astype(str))
    qids = sorted(wide["query_id"].unique())
    probs = wide.pivot(index="model", columns="query_id", values="prob").reindex(index=names, columns=qids)
    labels = wide.pivot(index="model", columns="query_id", values="label").reindex(index=names, columns=qids)
    route = (
        probs
        if "route_score" not in wide.columns
        # a table without routing scores: P ranks
        else (wide.pivot(index="model", columns="query_id", values="route_score").reindex(index=names, columns=qids))
    )
    return Predictions(names, qids, probs.to_numpy(np.float64), labels.to_numpy(np.float64), route.to_numpy(np.float64))


def per_benchmark_accuracy(*tables: pd.DataFrame) -> pd.DataFrame:
    """index = model, columns = benchmarks (sorted), values = mean score over all its evaluations.

    Several tables (the evaluation table, the onboarded evaluations) are stacked; a model's rows in a later
    table do not replace earlier ones (the pool never holds the same model from two sources)."""
    return _per_benchmark(tables, "mean")


def per_benchmark_answers(*tables: pd.DataFrame) -> pd.DataFrame:
    """The answers each per_benchmark_accuracy value rests on: same index and columns, values = counts."""
    return _per_benchmark(tables, "count")


def _per_benchmark(tables: Sequence[pd.DataFrame], aggfunc: str) -> pd.DataFrame:
    parts = [t[["model", "benchmark", "score"]] for t in tables if len(t)]
    if not parts:
        return pd.DataFrame()
    long = pd.concat(parts, ignore_index=True).astype({"model": str, "benchmark": str, "score": float})
    out = long.pivot_table(index="model", columns="benchmark", values="score", aggfunc=aggfunc)
    out.columns.name = None
    return out.sort_index(axis=1)


# ----------------------------------------------------------------------------- evaluation sets and embed_fn


@dataclass(frozen=True)
class EvaluationSets:
    """Query encodings and, per pool model, the evaluation set its pool embedding was computed from."""

    query_ids: list[str]  # Q
    encodings: np.ndarray  # (Q, D)
    benchmarks: np.ndarray  # (Q,) str
    names: list[str]  # pool models that have a set (pool order)
    sets: list[tuple[np.ndarray, np.ndarray]]  # per name: (query indices (n,), scores (n,))
    missing: list[str]  # pool models whose evaluations were not found


def pool_evaluation_sets(
    pool: pd.DataFrame,
    table: pd.DataFrame,
    split: pd.DataFrame,
    encodings: pd.DataFrame,
    onboarded: pd.DataFrame | None = None,
    onboarded_encodings: pd.DataFrame | None = None,
) -> EvaluationSets:
    """The evaluation sets the pool was embedded from (as model_embeddings does it).

    Training-pool models: all their evaluations outside the test queries; onboarded models: all their
    onboarded evaluations (their query encodings in `onboarded_encodings`, query_id + encoding).
    """
    enc = encodings[["query_id", "encoding"]]
    bench_of = table.drop_duplicates("query_id")[["query_id", "benchmark"]]
    evals = [pool_evaluations(table, split)[["model", "query_id", "score"]]]
    if onboarded is not None and len(onboarded):
        on = onboarded[~onboarded["model"].astype(str).isin(set(table["model"].astype(str)))]
        evals.append(on[["model", "query_id", "score"]])
        bench_of = pd.concat([bench_of, on.drop_duplicates("query_id")[["query_id", "benchmark"]]])
        if onboarded_encodings is not None:
            enc = pd.concat([enc, onboarded_encodings[["query_id", "encoding"]]])
    enc = enc.assign(query_id=enc["query_id"].astype(str)).drop_duplicates("query_id", keep="first")
    bench_of = bench_of.assign(query_id=bench_of["query_id"].astype(str)).drop_duplicates("query_id")
    index = pd.Index(enc["query_id"])
    long = pd.concat(evals, ignore_index=True).astype({"model": str, "query_id": str})
    long = long.assign(q=index.get_indexer(long["query_id"]))
    long = long[long["q"] >= 0]  # evaluations on queries without an encoding
    by_model = {m: (g["q"].to_numpy(np.int64), g["score"].to_numpy(np.float32)) for m, g in long.groupby("model")}
    pool_names = pool["model"].astype(str).tolist()
    names = [n for n in pool_names if n in by_model]
    return EvaluationSets(
        query_ids=index.tolist(),
        encodings=encoding_matrix(enc),
        benchmarks=bench_of.set_index("query_id")["benchmark"].astype(str).reindex(index).fillna("").to_numpy(),
        names=names,
        sets=[by_model[n] for n in names],
        missing=[n for n in pool_names if n not in by_model],
    )


def embed_fn(model: Locus, encodings: np.ndarray, *, device: str = "cpu") -> EmbedFn:
    """(query indices (n,), scores (n,)) -> (d,) embedding with this checkpoint, over these query encodings."""

    def embed(idx: np.ndarray, scores: np.ndarray) -> np.ndarray:
        return embed_evaluation_sets(model, encodings, [(np.asarray(idx), np.asarray(scores))], device=device)[0]

    return embed


# ----------------------------------------------------------------------------- capability-profile search


def parse_target(text: str) -> dict[str, float]:
    """ "synth-gsm8k=0.9,synth-mmlu=0.5" -> {"synth-gsm8k": 0.9, "synth-mmlu": 0.5}."""
    target: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.rpartition("=")
        try:
            acc = float(value)
        except ValueError:
            acc = float("nan")
        if not sep or not name.strip() or not 0.0 <= acc <= 1.0:
            raise ValueError(
                f"target entry {part!r} is not BENCHMARK=ACCURACY with an accuracy in [0, 1]. "
                "How to fix: write e.g. --target 'math=0.9,law=0.3' (the home's benchmarks)."
            )
        target[name.strip()] = acc
    if not target:
        raise ValueError("empty target. How to fix: write e.g. --target 'math=0.9,law=0.3' (the home's benchmarks).")
    return target


def median_profile(accuracy: pd.DataFrame) -> dict[str, float]:
    """Every benchmark at the pool's median accuracy (the default target)."""
    return {str(b): round(float(v), 4) for b, v in accuracy.median(axis=0, skipna=True).items() if pd.notna(v)}


def capability_search_from_tables(
    target: Mapping[str, float],
    *,
    pool: pd.DataFrame,
    table: pd.DataFrame,
    encodings: pd.DataFrame,
    split: pd.DataFrame,
    model: Locus,
    onboarded: pd.DataFrame | None = None,
    k: int = 5,
    n_per_benchmark: int = 64,
    seed: int = 0,
) -> CapabilitySearch:
    """Capability-profile search over the pool: a synthetic set from non-test queries, embedded with the
    pool's checkpoint; neighbours reported with their actual per-benchmark accuracy (all their evaluations).
    An empty target means every benchmark at the pool's median accuracy."""
    names, z = pool_matrix(pool)
    accuracy = per_benchmark_accuracy(table, onboarded if onboarded is not None else pd.DataFrame())
    queries = table.drop_duplicates("query_id").astype({"query_id": str}).sort_values("query_id")
    searchable = sorted(set(queries["benchmark"].astype(str)))  # an onboarded model's new benchmark has no queries here
    target = dict(target) or median_profile(
        accuracy.reindex(
            index=[n for n in names if n in accuracy.index], columns=[b for b in accuracy.columns if b in searchable]
        )
    )
    qids = queries["query_id"].tolist()
    phi = encoding_matrix(encodings, qids)  # (Q, D)
    test = set(test_query_ids(split))
    return capability_search(
        target,
        benchmarks=queries["benchmark"].astype(str).to_numpy(),
        embed_fn=embed_fn(model, phi),
        pool_embeddings=z,
        pool_names=names,
        pool_per_benchmark_acc=accuracy,
        encodings=phi,
        candidates=np.array([q not in test for q in qids]),
        n_per_benchmark=n_per_benchmark,
        seed=seed,
        k=min(k, len(names)),
    )


# ----------------------------------------------------------------------------- report files


def data_note(source: str, root: str) -> str:
    """One line saying what the numbers are computed on (the raw_evaluations table's source and root); the
    synthetic pool is called SYNTHETIC."""
    if source == "synthetic":
        return (
            "Data: the **SYNTHETIC** pool (`locus_model.data.synthetic`: made-up models drawn from a known latent "
            "model, not real LLMs): its numbers are not findings about real models."
        )
    if source == "mmlu_pro":
        return f"Data: **real** MMLU-Pro results of real models (`{root}`, data/mmlu-pro/README.md)."
    return f"Data: `{source}` evaluations from `{root}`."


def render_report(name: str, *, title: str, summary: str, body: str, note: str = "", png: Path | None = None) -> str:
    """The text of reports/<name>.md: a title, a one-line summary (the reports index quotes it), the PNG (if any,
    drawn beforehand at `png`) linked by relative path, a data note and the body: what a reader wants first.
    The asset writes it through LocusHome.write_text."""
    parts = [f"# {title}", f"Summary: {summary}"]
    if png is not None:
        parts.append(f"![{name}]({Path(png).name})")
    if note:
        parts.append(note)
    parts.append(body)
    return "\n\n".join(parts) + "\n"


def report_summary(text: str) -> str:
    """The `Summary:` line of a report's text (render_report's; "" when absent)."""
    for line in text.splitlines():
        if line.startswith("Summary: "):
            return line[len("Summary: ") :]
    return ""


def render_index(reports: Mapping[str, str | None], files: Sequence[str], note: str = "") -> tuple[pd.DataFrame, str]:
    """The text of reports/README.md: every report of ``reports`` (name -> its text, None when not written) with its
    title and summary line, in that order, then the folder's other ``files``. Returns (one row per report: report,
    title, file, summary; the text)."""
    rows = []
    for name, text in reports.items():
        title = text.splitlines()[0].lstrip("# ") if text else name
        rows.append(
            {
                "report": name,
                "title": title,
                "file": f"{name}.md",
                "summary": report_summary(text) if text else "missing",
            }
        )
    index = pd.DataFrame(rows)
    listed = {f"{n}.{ext}" for n in reports for ext in ("md", "png")} | {"README.md"}
    others = sorted(f for f in files if f not in listed)
    lines = ["# LOCUS reports", "", note, ""] if note else ["# LOCUS reports", ""]
    lines += [f"- [{r.title}]({r.file}): {r.summary}" for r in index.itertuples()]
    if others:
        lines += ["", "Other files: " + ", ".join(f"[{o}]({o})" for o in others)]
    return index, "\n".join(lines)
