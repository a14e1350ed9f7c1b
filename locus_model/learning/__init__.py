"""The learning loop's library part: the online learner of graded outcomes (``learner``), exploration only where
outcomes arrive (``exploration``) and the routing strategies that `locus serve` and the replay both call
(``strategies``)."""

from locus_model.learning.exploration import Exploration
from locus_model.learning.learner import POOLED, Learner, LearningConfig
from locus_model.learning.prior import EMBED_EVERY, embed_graded, pool_prior, prior_variance
from locus_model.learning.strategies import (
    MODES,
    Decision,
    Frozen,
    Learning,
    Query,
    Request,
    Strategy,
    Thompson,
    build_strategy,
)

__all__ = [
    "EMBED_EVERY",
    "MODES",
    "POOLED",
    "Decision",
    "Exploration",
    "Frozen",
    "Learner",
    "Learning",
    "LearningConfig",
    "Query",
    "Request",
    "Strategy",
    "Thompson",
    "build_strategy",
    "embed_graded",
    "pool_prior",
    "prior_variance",
]
