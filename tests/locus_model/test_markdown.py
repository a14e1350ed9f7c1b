"""User-supplied text in Markdown (metadata, reports/*.md) is data, never markup: one escaping function."""

from __future__ import annotations

import pandas as pd
import pytest

from locus_model.analysis._common import markdown_table
from locus_model.markdown import escape_frame, escape_markdown

HOSTILE = [
    "a | b | c",
    "[x](javascript:alert(1))",
    "![i](http://127.0.0.1:9/track.png)",
    "<img src=x onerror=alert(1)>",
    "two\nlines",
    "`code` *bold* _it_ ~~s~~",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_escaped_text_has_no_live_markup(name: str) -> None:
    out = escape_markdown(name)
    assert "\n" not in out and "<" not in out and ">" not in out
    for opener in ("[", "]", "!", "|", "`", "*", "~"):  # every structural character is behind a backslash
        assert out.count(opener) == out.count("\\" + opener)


def test_plain_names_stay_readable() -> None:
    assert escape_markdown("org/llama-3.1 8b (v2)") == "org/llama-3.1 8b (v2)"
    assert escape_markdown("a & b") == "a &amp; b"


def tables() -> list[str]:
    frame = pd.DataFrame({"model": HOSTILE, "score": range(len(HOSTILE))})
    return [
        markdown_table(frame, max_rows=None),
        escape_frame(frame).to_markdown(index=False),
        escape_frame(frame.set_index("model")).to_markdown(),
    ]


@pytest.mark.parametrize("table", tables())
def test_a_hostile_name_adds_no_column_link_or_image_to_a_table(table: str) -> None:
    lines = table.splitlines()
    assert len(lines) == len(HOSTILE) + 2  # header, rule, one line per row: no newline got through
    unescaped_bars = [line.replace("\\|", "").count("|") for line in lines]
    assert len(set(unescaped_bars)) == 1  # the same number of columns on every line
    assert "](" not in table.replace("\\](", "") and "<img" not in table
