"""Markdown/HTML escaping of user-supplied text (model names, file names, benchmarks, query text) before it goes
into a Markdown table or paragraph (asset metadata, report files, anything rendered as Markdown).

One function, :func:`escape_markdown`, used everywhere; :func:`escape_frame` applies it to every text cell, index
label and column name of a table before ``to_markdown``. A model name is data, never markup: a ``|`` must not add
a column, ``[x](javascript:...)`` must not become a link, ``![i](http://host/pixel.png)`` must not become an image
the browser fetches, and ``<img>`` must not become HTML.
"""

from __future__ import annotations

import re

import pandas as pd

_MARKUP = re.compile(r"([\\`*_\[\]|~!#])")  # Markdown's structural characters, backslash-escaped
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape_markdown(text: object) -> str:
    """``text`` as literal Markdown: HTML's ``& < >`` as entities, Markdown's ``\\ ` * _ [ ] | ~ ! #`` behind a
    backslash, line breaks as spaces (a newline would end a table row)."""
    out = "".join(_HTML.get(c, c) for c in str(text))
    out = _MARKUP.sub(r"\\\1", out)
    return re.sub(r"[\r\n\u2028\u2029]+", " ", out)


def escape_frame(frame: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """A copy whose text cells, index labels and column names are escaped (numbers and times are left as they are)."""

    def one(value: object) -> object:
        return escape_markdown(value) if isinstance(value, str) else value

    out = frame.copy()
    if isinstance(out, pd.Series):
        out = out.map(one) if out.dtype == object or isinstance(out.dtype, pd.CategoricalDtype) else out
        out.name = one(out.name)
    else:
        for column in out.columns:
            if (
                out[column].dtype == object
                or isinstance(out[column].dtype, pd.CategoricalDtype)
                or pd.api.types.is_string_dtype(out[column])
            ):
                out[column] = out[column].astype(object).map(one)
        out.columns = out.columns.map(one) if not isinstance(out.columns, pd.MultiIndex) else out.columns
    out.index = (
        out.index.map(one)
        if not isinstance(out.index, pd.MultiIndex)
        else pd.MultiIndex.from_tuples([tuple(one(v) for v in t) for t in out.index], names=out.index.names)
    )
    return out
