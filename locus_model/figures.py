"""PNG figures of the library (the analyses, the routing frontiers): matplotlib's object-oriented API on an Agg
canvas (no pyplot, no global backend switch), so the library can draw inside any process, headless or not."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new_figure(width: float = 6.4, height: float = 4.8) -> Figure:
    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig


FIGURE_MAX_PX = 1100  # widest PNG drawn: it fits a 1,280 px window (e.g. a metadata viewer's modal) unscaled


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Save as PNG at the figure's dpi, lowered so the image is at most FIGURE_MAX_PX wide."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=min(fig.dpi, FIGURE_MAX_PX / fig.get_figwidth()))
    return path
