"""scripts/screenshot.py on the atlas: 14+ families in distinct colours, onboarded models shown as such, every
benchmark label of the selected model's bars drawn. End-to-end tier: needs chromium (.ci/run installs it)."""

from __future__ import annotations

import re
import sys
import urllib.parse
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import screenshot  # noqa: E402

needs_chromium = pytest.mark.skipif(
    screenshot.chromium() is None,
    reason="chromium is not installed (Debian's chromium and chromium-driver: README, Tests)",
)


def _atlas(tmp_path, n_families: int = 16, per_family: int = 2):
    from locus_model.analysis.atlas import write_atlas

    rng = np.random.default_rng(0)
    m = n_families * per_family + 2  # two onboarded models of unknown family at the end
    z = rng.normal(size=(m, 8))
    names = [f"model-{i}" for i in range(m)]
    families = [f"family-{i // per_family:02d}" for i in range(m - 2)] + ["", ""]
    benchmarks = ["computer science", "engineering", "health", "history", "philosophy", "a-very-long-benchmark-name"]
    acc = pd.DataFrame(rng.random((m, len(benchmarks))), index=names, columns=benchmarks)
    page = write_atlas(
        tmp_path / "atlas.html",
        embeddings=z,
        names=names,
        families=families,
        per_benchmark_acc=acc,
        onboarded=names[-2:],
    )
    return page, names, benchmarks


def test_the_atlas_labels_onboarded_models_and_has_a_colour_per_family(tmp_path):
    page, _, _ = _atlas(tmp_path)
    text = page.read_text(encoding="utf-8")
    assert '"name":"onboarded"' in text.replace(" ", "") and "unknown family" not in text.split("<script>")[-2]


@needs_chromium
@pytest.mark.e2e
def test_screenshot_of_the_atlas(tmp_path):
    page, names, benchmarks = _atlas(tmp_path)
    png, dom = tmp_path / "atlas.png", tmp_path / "atlas.dom.html"
    url = page.resolve().as_uri() + "#model=" + urllib.parse.quote(names[-1])
    assert screenshot.main([url, str(png), "--dom", str(dom)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and int.from_bytes(png.read_bytes()[16:20], "big") == 1280
    html = dom.read_text(encoding="utf-8")
    plot2d = html.split('id="atlas-2d"', 1)[1].split('id="atlas-3d"', 1)[0]
    points = re.findall(r'<path class="point[^"]*"[^>]*style="[^"]*fill: (rgb\([^)]*\))', plot2d)
    assert len(points) == len(names) and len(set(points)) == 17  # 16 families + onboarded, no colour repeated
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', plot2d)
    assert "onboarded" in legend and "unknown family" not in legend
    assert 'data-selected="model-33"' in html and "(onboarded)" in html  # the selected onboarded model says so
    bars = html.split('id="benchmark-bars"', 1)[1]
    ticks = re.findall(r'<g class="ytick"><text[^>]*data-unformatted="([^"]*)"', bars)
    assert ticks[::-1] == benchmarks  # every label drawn (top to bottom), none dropped for lack of room
