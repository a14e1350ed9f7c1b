"""What is known of a newcomer from its evaluations: one estimator fitted on the pool (``estimator.Estimator``) and
the pieces it reads -- the benchmarks' coding (``coding``), the pool's low-rank prior (``lowrank``), the per-cell
posterior every estimate, question choice and online update reads (``posterior.CellPosterior``), per-benchmark
accuracy with intervals (``capability``), the refined embedding (``embedding``), the models it answers like
(``likeness``), reference scores (``reference``) and the question choice (``questions``)."""

from locus_model.estimates.capability import (
    Capability,
    accuracy_from_proba,
    benchmark_posterior,
    beta_binomial_capability,
    capability_of,
)
from locus_model.estimates.coding import LEVEL, Benchmarks, benchmark_means, draw_sets, z_of
from locus_model.estimates.embedding import Posterior, encoder_spread, refine_embeddings
from locus_model.estimates.estimator import Estimator, EstimatorConfig
from locus_model.estimates.likeness import answer_agreement, answer_likeness
from locus_model.estimates.lowrank import LowRank, LowRankPrior, prior_variance, simulate_prior_error
from locus_model.estimates.posterior import ROBUST_WEIGHT, CellPosterior
from locus_model.estimates.reference import ReferenceMap, fit_reference_map, reference_estimates

__all__ = [
    "LEVEL",
    "ROBUST_WEIGHT",
    "Benchmarks",
    "Capability",
    "CellPosterior",
    "Estimator",
    "EstimatorConfig",
    "LowRank",
    "LowRankPrior",
    "Posterior",
    "ReferenceMap",
    "accuracy_from_proba",
    "answer_agreement",
    "answer_likeness",
    "benchmark_means",
    "benchmark_posterior",
    "beta_binomial_capability",
    "capability_of",
    "draw_sets",
    "encoder_spread",
    "fit_reference_map",
    "prior_variance",
    "reference_estimates",
    "refine_embeddings",
    "simulate_prior_error",
    "z_of",
]
