"""Each analysis result renders its whole report: the summary line, the body (user strings escaped), the table the
pipeline stores, the figures it shows; models left out for want of labels are named."""

from __future__ import annotations

import matplotlib.colors
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection

from locus_model.analysis import (
    cluster_pool,
    distance_vs_disagreement,
    fallback,
    known_duplicates,
    near_duplicates,
    portfolios,
)
from locus_model.analysis.atlas import model_atlas
from locus_model.analysis.portfolio_curves import DENSE_K, portfolio_sizes, smallest_matching_portfolio


def pool(m: int = 9, q: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, 4)) * 4
    z = np.concatenate([centres[i % 3] + rng.normal(size=(1, 4)) * 0.1 for i in range(m)])
    labels = (rng.random((m, q)) < 0.3 + 0.2 * (np.arange(m) % 3)[:, None]).astype(float)
    probs = np.clip(labels * 0.6 + rng.random((m, q)) * 0.4, 0, 1)
    names = [f"fam{i % 3}/m|{i}" for i in range(m)]
    return z, probs, labels, names


def test_geometry_names_the_queries_and_the_models_left_out() -> None:
    z, _, labels, names = pool()
    result = distance_vs_disagreement(z, labels, names=names, left_out=["onboarded/x|y"])
    text = result.to_markdown()
    assert "measured on the 40 test queries" in text
    assert text.endswith(r"Left out (no held-out labels, e.g. onboarded): 1 model(s): onboarded/x\|y.")
    assert set(result.figures()) == {
        f"{s}_{d}" for s in ("pearson", "spearman", "kendall") for d in ("euclidean", "cosine")
    }
    assert "Left out" not in distance_vs_disagreement(z, labels, names=names).to_markdown()


def test_the_pool_tree_is_scored_against_each_grouping_and_the_table_carries_them() -> None:
    z, _, _, names = pool()
    families = [n.split("/")[0] for n in names]
    variants = ["base" if i < 5 else "chat" for i in range(len(names))]
    result = cluster_pool(z, names, {"family": families, "variant": variants})
    assert result.headline().startswith(
        "average-linkage tree (cosine distance) of 9 models, cut at the number of "
        "known groups: family (3 groups): adjusted Rand 1.000, purity 1.000; variant (2 groups)"
    )
    assert "The same tree cut at the 2 groups of `variant`" in result.to_markdown() and r"m\|0" in result.to_markdown()
    table = result.table()
    assert {"variant", "variant_cluster"} <= set(table.columns) and table.set_index("model").loc[
        names[6], "variant"
    ] == "chat"
    assert result.figures()["adjusted_rand"] == 1.0 and "adjusted_rand_variant" in result.figures()
    unlabelled = cluster_pool(z, names, {"family": [""] * len(names)})
    assert unlabelled.headline() == "9 models clustered (average linkage, cosine); no family labels to score."
    assert "family_cluster" not in unlabelled.table().columns


def test_dendrogram_branches_take_the_family_colour_of_their_models_with_a_legend() -> None:
    from locus_model.analysis.clustering import (
        MIXED_COLOUR,
        UNKNOWN_COLOUR,
        branch_colours,
        family_clustering,
        family_colours,
    )

    # leaves 0, 1 (family a) merge first, then 2 (b) joins them, then 3 (unknown) with 4 (unknown), then all
    tree = np.array([[0, 1, 0.1, 2], [3, 4, 0.2, 2], [2, 5, 0.3, 3], [6, 7, 0.4, 5]], dtype=float)
    colours = family_colours(["a", "a", "b", "", ""])
    assert branch_colours(tree, ["a", "a", "b", "", ""], colours)[5:] == [
        colours["a"],
        UNKNOWN_COLOUR,
        MIXED_COLOUR,
        MIXED_COLOUR,
    ]
    z, _, _, names = pool()
    families = [n.split("/")[0] for n in names[:-1]] + [""]
    ax = family_clustering(z, names, families).figure().axes[0]
    shown = ax.get_legend()
    assert shown is not None
    legend = [t.get_text() for t in shown.get_texts()]
    assert legend == ["fam0", "fam1", "fam2", "several families", "unknown family"]
    drawn: set[str] = set()
    for coll in ax.collections:
        assert isinstance(coll, LineCollection)  # the dendrogram's branches, one collection per colour
        drawn |= {matplotlib.colors.to_hex(c) for c in np.asarray(coll.get_colors())}  # (n, 4) RGBA
    pool_colours = family_colours(families)
    assert set(pool_colours.values()) | {MIXED_COLOUR} == drawn  # three tight families, joined by black branches
    labels = {t.get_text(): matplotlib.colors.to_hex(t.get_color()) for t in ax.get_xticklabels()}
    assert labels[names[0]] == pool_colours["fam0"] and labels[names[-1]] == UNKNOWN_COLOUR


def test_portfolios_render_their_curves_and_say_what_has_no_parameter_count() -> None:
    z, probs, labels, names = pool()
    params = np.array([7.0, 13.0, np.nan, 70.0, 7.0, 13.0, 1.0, 3.0, 8.0])
    result = portfolios(z, probs, labels, names=names, params_b=params, n_random=2, left_out=["gone"])
    assert [c.method for c in result.curves] == ["k_center", "k_medoids", "coverage_greedy"]
    assert "(1 model(s) of unknown size are never chosen)" in result.headline()
    assert result.headline().startswith(f"full pool of 9 models: routing accuracy {result.curves[0].full_accuracy:.4f}")
    table = result.table()
    assert table.groupby("method")["smallest_matching"].sum().le(1).all()
    members = smallest_matching_portfolio(table, "k_center")
    k = result.smallest()["k_center"]
    assert len(members) == (int(k) if k is not None else len(names)) and set(members) <= set(names)
    assert result.to_markdown().endswith("Left out (no held-out labels, e.g. onboarded): 1 model(s): gone.")
    unknown = portfolios(z, probs, labels, names=names, params_b=np.full(9, np.nan), n_random=0)
    assert "coverage-greedy: no parameter counts known" in unknown.headline()
    assert "nan" not in unknown.to_markdown() and "| unknown (1 model) |" in unknown.to_markdown()
    assert "so there is no coverage-greedy curve" in unknown.to_markdown()


def test_the_portfolios_report_names_the_members_and_the_sizes_it_knows() -> None:
    z, probs, labels, names = pool()
    params = np.array([7.0, 13.0, np.nan, 70.0, 7.0, 13.0, 1.0, 3.0, 8.0])
    result = portfolios(z, probs, labels, names=names, params_b=params, n_random=2)
    k_center = result.curves[0]
    text = k_center.to_markdown()
    members = k_center.portfolios[1]  # k = 2
    assert k_center.params_b[1] == np.nansum(params[[names.index(m) for m in members]])
    row = next(line for line in text.splitlines() if line.startswith("| 2 |"))
    assert ", ".join(m.replace("|", r"\|") for m in members) in row
    assert "nan" not in text
    with_unknown = next(i for i, p in enumerate(k_center.portfolios) if names[2] in p)
    assert k_center.unknown_size[with_unknown] == 1
    assert f"{k_center.params_b[with_unknown]:g} + 1 of unknown size" in text
    big = next(line for line in text.splitlines() if line.startswith("| 9 |"))
    assert big.count(r"m\|") == 6 and "and 3 more" in big
    k = k_center.smallest_matching
    if k is not None:
        shown = ", ".join(n.replace("|", r"\|") for n in k_center.portfolios[int(k) - 1])
        assert f"full pool: k = {k:g}: {shown}." in text


def test_k_center_below_a_random_single_model_says_why() -> None:
    # the central model (the medoid, index 1) is the least accurate; the others answer everything
    z = np.array([[0.0], [1.0], [2.0]])
    labels = np.array([[1.0] * 4, [0.0] * 4, [1.0] * 4])
    result = portfolios(
        z, labels.copy(), labels, names=["left", "centre", "right"], params_b=np.full(3, np.nan), n_random=20
    )
    curve = result.curves[0]
    assert curve.portfolios[0] == ("centre",) and curve.accuracy[0] < curve.random_accuracy[0]
    assert "k-center starts from the most central model (the medoid" in curve.to_markdown()
    assert "k-center starts" not in result.curves[1].to_markdown()  # k-medoids says nothing of it


@pytest.mark.parametrize(
    "m, max_k, first, last, n",
    [(24, 0, 1, 24, 24), (50, 0, 1, 50, 50), (24, 10, 1, 10, 10), (2001, 0, 1, 2001, 70), (2001, 300, 1, 300, 70)],
)
def test_portfolio_sizes_are_dense_then_geometric(m, max_k, first, last, n):
    ks = portfolio_sizes(m, max_k)
    assert ks[0] == first and ks[-1] == last and ks == sorted(set(ks)) and len(ks) <= n
    assert ks[: min(DENSE_K, last)] == list(range(1, min(DENSE_K, last) + 1))


def test_fallback_figures_and_left_out() -> None:
    z, probs, labels, names = pool()
    result = fallback(z, probs, labels, names=names, n_random=3, left_out=["a", "b"])
    assert result.figures()["share_kept"] == result.share_kept
    assert "2 model(s): a, b." in result.to_markdown()


def test_near_duplicates_beside_the_pool_list_flagged_pairs_and_known_reuploads() -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(size=(4, 3))
    base[3] = base[0]  # model 3 is a re-upload of model 0
    resampled = base[None] + rng.normal(size=(4, 4, 3)) * 0.01
    names = ["orig", "b", "c", "re|upload"]
    catalog = pd.DataFrame({"model": names, "duplicate_of": ["", None, "", "orig"]})
    known = known_duplicates(catalog)
    assert (
        known == {frozenset(("orig", "re|upload"))} and known_duplicates(catalog.drop(columns="duplicate_of")) == set()
    )
    result = near_duplicates(resampled, names, fraction=0.5).beside_pool(
        names, base, known=known, not_resampled=["lost"]
    )
    assert result.headline() == (
        "1 near-duplicate pair(s) among 4 models (4 resamples at 0.5); known re-uploads "
        "found: 1 of 1, other pairs flagged: 0."
    )
    text = result.to_markdown()
    assert "Flagged pairs with the pool embeddings' cosine distance" in text and r"re\|upload" in text
    assert text.endswith("Not resampled (evaluations not found): lost.")
    assert result.pairs["known_duplicate"].sum() == 1 and result.pairs["pool_cosine_distance"].min() == pytest.approx(
        0.0, abs=1e-12
    )
    assert result.figures() == {"flagged_pairs": 1, "known_duplicates_found": 1, "known_duplicates": 1}


def test_the_atlas_reports_its_page_and_keeps_only_pool_members(tmp_path) -> None:
    z, _, _, names = pool()
    atlas = model_atlas(
        tmp_path / "atlas.html",
        embeddings=z,
        names=names,
        families=[n[:4] for n in names],
        portfolio=[names[0], "not in the pool"],
    )
    assert atlas.path.exists() and atlas.portfolio == (names[0],)
    assert atlas.headline() == (
        "[atlas.html](atlas.html): 9 models, k-center portfolio of 1 highlighted; "
        "self-contained, opens without network."
    )
    assert atlas.to_markdown("$LOCUS_HOME/reports/atlas.html").startswith("Open `$LOCUS_HOME/reports/atlas.html`")
    assert atlas.table()["in_portfolio"].sum() == 1 and atlas.figures() == {"portfolio_size": 1}
    assert atlas.plot(tmp_path / "atlas.png").read_bytes()[:4] == b"\x89PNG"
