"""locus_pipeline.defs.metadata: what the UI's metadata viewer is given."""

from __future__ import annotations

import base64
import io
import re

from PIL import Image

from locus_pipeline.defs.metadata import UI_FIGURE_PX, ui_png_markdown


def _png(path, width: int, height: int):
    Image.new("RGB", (width, height), (200, 30, 30)).save(path)
    return path


def _embedded_size(markdown: str) -> tuple[int, int]:
    found = re.fullmatch(r"!\[[^\]]*\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", markdown)
    assert found, markdown[:80]
    data = found.group(1)
    return Image.open(io.BytesIO(base64.b64decode(data))).size


def test_a_wide_figure_is_scaled_to_fit_the_modal_keeping_its_aspect(tmp_path) -> None:
    # 1,100 px figures were clipped by the 1,024 px modal (the UI walk, item 2)
    assert _embedded_size(ui_png_markdown(_png(tmp_path / "wide.png", 1100, 550))) == (UI_FIGURE_PX, 480)


def test_a_narrow_figure_is_left_as_it_is(tmp_path) -> None:
    assert _embedded_size(ui_png_markdown(_png(tmp_path / "narrow.png", 700, 300))) == (700, 300)


def test_the_pools_newest_table_escapes_model_names() -> None:
    import pandas as pd

    from locus_pipeline.defs.assets.pool import pool_summary

    names = ["ok", "a | b", "![i](http://127.0.0.1:9/track.png)", "[x](javascript:alert(1))"]
    pool = pd.DataFrame(
        {
            "model": names,
            "source": "onboarded",
            "n_evaluations": 3,
            "checkpoint_id": "c",
            "embedded_at": pd.date_range("2025-01-01", periods=len(names), tz="UTC"),
        }
    )
    table = pool_summary(pool)["newest"].md_str
    lines = table.splitlines()
    assert len({line.replace("\\|", "").count("|") for line in lines}) == 1 and len(lines) == len(names) + 2
    assert "](" not in table.replace("\\](", "")


def test_shorten_tables_keeps_short_tables_and_cuts_long_ones():
    from locus_pipeline.defs.metadata import shorten_tables

    table = "| a |\n|---|\n" + "\n".join(f"| {i} |" for i in range(5))
    assert shorten_tables("x\n\n" + table + "\n\ny", "t", max_rows=5) == "x\n\n" + table + "\n\ny"
    cut = shorten_tables(table, "t", max_rows=2).splitlines()
    assert (
        cut[:4] == ["| a |", "|---|", "| 0 |", "| 1 |"]
        and "3 more rows" in cut[-1]
        and "warehouse/t.parquet" in cut[-1]
    )


def test_every_column_of_embedding_geometry_has_a_description() -> None:
    import numpy as np

    from locus_model.analysis import distance_vs_disagreement
    from locus_pipeline.defs.metadata import COLUMN_DOCS, table_schema

    rng = np.random.default_rng(0)
    labels = (rng.random((4, 30)) < 0.5).astype(float)
    table = distance_vs_disagreement(rng.normal(size=(4, 3)), labels, names=["a", "b", "c", "d"]).table()
    schema = table_schema(table, COLUMN_DOCS["embedding_geometry"])
    assert [c.name for c in schema.columns] == list(table.columns) and all(c.description for c in schema.columns)


def test_long_text_metadata_goes_as_markdown_the_ui_shows_whole() -> None:
    import dagster as dg
    import pandas as pd

    from locus_pipeline.defs.metadata import TEXT_SHOWN, atlas_link, shown_whole

    assert shown_whole("short") == "short" and shown_whole(3) == 3
    long = "P(correct) = sigmoid(1.00 x predictor logit + 0.50 x group-table logit -0.10), fitted on validation cells"
    assert len(long) > TEXT_SHOWN
    assert shown_whole(long) == dg.MetadataValue.md(long)  # nothing in it to escape
    assert shown_whole("a|b " * 20).md_str.startswith(r"a\|b")  # a name stays text

    class Home:
        def read_table(self, name):
            return pd.DataFrame({"checkpoint_id": ["other"], "mlflow_run_id": ["r"]})

    link = atlas_link(Home(), None, "abc123")["atlas"]
    assert isinstance(link, dg.MarkdownMetadataValue) and link.md_str is not None
    assert "checkpoint abc123 is not the current" in link.md_str
