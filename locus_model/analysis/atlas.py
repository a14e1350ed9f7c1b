"""The model atlas: one self-contained HTML page to explore a pool of LOCUS model embeddings.

The page needs no network: Plotly's JavaScript is inlined. It shows a PCA projection of the model
embeddings in 2-D and 3-D (colour = family, diamond = portfolio member); clicking a model (or opening
atlas.html#model=NAME) lists its nearest neighbours in the full embedding space and its per-benchmark accuracy.

DOM contract (what tests and other tools may rely on):
  #atlas[data-n-models]   pool size, written by Python
  #atlas[data-n-points]   markers drawn in the 2-D plot (SVG path.point), counted by the page's script
  #atlas[data-selected]   the selected model's name
  #neighbours             an <ol> of <li data-model="NAME"> for the selected model's nearest neighbours
  #benchmarks             a table of the selected model's accuracy and answer count (n) on the pool's benchmarks
                          it has answers on (no rows for benchmarks it was never asked)
  #other-benchmarks       a table of its tasks outside the pool's benchmarks (e.g. an lm-eval drop's), this model only
  #estimates              a table of its capability estimates per benchmark: accuracy, 90% interval, basis
                          ("estimate" where given, e.g. an onboarded model's; else "observed", its accuracy on the
                          pool's benchmarks, no interval)
  #benchmark-bars         the same accuracies as bars, each labelled with its n (text "n = 4")
The panel's tables wrap and scroll inside the panel (#panel table: overflow-x auto), never cut off by the window.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.colors as px_colors
import plotly.graph_objects as go
import plotly.io as pio

from locus_model.analysis._common import check_embeddings, check_metric, check_names
from locus_model.analysis.atlas_page import PAGE, SCRIPT
from locus_model.figures import new_figure, save_figure
from locus_model.neighbours import nearest_neighbours

_SYMBOL = {False: "circle", True: "diamond"}
# one colour per family: Kelly's colours of maximum contrast (without white and black; Dark24's first 15 hold
# three close pinks and two close purples), then Plotly's Dark24 and Light24; families beyond that cycle again
KELLY = (
    "#F3C300",
    "#875692",
    "#F38400",
    "#A1CAF1",
    "#BE0032",
    "#C2B280",
    "#848482",
    "#008856",
    "#E68FAC",
    "#0067A5",
    "#F99379",
    "#604E97",
    "#F6A600",
    "#B3446C",
    "#DCD300",
    "#882D17",
    "#8DB600",
    "#654522",
    "#E25822",
    "#2B3D26",
)
# The first 16 in the order that keeps them farthest apart: greedy farthest-point in CIE Lab over Kelly, Dark24
# and Light24, starting from the onboarded black and the white background (their smallest pairwise CIE76 distance
# is 42, from the black 41; Kelly's first 14 in order: 15, with three near-identical orange/yellows). Tested in
# test_atlas.py.
DISTINCT = (
    "#511CFB",
    "#00FE35",
    "#FB0D0D",
    "#F3C300",
    "#E15F99",
    "#479B55",
    "#2E91E5",
    "#882D17",
    "#0DF9FF",
    "#FB00D1",
    "#750D86",
    "#848482",
    "#22FFA7",
    "#E3EE9E",
    "#0D2A63",
    "#8DB600",
)
PALETTE = DISTINCT + tuple(
    c
    for c in dict.fromkeys(
        KELLY + tuple(c.upper() for c in px_colors.qualitative.Dark24 + px_colors.qualitative.Light24)
    )
    if c not in DISTINCT
)
ONBOARDED = "onboarded"  # the legend group of onboarded models whose family is unknown
ONBOARDED_COLOUR = "#111111"  # onboarded models stand out: black, larger, labelled
MIN_3D_VARIANCE = 0.05  # a 3-D view whose third axis holds less of the variance than this shows nothing more
ONE_DIMENSIONAL = 0.9  # PC1 holding more of the variance than this: the page says the map is nearly a line


def pca_projection(embeddings: np.ndarray, n_components: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(M, n_components) principal-component scores and (n_components,) explained-variance ratios.

    Signs are fixed (each component's largest-magnitude loading is positive) so the picture is reproducible;
    missing components (d or M too small) are zero columns.
    """
    z = check_embeddings(embeddings, where="pca_projection")
    zc = z - z.mean(axis=0)
    u, s, vt = np.linalg.svd(zc, full_matrices=False)
    k = min(n_components, len(s))
    sign = np.sign(vt[np.arange(k), np.argmax(np.abs(vt[:k]), axis=1)])
    sign[sign == 0] = 1.0
    scores = np.zeros((len(z), n_components))
    scores[:, :k] = u[:, :k] * s[:k] * sign
    var = s**2
    ratio = np.zeros(n_components)
    ratio[:k] = var[:k] / var.sum() if var.sum() > 0 else 0.0
    return scores, ratio


def write_atlas(
    path: str | Path,
    *,
    embeddings: np.ndarray,
    names: Sequence[str],
    families: Sequence[str] | None = None,
    per_benchmark_acc: pd.DataFrame | None = None,
    per_benchmark_n: pd.DataFrame | None = None,
    pool_benchmarks: Sequence[str] | None = None,
    portfolio: Sequence[str] = (),
    neighbours: int = 5,
    metric: str = "euclidean",
    title: str = "LOCUS model atlas",
    onboarded: Sequence[str] = (),
    estimates: pd.DataFrame | None = None,
) -> Path:
    """Write the atlas HTML page and return its path.

    Args:
        embeddings: (M, d) model embeddings; names: M model names; families: M family names ("" = unknown).
        per_benchmark_acc: index = model name, columns = benchmarks, values = accuracy in [0, 1] (optional).
        per_benchmark_n: the answers each accuracy rests on, same index and columns (optional: no n shown).
        pool_benchmarks: the pool's benchmarks (those of its training data); a model's other columns (e.g. an
            onboarded model's lm-eval tasks) are listed apart for that model only. None: every column.
        portfolio: names of the chosen portfolio members (drawn as diamonds).
        onboarded: names of onboarded models: those of unknown family are shown as "onboarded", not "unknown family".
        estimates: capability estimates (model, benchmark, estimate, lo, hi: locus_model.estimates'
            Capability.frame with a model column), shown for their models; the others show their observed accuracy.
        neighbours: how many nearest neighbours to list, by `metric` distance in the full d-dim space
            (not in the projection, which distorts distances).
    """
    where = "write_atlas"
    z = check_embeddings(embeddings, where=where, min_models=2)
    names = check_names(names, len(z), where=where)
    check_metric(metric, where=where)
    fams = [
        "" if f is None or (isinstance(f, float) and np.isnan(f)) else str(f)
        for f in (families if families is not None else [""] * len(z))
    ]
    if len(fams) != len(z):
        raise ValueError(
            f"{where}: got {len(fams)} families for {len(z)} models. "
            "How to fix: pass one family per model ('' when unknown)."
        )
    onboarded_set, portfolio_set = set(onboarded), set(portfolio)
    fams = [ONBOARDED if not f and n in onboarded_set else f for f, n in zip(fams, names)]
    unknown = sorted(portfolio_set - set(names))
    if unknown:
        raise ValueError(
            f"{where}: portfolio members not in the pool: {unknown[:5]}. "
            "How to fix: pass portfolio names exactly as in `names`."
        )
    in_portfolio = np.array([n in portfolio_set for n in names])

    k = min(neighbours, len(z) - 1)
    nn, nn_dist = (
        nearest_neighbours(z, k, metric=metric)
        if k > 0  # (M, k) each
        else (np.zeros((len(z), 0), dtype=np.int64), np.zeros((len(z), 0)))
    )
    coords, ratio = pca_projection(z, 3)

    scores = benchmark_rows(names, per_benchmark_acc, per_benchmark_n, pool_benchmarks)
    data = {
        "names": names,
        "families": fams,
        "portfolio": [n for n in names if n in portfolio_set],
        "neighbours": [[[int(j), round(float(x), 6)] for j, x in zip(nn[i], nn_dist[i])] for i in range(len(z))],
        **scores,
        "estimates": estimate_rows(names, estimates),
        "xy": coords[:, :2].round(6).tolist(),
    }
    labelled = set(onboarded) | set(portfolio)  # names drawn beside their points (any model: click it)
    data["labelled"] = [n for n in names if n in labelled]  # the selection's arrow adds no second name to these
    fig2d, fig3d = _figures(names, fams, in_portfolio, coords, ratio, labelled=labelled, onboarded=set(onboarded))
    config = {"displaylogo": False, "responsive": True}
    plot2d = pio.to_html(
        fig2d,
        full_html=False,
        include_plotlyjs=True,
        div_id="atlas-2d",
        config=config,
        default_height="560px",
        default_width="100%",
    )
    if ratio[2] >= MIN_3D_VARIANCE:
        plot3d = pio.to_html(
            fig3d,
            full_html=False,
            include_plotlyjs=False,
            div_id="atlas-3d",
            config=config,
            default_height="520px",
            default_width="100%",
        )
    else:
        plot3d = (
            f'<p class="note">No 3-D view: the third principal component holds {100 * ratio[2]:.1f}% of the '
            "variance, so it would show nothing the 2-D view does not.</p>"
        )
    if ratio[0] > ONE_DIMENSIONAL:
        plot2d = (
            f'<p class="note" id="one-dimensional">The first principal component holds {100 * ratio[0]:.1f}% of '
            "the variance: the map is nearly one-dimensional (the models differ mostly along one direction, "
            "e.g. overall accuracy). The nearest neighbours in the panel are measured in the full embedding "
            "space, not on this map.</p>" + plot2d
        )
    page = PAGE.format(
        title=html.escape(title),
        n_models=len(z),
        n_portfolio=int(in_portfolio.sum()),
        k=k,
        metric=metric,
        plot2d=plot2d,
        plot3d=plot3d,
        options="".join(f'<option value="{html.escape(n)}">' for n in names),
        data=json.dumps(data).replace("</", "<\\/"),
        script=SCRIPT,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def benchmark_rows(
    names: Sequence[str], acc: pd.DataFrame | None, n: pd.DataFrame | None, pool_benchmarks: Sequence[str] | None
) -> dict:
    """The page's per-model scores: {"benchmarks": the pool's benchmarks, "accuracy": per model, its [benchmark,
    accuracy, n] rows on those it has answers on (None: no scores), "other": its rows on its other benchmarks}."""
    if acc is None:
        return {"benchmarks": [], "accuracy": [None] * len(names), "other": [[] for _ in names]}
    acc = acc.set_axis(acc.index.astype(str), axis=0).set_axis(acc.columns.astype(str), axis=1)
    count = (
        n.set_axis(n.index.astype(str), axis=0).set_axis(n.columns.astype(str), axis=1).reindex_like(acc)
        if n is not None
        else pd.DataFrame(np.nan, index=acc.index, columns=acc.columns)
    )
    pool = list(acc.columns) if pool_benchmarks is None else [str(b) for b in pool_benchmarks]
    inside = set(pool)

    def rows(name: str, own: bool) -> list:
        if name not in acc.index:
            return []
        return [
            [b, round(float(a), 4), None if pd.isna(k) else int(k)]
            for b, a, k in zip(acc.columns, acc.loc[name].to_numpy(), count.loc[name].to_numpy())
            if pd.notna(a) and (b in inside) == own
        ]

    return {
        "benchmarks": pool,
        "accuracy": [rows(m, True) or None for m in names],
        "other": [rows(m, False) for m in names],
    }


def estimate_rows(names: Sequence[str], estimates: pd.DataFrame | None) -> list:
    """Per model its [benchmark, estimate, lo, hi, "estimate"] rows, None for a model without estimates."""
    if estimates is None or estimates.empty:
        return [None] * len(names)
    by = {str(m): g for m, g in estimates.groupby(estimates["model"].astype(str), sort=False)}
    return [
        None
        if n not in by
        else [
            [str(b), round(float(e), 4), round(float(lo), 4), round(float(hi), 4), "estimate"]
            for b, e, lo, hi in zip(by[n]["benchmark"], by[n]["estimate"], by[n]["lo"], by[n]["hi"])
        ]
        for n in names
    ]


@dataclass(frozen=True)
class Atlas:
    """A written atlas page and the PCA it shows: the report of the pool's map."""

    path: Path  # the HTML page
    names: tuple[str, ...]  # M
    families: tuple[str, ...]  # M, "" = unknown
    portfolio: tuple[str, ...]  # the members drawn as diamonds
    coords: np.ndarray  # (M, 3) principal-component scores
    ratio: np.ndarray  # (3,) explained-variance ratios

    def headline(self) -> str:
        return (
            f"[{self.path.name}]({self.path.name}): {len(self.names)} models, k-center portfolio of "
            f"{len(self.portfolio)} highlighted; self-contained, opens without network."
        )

    def to_markdown(self, where: str | None = None) -> str:
        """How to open it; ``where``: the page's location as the reader knows it (default its path)."""
        return f"Open `{where or self.path}` in a browser (PCA 2-D/3-D, click a model for its neighbours)."

    def table(self) -> pd.DataFrame:
        members = set(self.portfolio)
        return pd.DataFrame(
            {
                "model": list(self.names),
                "family": list(self.families),
                "pc1": self.coords[:, 0],
                "pc2": self.coords[:, 1],
                "pc3": self.coords[:, 2],
                "in_portfolio": [n in members for n in self.names],
            }
        )

    def figures(self) -> dict[str, int]:
        return {"portfolio_size": len(self.portfolio)}

    def plot(self, path: str | Path) -> Path:
        """The 2-D PCA as a PNG, portfolio members as diamonds (the page's first view, for reports)."""
        member = self.table()["in_portfolio"].to_numpy()
        fig = new_figure(6.4, 5.0)
        ax = fig.add_subplot(1, 1, 1)
        ax.scatter(self.coords[~member, 0], self.coords[~member, 1], s=14, alpha=0.7, label="model")
        ax.scatter(
            self.coords[member, 0], self.coords[member, 1], s=60, marker="D", edgecolor="k", label="k-center portfolio"
        )
        ax.set_xlabel(f"PC1 ({100 * self.ratio[0]:.1f}% of variance)")
        ax.set_ylabel(f"PC2 ({100 * self.ratio[1]:.1f}% of variance)")
        ax.set_title("Model embeddings, PCA (diamond = k-center portfolio)")
        ax.legend(fontsize=8)
        return save_figure(fig, path)


def model_atlas(
    path: str | Path,
    *,
    embeddings: np.ndarray,
    names: Sequence[str],
    families: Sequence[str] | None = None,
    per_benchmark_acc: pd.DataFrame | None = None,
    per_benchmark_n: pd.DataFrame | None = None,
    pool_benchmarks: Sequence[str] | None = None,
    portfolio: Sequence[str] = (),
    onboarded: Sequence[str] = (),
    title: str = "LOCUS model atlas",
    estimates: pd.DataFrame | None = None,
) -> Atlas:
    """write_atlas, keeping the portfolio members that are in the pool, and the Atlas that reports it."""
    names = [str(n) for n in names]
    pool = set(names)
    members = [m for m in portfolio if m in pool]
    page = write_atlas(
        path,
        embeddings=embeddings,
        names=names,
        families=families,
        per_benchmark_acc=per_benchmark_acc,
        per_benchmark_n=per_benchmark_n,
        pool_benchmarks=pool_benchmarks,
        portfolio=members,
        onboarded=onboarded,
        title=title,
        estimates=estimates,
    )
    coords, ratio = pca_projection(embeddings, 3)
    fams = tuple(
        "" if f is None or (isinstance(f, float) and np.isnan(f)) else str(f)
        for f in (families if families is not None else [""] * len(names))
    )
    return Atlas(page, tuple(names), fams, tuple(members), coords, ratio)


def _figures(
    names, fams, in_portfolio, coords, ratio, *, labelled=frozenset(), onboarded=frozenset()
) -> tuple[go.Figure, go.Figure]:
    fig2d, fig3d = go.Figure(), go.Figure()
    colours = iter(PALETTE * (1 + len(set(fams)) // len(PALETTE)))
    for fam in sorted(set(fams), key=lambda f: (f == "", f == ONBOARDED, f)):
        idx = [i for i, f in enumerate(fams) if f == fam]
        hover = [
            names[i] + (" (portfolio)" if in_portfolio[i] else "") + (" (onboarded)" if names[i] in onboarded else "")
            for i in idx
        ]
        big = [bool(in_portfolio[i]) or names[i] in onboarded for i in idx]
        colour = ONBOARDED_COLOUR if fam == ONBOARDED else next(colours)
        marker = dict(
            symbol=[_SYMBOL[bool(in_portfolio[i])] for i in idx],
            color=colour,
            size=[14 if b else 9 for b in big],
            line=dict(width=1, color="black"),
        )
        common = dict(
            mode="markers+text",
            name=fam or "unknown family",
            hovertext=hover,
            customdata=idx,
            text=[names[i].rsplit("/", 1)[-1] if names[i] in labelled else "" for i in idx],
            hovertemplate="%{hovertext}<extra>" + html.escape(fam or "unknown family") + "</extra>",
        )
        fig2d.add_trace(
            go.Scatter(
                x=coords[idx, 0],
                y=coords[idx, 1],
                marker=marker,
                textposition="top center",
                textfont=dict(size=11),
                **common,
            )
        )
        fig3d.add_trace(
            go.Scatter3d(
                x=coords[idx, 0],
                y=coords[idx, 1],
                z=coords[idx, 2],
                marker={
                    **marker,
                    "symbol": [("diamond" if in_portfolio[i] else "circle") for i in idx],
                    "size": [7 if b else 4 for b in big],
                },
                **common,
            )
        )
    axis = [f"PC{i + 1} ({100 * r:.1f}% of variance)" for i, r in enumerate(ratio)]
    # the legend under the plot: beside it, a narrow frame (MLflow's artifact viewer) squeezes the points to a strip
    legend = dict(title="family", orientation="h", yanchor="top", y=-0.15, xanchor="left", x=0)
    # the toolbar stands on the right edge (vertical), where it covers no title
    fig2d.update_layout(
        title="Model embeddings, PCA 2-D (diamond = portfolio; labelled: portfolio and onboarded)",
        xaxis_title=axis[0],
        yaxis_title=axis[1],
        template="plotly_white",
        clickmode="event",
        legend=legend,
        margin=dict(l=50, r=50, t=50, b=40),
        autosize=True,
        modebar=dict(orientation="v"),
    )
    fig3d.update_layout(
        title="PCA 3-D",
        template="plotly_white",
        legend=legend,
        autosize=True,
        modebar=dict(orientation="v"),
        scene=dict(xaxis_title=axis[0], yaxis_title=axis[1], zaxis_title=axis[2]),
    )
    return fig2d, fig3d
