"""What is known of a model from its evaluations: one posterior per (model, cell) that every estimate, question
choice and online update reads (``posterior.CellPosterior``), and the refined embedding (``embedding``)."""

from locus_model.estimates.embedding import *  # noqa: F401,F403 (the package's public names, listed there)
from locus_model.estimates.embedding import __all__ as _embedding_all
from locus_model.estimates.posterior import ROBUST_WEIGHT, CellPosterior

__all__ = [*_embedding_all, "ROBUST_WEIGHT", "CellPosterior"]
