"""Fixtures shared by the library tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_torch_thread():
    """Tiny tensors on a shared 2-core machine: one thread is several times faster than two."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
