"""Fallback routing: when the routed model is unavailable, send the query to its nearest neighbour.

Paper (arXiv 2601.21082): nearest-neighbour fallback in the embedding space keeps 85% of routing accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from locus_model.analysis._common import (
    check_embeddings,
    check_metric,
    check_names,
    check_probs_labels,
    left_out_note,
    markdown_table,
    pairwise_distances,
)
from locus_model.figures import new_figure, save_figure


@dataclass(frozen=True)
class Fallback:
    """Routing accuracy when every routed model is unavailable, by choice of substitute."""

    n_queries: int  # queries with >= 2 labelled models (a substitute exists)
    router_accuracy: float  # routing accuracy of the full router on those queries
    fallback_accuracy: float  # accuracy when the routed model's nearest embedding neighbour answers
    random_accuracy: float  # mean over seeds: a uniformly random other labelled model answers
    random_accuracy_std: float  # std of that over the seeds
    second_choice_accuracy: float  # the router's own second-best model answers (needs probs, not embeddings)
    n_random: int
    per_model: pd.DataFrame  # one row per routed model: how often routed, its neighbour, accuracies
    left_out: tuple[str, ...] = ()  # models left out before the call (no held-out labels)

    @property
    def share_kept(self) -> float:
        """fallback_accuracy / router_accuracy (paper: 0.85)."""
        return self.fallback_accuracy / self.router_accuracy if self.router_accuracy > 0 else float("nan")

    @property
    def random_share_kept(self) -> float:
        return self.random_accuracy / self.router_accuracy if self.router_accuracy > 0 else float("nan")

    @property
    def second_choice_share_kept(self) -> float:
        return self.second_choice_accuracy / self.router_accuracy if self.router_accuracy > 0 else float("nan")

    def headline(self) -> str:
        """The result in one sentence, beside the paper's number."""
        return (
            f"nearest-neighbour fallback keeps {100 * self.share_kept:.1f}% of routing accuracy "
            f"({self.fallback_accuracy:.4f} of {self.router_accuracy:.4f}); random substitute "
            f"{100 * self.random_share_kept:.1f}%, router's second choice {100 * self.second_choice_share_kept:.1f}% "
            "(paper: 85%)."
        )

    def summary(self) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {"substitute": "none (full router)", "routing_accuracy": self.router_accuracy, "share_kept": 1.0},
                {
                    "substitute": "nearest embedding neighbour",
                    "routing_accuracy": self.fallback_accuracy,
                    "share_kept": self.share_kept,
                },
                {
                    "substitute": f"random other model (mean of {self.n_random})",
                    "routing_accuracy": self.random_accuracy,
                    "share_kept": self.random_share_kept,
                },
                {
                    "substitute": "router's second choice",
                    "routing_accuracy": self.second_choice_accuracy,
                    "share_kept": self.second_choice_share_kept,
                },
            ]
        )

    def table(self) -> pd.DataFrame:
        return self.per_model

    def to_markdown(self) -> str:
        return (
            f"**Fallback routing** ({self.n_queries} queries; the routed model is always unavailable). "
            f"Nearest-neighbour fallback keeps {100 * self.share_kept:.1f}% of routing accuracy "
            f"(random substitute: {100 * self.random_share_kept:.1f}% +- "
            f"{100 * self.random_accuracy_std / max(self.router_accuracy, 1e-12):.1f}; paper: 85%).\n\n"
            + markdown_table(self.summary())
            + "\n\nMost-routed models:\n\n"
            + markdown_table(self.per_model, max_rows=15)
            + left_out_note(self.left_out)
        )

    def figures(self) -> dict[str, float]:
        return {
            "share_kept": float(self.share_kept),
            "random_share_kept": float(self.random_share_kept),
            "second_choice_share_kept": float(self.second_choice_share_kept),
        }

    def plot(self, path: str | Path) -> Path:
        s = self.summary()
        fig = new_figure(6.4, 3.6)
        ax = fig.add_subplot(1, 1, 1)
        ax.barh(s["substitute"][::-1], s["routing_accuracy"][::-1], color=["C2", "C7", "C0", "C1"])
        ax.set_xlabel("routing accuracy")
        ax.set_title("When the routed model is unavailable")
        return save_figure(fig, path)


def fallback(
    embeddings: np.ndarray,
    probs: np.ndarray,
    labels: np.ndarray,
    *,
    seed: int = 0,
    names=None,
    n_random: int = 20,
    metric: str = "euclidean",
    left_out=(),
) -> Fallback:
    """Share of routing accuracy kept when each routed model is replaced by its nearest embedding neighbour.

    For every query with at least two labelled models: the router picks r = argmax of probs among the
    labelled models (ties: lowest index), and its substitute is the labelled model other than r nearest to r
    in embedding space (ties: lowest index). Scored on exactly those queries:
        router accuracy   = mean label of r         (= locus_model.stats.metrics.routing_accuracy on these queries)
        fallback accuracy = mean label of the substitute
        share kept        = fallback accuracy / router accuracy.
    Baselines, same queries: a uniformly random other labelled model (mean and std over n_random draws from
    numpy's default_rng(seed)), and the router's second choice (the next-highest probability).
    left_out: names of models the caller left out (no held-out labels), named by the report.
    Memory: O((M + U) Q) for U distinct routed models: distances only from those to the pool, no (M, M) matrix.
    """
    where = "fallback"
    z = check_embeddings(embeddings, where=where, min_models=2)
    names = check_names(names, len(z), where=where)
    check_metric(metric, where=where)
    p, y = check_probs_labels(probs, labels, len(z), where=where)
    known = ~np.isnan(y)  # (M, Q)
    keep = known.sum(axis=0) >= 2
    if not keep.any():
        raise ValueError(
            f"{where}: no query has labels for two or more models, so no substitute exists. "
            "How to fix: pass a label matrix where queries are answered by several models."
        )
    p, y, known = p[:, keep], y[:, keep], known[:, keep]
    q = np.arange(p.shape[1])
    routed = np.argmax(np.where(known, p, -np.inf), axis=0)  # (Q,)
    others = known.copy()
    others[routed, q] = False  # (M, Q) candidate substitutes
    used, slot = np.unique(routed, return_inverse=True)  # U routed models (U <= min(M, Q)), routed = used[slot]
    d = pairwise_distances(z[used], z, metric=metric)  # (U, M): only routed models' rows, never (M, M)
    substitute = np.argmin(np.where(others, d[slot].T, np.inf), axis=0)  # (Q,)
    second = np.argmax(np.where(others, p, -np.inf), axis=0)
    rng = np.random.default_rng(seed)
    rand_acc = np.array(
        [y[np.argmax(np.where(others, rng.random(others.shape), -1.0), axis=0), q].mean() for _ in range(n_random)]
    )
    router_acc = float(y[routed, q].mean())  # = routing_accuracy(p, y); computed here so it uses the same picks

    d_self = d.copy()
    d_self[np.arange(len(used)), used] = np.inf
    nn_global = np.argmin(d_self, axis=1)  # (U,) each routed model's nearest other model overall
    rows = []
    for u, m in enumerate(used):
        sel = routed == m
        rows.append(
            {
                "model": names[m],
                "n_routed": int(sel.sum()),
                "nearest_neighbour": names[nn_global[u]],
                "distance": float(d[u, nn_global[u]]),
                "accuracy_routed": float(y[m, q[sel]].mean()),
                "accuracy_fallback": float(y[substitute[sel], q[sel]].mean()),
            }
        )
    per_model = pd.DataFrame(rows).sort_values(["n_routed", "model"], ascending=[False, True], ignore_index=True)
    return Fallback(
        n_queries=int(keep.sum()),
        router_accuracy=router_acc,
        fallback_accuracy=float(y[substitute, q].mean()),
        random_accuracy=float(rand_acc.mean()) if n_random else float("nan"),
        random_accuracy_std=float(rand_acc.std()) if n_random else float("nan"),
        second_choice_accuracy=float(y[second, q].mean()),
        n_random=n_random,
        per_model=per_model,
        left_out=tuple(map(str, left_out)),
    )
