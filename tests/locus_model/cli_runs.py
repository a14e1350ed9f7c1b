"""`locus evaluate` as the CLI's tests run it: a temporary user cache, one torch thread, tiny settings."""

from __future__ import annotations

import pytest
import torch

from locus_model.cli import main


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """Encoding caches go to a temporary user cache; one torch thread (tiny tensors, shared CPU)."""
    monkeypatch.setenv("LOCUS_CACHE_DIR", str(tmp_path / "cache"))
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def run_evaluate(tmp_path, table, *extra):
    out = tmp_path / "results.json"
    code = main(
        [
            "evaluate",
            "--evaluations",
            str(table),
            "--encoder",
            "hashing-256",
            "--budget",
            "16",
            "--epochs",
            "2",
            "--patience",
            "2",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--quiet",
            "--out",
            str(out),
            *extra,
        ]
    )
    return code, out
