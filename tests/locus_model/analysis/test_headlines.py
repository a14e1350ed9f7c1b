"""Each analysis result says itself in one sentence (the report's Summary line), with exact numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from locus_model.analysis.capability import CapabilitySearch
from locus_model.analysis.fallback import Fallback
from locus_model.analysis.geometry import Correlation, DistanceDisagreement


def test_distance_disagreement_headline() -> None:
    pairs = np.array([0, 0, 1]), np.array([1, 2, 2])
    result = DistanceDisagreement(
        ("a", "b", "c"),
        *pairs,
        np.zeros(3),
        np.zeros(3),
        np.zeros(3),
        np.ones(3, int),
        Correlation(0.9, 0.8, 0.7),
        Correlation(0.6, 0.5, 0.4),
    )
    assert result.headline() == (
        "Pearson 0.900 (Euclidean) / 0.600 (cosine), Spearman 0.800 / 0.500, Kendall 0.700 / 0.400 between "
        "embedding distance and held-out disagreement, 3 pairs of 3 models (paper, EmbedLLM: Pearson 0.887 / 0.845, "
        "Spearman 0.876 / 0.886)."
    )


def test_fallback_headline() -> None:
    result = Fallback(
        n_queries=10,
        router_accuracy=0.8,
        fallback_accuracy=0.6,
        random_accuracy=0.4,
        random_accuracy_std=0.0,
        second_choice_accuracy=0.7,
        n_random=5,
        per_model=pd.DataFrame(),
    )
    assert result.headline() == (
        "nearest-neighbour fallback keeps 75.0% of routing accuracy (0.6000 of 0.8000); "
        "random substitute 50.0%, router's second choice 87.5% (paper: 85%)."
    )


def test_capability_search_headline() -> None:
    neighbours = pd.DataFrame({"rank": [1], "model": ["m"], "target_distance": [0.1], "embedding_distance": [0.25]})
    result = CapabilitySearch({"x": 0.5, "y": 0.9}, {"x": 0.5, "y": 0.9}, {"x": 2, "y": 10}, np.zeros(4), neighbours)
    assert result.headline("pool median") == (
        "closest to the target profile (pool median, 2 benchmarks): m "
        "(mean |actual - target| 0.100, embedding distance 0.25)."
    )
