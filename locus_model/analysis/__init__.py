"""What the LOCUS embedding space is for (arXiv 2601.21082, "downstream uses"), from the embeddings alone.

Every analysis takes plain arrays (model embeddings (M, d), names, predicted probs (M, Q), labels (M, Q) with
NaN = unknown) or, where a new embedding is needed, an `embed_fn(query_idx, scores) -> (d,)`, and returns a
frozen result that renders its own report: `headline()` (the summary line), `to_markdown()` (the body, every
user string escaped by locus_model.markdown), `table()` (a DataFrame), where a picture helps `plot(path)` (PNG),
and `figures()` (the numbers by name). Label-based analyses take `left_out`, the models the caller left out for
want of held-out labels, and name them in the report.

- geometry:         distance_vs_disagreement
- clustering:       family_clustering, cluster_pool (one tree scored against several groupings)
- portfolio:        k_center, k_medoids, coverage_greedy (the selectors)
- portfolio_curves: portfolio_curve (routing accuracy over k or a budget; parameter counts: data.catalog),
                    portfolios (the k-center, k-medoids and coverage-greedy curves of a pool)
- atlas:            write_atlas, model_atlas (an interactive 3-D map of the pool)
- fallback:         fallback (nearest-neighbour substitute when the routed model is unavailable)
- duplicates:       resample_embeddings, near_duplicates, known_duplicates
- capability:       capability_search
"""

from locus_model.analysis.capability import CapabilitySearch, capability_search
from locus_model.analysis.clustering import FamilyClustering, PoolClustering, cluster_pool, family_clustering
from locus_model.analysis.duplicates import (
    EmbedFn,
    NearDuplicates,
    known_duplicates,
    near_duplicates,
    resample_embeddings,
)
from locus_model.analysis.fallback import Fallback, fallback
from locus_model.analysis.geometry import Correlation, DistanceDisagreement, distance_vs_disagreement
from locus_model.analysis.portfolio import coverage, coverage_greedy, coverage_similarity, k_center, k_medoids
from locus_model.analysis.portfolio_curves import PortfolioCurve, Portfolios, portfolio_curve, portfolios

__all__ = [
    "CapabilitySearch",
    "capability_search",
    "Fallback",
    "fallback",
    "EmbedFn",
    "NearDuplicates",
    "near_duplicates",
    "resample_embeddings",
    "Correlation",
    "DistanceDisagreement",
    "FamilyClustering",
    "distance_vs_disagreement",
    "family_clustering",
    "PortfolioCurve",
    "coverage",
    "coverage_greedy",
    "coverage_similarity",
    "k_center",
    "k_medoids",
    "portfolio_curve",
    "PoolClustering",
    "cluster_pool",
    "known_duplicates",
    "Portfolios",
    "portfolios",
]
