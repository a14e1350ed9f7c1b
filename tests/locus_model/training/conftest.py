"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from tests.locus_model.training.tiny_train import tiny_train_pool


@pytest.fixture(scope="module")
def tiny_pool():
    """The tiny pool's (encodings, train scores, val scores); a test that changes them copies them first."""
    return tiny_train_pool()
