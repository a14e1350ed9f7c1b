"""The atlas page: self-contained HTML, and (in headless Chromium) its points and neighbour list render."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import urllib.parse

import numpy as np
import pandas as pd
import pytest

from locus_model.analysis.atlas import pca_projection, write_atlas

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    """Path of a headless Chromium; the test skips where it is absent (tests never install system packages)."""
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (Debian's chromium and chromium-driver: README, Tests)")
    return path


def _pool(m: int = 9, d: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    z = np.concatenate([c + 0.3 * rng.normal(size=(m // 3, d)) for c in 3.0 * np.eye(d)[:3]])
    names = [f"org/model-{i}b v<{i}>" for i in range(m)]  # slashes, spaces and markup must survive
    families = ["llama"] * 3 + ["qwen"] * 3 + [""] * 3
    acc = pd.DataFrame(rng.random((m - 1, 3)), index=names[:-1], columns=["gsm8k", "mmlu", "piqa"])
    return z, names, families, acc


def _with_a_foreign_task(acc: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The pool's accuracies plus an lm-eval task only the first model answered (4 answers), and the answer counts;
    the model of row 4 never answered piqa."""
    acc = acc.assign(foreign_task=np.nan)
    acc.loc[acc.index[0], "foreign_task"] = 1.0
    acc.loc[acc.index[4], "piqa"] = np.nan
    n = pd.DataFrame(20, index=acc.index, columns=acc.columns).where(acc.notna())
    n.loc[acc.index[0], "foreign_task"] = 4
    return acc, n


def _atlas_data(page) -> dict:
    text = page.read_text(encoding="utf-8")
    return json.loads(text.split('<script id="atlas-data" type="application/json">', 1)[1].split("</script>", 1)[0])


def test_the_atlas_lists_each_model_its_own_benchmarks_with_counts_and_foreign_tasks_apart(tmp_path):
    z, names, families, acc = _pool()
    acc, n = _with_a_foreign_task(acc)
    data = _atlas_data(
        write_atlas(
            tmp_path / "atlas.html",
            embeddings=z,
            names=names,
            per_benchmark_acc=acc,
            per_benchmark_n=n,
            pool_benchmarks=["gsm8k", "mmlu", "piqa"],
        )
    )
    assert data["benchmarks"] == ["gsm8k", "mmlu", "piqa"]
    assert data["accuracy"][1] == [[b, round(float(acc.loc[names[1], b]), 4), 20] for b in ("gsm8k", "mmlu", "piqa")]
    assert [r[0] for r in data["accuracy"][4]] == ["gsm8k", "mmlu"]  # no n/a row for the benchmark it lacks
    assert data["other"][0] == [["foreign_task", 1.0, 4]] and all(o == [] for o in data["other"][1:])
    assert data["accuracy"][8] is None  # no scores at all
    everything = _atlas_data(write_atlas(tmp_path / "all.html", embeddings=z, names=names, per_benchmark_acc=acc))
    assert everything["accuracy"][0][-1] == ["foreign_task", 1.0, None] and everything["other"][0] == []


def _estimates(names: list[str]) -> pd.DataFrame:
    """Capability estimates of the pool's last model (one with no accuracy), one of them for a hostile benchmark."""
    return pd.DataFrame(
        {
            "model": names[-1],
            "benchmark": ["gsm8k", "</script><b>x"],
            "estimate": [0.61234, 0.5],
            "lo": [0.5, 0.25],
            "hi": [0.7, 0.75],
            "observed": [0.5, np.nan],
            "n": [4, 0],
        }
    )


def test_the_atlas_holds_a_models_estimates_with_their_intervals_and_none_for_the_others(tmp_path):
    z, names, families, acc = _pool()
    page = write_atlas(
        tmp_path / "atlas.html",
        embeddings=z,
        names=names,
        per_benchmark_acc=acc,
        onboarded=[names[-1]],
        estimates=_estimates(names),
    )
    data = _atlas_data(page)
    assert data["estimates"][-1] == [
        ["gsm8k", 0.6123, 0.5, 0.7, "estimate"],
        ["</script><b>x", 0.5, 0.25, 0.75, "estimate"],
    ]
    assert data["estimates"][:-1] == [None] * (len(names) - 1)  # the page shows their observed accuracy instead
    assert "</script><b>x" not in page.read_text(encoding="utf-8")  # it cannot close the data's script element
    assert _atlas_data(write_atlas(tmp_path / "none.html", embeddings=z, names=names))["estimates"] == [None] * len(
        names
    )


def _dump_dom(chromium: str, url: str, tmp_path) -> str:
    out = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.e2e
def test_atlas_renders_points_and_neighbours(chromium, tmp_path):
    z, names, families, acc = _pool()
    acc, n = _with_a_foreign_task(acc)
    page = write_atlas(
        tmp_path / "atlas.html",
        embeddings=z,
        names=names,
        families=families,
        per_benchmark_acc=acc,
        per_benchmark_n=n,
        pool_benchmarks=["gsm8k", "mmlu", "piqa"],
        portfolio=[names[0], names[4]],
        neighbours=4,
    )
    chosen = 4
    d = np.linalg.norm(z - z[chosen], axis=1)
    d[chosen] = np.inf
    expected = [names[j] for j in np.argsort(d, kind="stable")[:4]]
    url = page.resolve().as_uri() + "#model=" + urllib.parse.quote(names[chosen])
    dom = _dump_dom(chromium, url, tmp_path)

    assert 'data-n-models="9"' in dom and 'data-n-points="9"' in dom  # all markers drawn in the 2-D plot
    assert f'data-selected="{html.escape(names[chosen])}"' in dom
    listed = [html.unescape(n) for n in re.findall(r'<li data-model="([^"]*)"', dom)]
    assert listed == expected
    panel = dom.split('id="benchmarks"', 1)[1].split('id="benchmark-bars"', 1)[0]
    assert (
        "gsm8k" in panel
        and f"{acc.loc[names[chosen], 'mmlu']:.3f}</td><td>{int(n.loc[names[chosen], 'mmlu'])}<" in panel
    )
    other = dom.split('id="other-benchmarks"', 1)[1].split("</div>", 1)[0]  # the element, not the page's data
    assert "piqa" not in panel and "foreign_task" not in other  # none for this model

    dom = _dump_dom(chromium, page.resolve().as_uri() + "#model=" + urllib.parse.quote(names[0]), tmp_path)
    own, other = dom.split('id="benchmarks"', 1)[1].split('id="other-benchmarks"', 1)
    assert "foreign_task" not in own and "foreign_task</td><td>1.000</td><td>4<" in other


@pytest.mark.e2e
def test_the_selected_models_estimates_show_with_intervals_and_a_trained_models_as_observed(chromium, tmp_path):
    z, names, families, acc = _pool()
    page = write_atlas(
        tmp_path / "atlas.html",
        embeddings=z,
        names=names,
        per_benchmark_acc=acc,
        onboarded=[names[-1]],
        estimates=_estimates(names),
    )
    dom = _dump_dom(chromium, page.resolve().as_uri() + "#model=" + urllib.parse.quote(names[-1]), tmp_path)
    panel = re.sub(r"<td [^>]*>", "<td>", dom.split('id="estimates"', 1)[1].split("</table>", 1)[0])
    assert "<td>gsm8k</td><td>0.612</td><td>0.500 - 0.700</td><td>estimate</td>" in panel
    assert "&lt;/script&gt;&lt;b&gt;x</td><td>0.500</td><td>0.250 - 0.750</td>" in panel  # shown as text
    dom = _dump_dom(chromium, page.resolve().as_uri() + "#model=" + urllib.parse.quote(names[1]), tmp_path)
    panel = re.sub(r"<td [^>]*>", "<td>", dom.split('id="estimates"', 1)[1].split("</table>", 1)[0])
    assert f"<td>mmlu</td><td>{acc.loc[names[1], 'mmlu']:.3f}</td><td></td><td>observed</td>" in panel


def test_atlas_is_self_contained_and_checks_inputs(tmp_path):
    z, names, families, acc = _pool()
    page = write_atlas(
        tmp_path / "sub" / "atlas.html",
        embeddings=z,
        names=names,
        families=families,
        per_benchmark_acc=acc,
        portfolio=[names[2]],
    )
    text = page.read_text(encoding="utf-8")
    assert re.search(r"<script[^>]+src=", text) is None and "<link" not in text  # nothing fetched
    assert "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly.js inlined
    assert '"diamond"' in text and 'id="neighbours"' in text
    with pytest.raises(ValueError, match="portfolio members not in the pool"):
        write_atlas(tmp_path / "x.html", embeddings=z, names=names, portfolio=["gpt-5"])
    with pytest.raises(ValueError, match="got 2 families for 9 models"):
        write_atlas(tmp_path / "x.html", embeddings=z, names=names, families=["a", "b"])


def test_pca_projection_is_deterministic_and_ordered():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(20, 5)) * np.array([5.0, 3.0, 1.0, 0.5, 0.1])
    xy, ratio = pca_projection(z, 3)
    xy2, _ = pca_projection(z[::-1], 3)
    np.testing.assert_allclose(xy[::-1], xy2, atol=1e-9)  # row order does not flip signs
    assert xy.shape == (20, 3) and np.all(np.diff(ratio) <= 0) and 0 < ratio.sum() <= 1
    np.testing.assert_allclose(xy.mean(axis=0), 0, atol=1e-9)
    small, r2 = pca_projection(np.array([[0.0, 1.0], [1.0, 0.0]]), 3)
    assert small.shape == (2, 3) and r2[2] == 0.0


def _lab(colour: str) -> np.ndarray:
    """CIE L*a*b* (D65) of an sRGB hex colour."""
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    rgb = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    f = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(f > 216 / 24389, np.cbrt(f), (24389 / 27 * f + 16) / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_the_first_sixteen_family_colours_are_far_apart_and_far_from_the_onboarded_black():
    from locus_model.analysis.atlas import ONBOARDED_COLOUR, PALETTE

    first = [_lab(c) for c in PALETTE[:16]]
    assert min(np.linalg.norm(a - b) for i, a in enumerate(first) for b in first[i + 1 :]) > 40  # CIE76
    assert min(np.linalg.norm(a - _lab(ONBOARDED_COLOUR)) for a in first) > 40
    assert len(set(PALETTE)) == len(PALETTE) >= 60


def test_a_nearly_one_dimensional_map_says_so_and_labelled_names_are_not_drawn_twice(tmp_path):
    rng = np.random.default_rng(0)
    line = np.outer(np.linspace(-3, 3, 12), rng.normal(size=6)) + 0.01 * rng.normal(size=(12, 6))
    names = [f"m{i}" for i in range(12)]
    text = write_atlas(tmp_path / "line.html", embeddings=line, names=names, onboarded=["m3"]).read_text(
        encoding="utf-8"
    )
    assert 'id="one-dimensional"' in text and "nearly one-dimensional" in text
    assert '"labelled": ["m3"]' in text and "labelled.has(name) ? '' : name" in text
    z, names, families, _ = _pool()
    assert 'id="one-dimensional"' not in write_atlas(tmp_path / "three.html", embeddings=z, names=names).read_text(
        encoding="utf-8"
    )


def test_the_panels_tables_wrap_and_scroll_inside_the_panel_and_the_bars_carry_their_counts(tmp_path):
    """At 1,400 px the estimates' "basis" column was cut off: the panel's tables must stay inside its 24em column
    (long names wrap, a wider table scrolls); each per-benchmark bar says how many answers it rests on."""
    z, names, families, acc = _pool()
    page = write_atlas(
        tmp_path / "atlas.html",
        embeddings=z,
        names=names,
        per_benchmark_acc=acc,
        onboarded=[names[-1]],
        estimates=_estimates(names),
    ).read_text(encoding="utf-8")
    style = re.sub(r"/\*.*?\*/", "", page.split("<style>", 1)[1].split("</style>", 1)[0], flags=re.S)
    rules: dict[str, str] = {}
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", style):  # every rule of a selector, media queries too
        rules[selector.strip()] = rules.get(selector.strip(), "") + body
    assert "overflow-x: auto" in rules["#panel table"] and "max-width: 100%" in rules["#panel table"]
    assert "display: block" in rules["#panel table"]  # a table scrolls only as a block box
    assert "overflow-wrap: anywhere" in rules["#panel td, #panel th"] and "min-width: 0" in rules["#panel"]
    script = page.split("<script>", 1)[1]
    assert "text: row.map(r => r[2] === null ? '' : 'n = ' + r[2])" in script and "cliponaxis: false" in script


@pytest.mark.e2e
def test_at_1400_px_the_estimates_basis_column_is_inside_the_window(chromium, tmp_path):
    z, names, families, acc = _pool()
    long = "a benchmark name long enough to push the columns of the estimates past the panel's edge"
    estimates = _estimates(names).replace({"benchmark": {"gsm8k": long}})
    page = write_atlas(
        tmp_path / "atlas.html",
        embeddings=z,
        names=names,
        per_benchmark_acc=acc,
        onboarded=[names[-1]],
        estimates=estimates,
    )
    probe = (
        "<script>window.addEventListener('load', () => { const t = document.querySelector('#estimates table');"
        " const th = [...t.querySelectorAll('th')].find(h => h.textContent === 'basis');"
        " const right = th.getBoundingClientRect().right, panel = document.getElementById('panel');"
        " document.body.dataset.basisInside = String(right <= panel.getBoundingClientRect().right + 1"
        " && right <= window.innerWidth); });</script></body>"
    )
    head, tail = page.read_text(encoding="utf-8").rsplit("</body>", 1)  # a probe of the layout, the test's own
    page.write_text(head + probe + tail, encoding="utf-8")
    url = page.resolve().as_uri() + "#model=" + urllib.parse.quote(names[-1])
    out = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, "--window-size=1400,900", f"--user-data-dir={tmp_path / 'p'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'data-basis-inside="true"' in out.stdout
