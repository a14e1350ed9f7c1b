"""What the LOCUS embedding space is for (arXiv 2601.21082, "downstream uses"), from the embeddings alone.

Every analysis takes plain arrays (model embeddings (M, d), names, predicted probs (M, Q), labels (M, Q) with
NaN = unknown) or, where a new embedding is needed, an `embed_fn(query_idx, scores) -> (d,)`, and returns a
frozen result with `table()` (a DataFrame), `to_markdown()`, where a picture helps `plot(path)` (PNG), and
where one sentence says it, `headline()` (a report's summary line).

- geometry:    distance_vs_disagreement, family_clustering
- portfolio:   k_center, k_medoids, coverage_greedy, portfolio_curve (parameter counts: data.catalog)
- atlas:       write_atlas (an interactive 3-D map of the pool)
- fallback:    fallback (nearest-neighbour substitute when the routed model is unavailable)
- fingerprint: resample_embeddings, near_duplicates
- capability:  capability_search
"""

from locus_model.analysis.capability import CapabilitySearch, capability_search
from locus_model.analysis.fallback import Fallback, fallback
from locus_model.analysis.fingerprint import EmbedFn, NearDuplicates, near_duplicates, resample_embeddings
from locus_model.analysis.geometry import (Correlation, DistanceDisagreement, FamilyClustering,
                                           distance_vs_disagreement, family_clustering)
from locus_model.analysis.portfolio import (PortfolioCurve, coverage, coverage_greedy, coverage_similarity,
                                            k_center, k_medoids, portfolio_curve)

__all__ = [
    "CapabilitySearch", "capability_search", "Fallback", "fallback", "EmbedFn", "NearDuplicates",
    "near_duplicates", "resample_embeddings", "Correlation", "DistanceDisagreement", "FamilyClustering",
    "distance_vs_disagreement", "family_clustering", "PortfolioCurve", "coverage", "coverage_greedy",
    "coverage_similarity", "k_center", "k_medoids", "portfolio_curve",
]
