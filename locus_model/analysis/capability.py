"""Capability-profile search: which real models look like a model with these per-benchmark accuracies?

Paper (arXiv 2601.21082): synthesize an evaluation set with the requested per-benchmark accuracy, embed it
like any model's evaluation set, and find the nearest real models in the embedding space. The models are ranked
by the distance the user asked about: target_distance, the mean |actual - target| accuracy over the target's
benchmarks only; the embedding distance to the synthetic set is shown beside it and breaks ties (and ranks the
models without an accuracy on every named benchmark, which come last).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from locus_model.analysis._common import check_embeddings, check_metric, check_names, markdown_table, pairwise_distances
from locus_model.analysis.duplicates import EmbedFn
from locus_model.figures import new_figure, save_figure
from locus_model.markdown import escape_markdown


@dataclass(frozen=True)
class CapabilitySearch:
    """The synthetic evaluation set and the k pool models closest to the target profile."""

    target: dict[str, float]  # requested accuracy per benchmark
    realised: dict[str, float]  # accuracy of the synthetic set per benchmark (exact counts / n)
    n_queries: dict[str, int]  # queries sampled per benchmark
    embedding: np.ndarray  # (d,) embedding of the synthetic evaluation set
    neighbours: pd.DataFrame  # rank, model, target_distance, embedding_distance, then actual accuracy per benchmark

    def table(self) -> pd.DataFrame:
        return self.neighbours

    def to_markdown(self) -> str:
        target = pd.DataFrame(
            {
                "benchmark": list(self.target),
                "target": list(self.target.values()),
                "synthetic": [self.realised[b] for b in self.target],
                "n_queries": [self.n_queries[b] for b in self.target],
            }
        )
        return (
            "**Capability-profile search**: the pool models ranked by target_distance = mean |actual - target| "
            "accuracy over the requested benchmarks only; embedding_distance = Euclidean distance between the "
            "model's embedding and that of a synthetic evaluation set with the requested accuracy (ties, and "
            "models without an accuracy on every requested benchmark, by it).\n\n"
            + markdown_table(target)
            + "\n\n"
            + markdown_table(self.neighbours, digits=3)
        )

    def headline(self, target_from: str = "given") -> str:
        """The closest model in one sentence; ``target_from`` says where the target came from ("pool median")."""
        top = self.neighbours.iloc[0]
        return (
            f"closest to the target profile ({target_from}, {len(self.target)} benchmarks): "
            f"{escape_markdown(top['model'])} "
            f"(mean |actual - target| {top['target_distance']:.3f}, embedding distance "
            f"{top['embedding_distance']:.4g})."
        )

    def plot(self, path: str | Path, *, top: int = 3) -> Path:
        """Per requested benchmark: the target accuracy beside the actual accuracy of the `top` nearest models."""
        benches = list(self.target)
        x = np.arange(len(benches))
        rows = self.neighbours.head(top)
        width = 0.8 / (len(rows) + 1)
        fig = new_figure(max(5.0, 0.9 * len(benches) + 2), 3.8)
        ax = fig.add_subplot(1, 1, 1)
        ax.bar(x, [self.target[b] for b in benches], width, color="k", label="target")
        for i, row in enumerate(rows.to_dict("records")):
            actual = [float(row.get(b, np.nan)) for b in benches]
            ax.bar(x + (i + 1) * width, actual, width, label=f"#{i + 1} {row['model']}")
        ax.set_xticks(x + 0.4 - width / 2, benches, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
        return save_figure(fig, path)


def capability_search(
    target: Mapping[str, float],
    *,
    benchmarks: np.ndarray,
    embed_fn: EmbedFn,
    pool_embeddings: np.ndarray,
    pool_names,
    pool_per_benchmark_acc: pd.DataFrame,
    encodings: np.ndarray | None = None,
    candidates: np.ndarray | None = None,
    n_per_benchmark: int = 64,
    seed: int = 0,
    k: int = 5,
    metric: str = "euclidean",
) -> CapabilitySearch:
    """The k pool models closest to the target per-benchmark accuracy, beside a synthetic set's embedding distance.

    Args:
        target: benchmark -> accuracy in [0, 1] (benchmarks absent from `target` get no queries).
        benchmarks: (Q,) benchmark of every query (the rows of the query encodings embed_fn uses).
        embed_fn: query indices (n,), scores (n,) -> embedding (d,), the same function that embedded the pool.
        pool_embeddings: (M, d); pool_names: M names; pool_per_benchmark_acc: index = model name,
            columns = benchmarks, the models' actual accuracies (reported beside the neighbours).
        encodings: (Q, D) query encodings, only checked against `benchmarks` (embed_fn closes over them).
        candidates: (Q,) bool, queries allowed in the synthetic set (e.g. the training split); default all.
        n_per_benchmark: queries sampled per benchmark (fewer if the benchmark has fewer candidates).
    Per benchmark: n queries are drawn without replacement (numpy default_rng(seed)), and exactly
    round(accuracy * n) of them, chosen at random, get score 1, the rest 0.
    Ranking: target_distance (mean |actual - target| over the target's benchmarks; NaN where a model has no
    accuracy on one of them: those come last), then the embedding distance to the synthetic set.
    """
    where = "capability_search"
    bench = np.asarray(benchmarks).astype(str)  # (Q,)
    if encodings is not None and len(encodings) != len(bench):
        raise ValueError(
            f"{where}: {len(encodings)} query encodings but {len(bench)} benchmarks. "
            "How to fix: pass the benchmark of every encoded query, in the same order."
        )
    allowed = np.ones(len(bench), dtype=bool) if candidates is None else np.asarray(candidates, dtype=bool)
    if allowed.shape != bench.shape:
        raise ValueError(
            f"{where}: candidates has shape {allowed.shape}, expected {bench.shape}. "
            "How to fix: pass one bool per query."
        )
    z = check_embeddings(pool_embeddings, where=where)
    names = check_names(pool_names, len(z), where=where)
    check_metric(metric, where=where)
    if not target:
        raise ValueError(f"{where}: empty target. How to fix: pass e.g. {{'gsm8k': 0.6, 'mmlu': 0.7}}.")
    rng = np.random.default_rng(seed)
    idx_parts, score_parts, realised, counts = [], [], {}, {}
    for b, acc in target.items():
        if not 0.0 <= float(acc) <= 1.0:
            raise ValueError(
                f"{where}: target accuracy for {b!r} is {acc}, outside [0, 1]. "
                "How to fix: give accuracies as fractions, e.g. 0.62."
            )
        pool = np.flatnonzero((bench == str(b)) & allowed)
        if len(pool) == 0:
            known = sorted(set(bench[allowed].tolist()))
            raise ValueError(f"{where}: no candidate queries for benchmark {b!r}. How to fix: use one of {known[:20]}.")
        n = min(int(n_per_benchmark), len(pool))
        idx = rng.choice(pool, size=n, replace=False)
        scores = np.zeros(n, dtype=np.float32)
        scores[rng.choice(n, size=int(round(float(acc) * n)), replace=False)] = 1.0
        idx_parts.append(idx)
        score_parts.append(scores)
        realised[str(b)], counts[str(b)] = float(scores.mean()), n
    emb = np.asarray(embed_fn(np.concatenate(idx_parts), np.concatenate(score_parts)), dtype=np.float64)
    if emb.shape != (z.shape[1],):
        raise ValueError(
            f"{where}: embed_fn returned shape {emb.shape}, expected ({z.shape[1]},) like the pool. "
            "How to fix: embed with the model that embedded the pool."
        )
    dist = pairwise_distances(emb[None, :], z, metric=metric)[0]  # (M,)
    acc_table = pool_per_benchmark_acc.set_axis(pool_per_benchmark_acc.index.astype(str), axis=0).reindex(names)
    wanted = pd.Series({str(b): float(a) for b, a in target.items()})
    gap = (acc_table.reindex(columns=wanted.index) - wanted).abs().mean(axis=1, skipna=False).to_numpy()  # (M,)
    order = np.lexsort((np.arange(len(z)), dist, np.nan_to_num(gap, nan=np.inf)))[: min(k, len(z))]
    neighbours = pd.concat(
        [
            pd.DataFrame(
                {
                    "rank": np.arange(1, len(order) + 1),
                    "model": [names[i] for i in order],
                    "target_distance": gap[order],
                    "embedding_distance": dist[order],
                }
            ),
            acc_table.iloc[order].reset_index(drop=True),
        ],
        axis=1,
    )
    return CapabilitySearch(
        target={str(b): float(a) for b, a in target.items()},
        realised=realised,
        n_queries=counts,
        embedding=emb,
        neighbours=neighbours,
    )
