"""The models file of ``locus evaluate --models-file`` (issue 59, item 8): a size or price that is not a plain number
>= 0 is an error at its file, row and column (never a silent switch of the cost basis), and a file that cannot be
read says so with the file and row, never a raw pandas or pyarrow error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locus_model.data.errors import EvaluationDataError
from locus_model.data.long_format import read_models_file
from locus_model.routing import cost_info, cost_table


def write(tmp_path: Path, text: str | bytes, name: str = "models.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def refused(path: Path, match: str) -> EvaluationDataError:
    with pytest.raises(EvaluationDataError, match=match) as err:
        read_models_file(path)
    assert err.value.file == path and "How to fix" in str(err.value)
    return err.value


@pytest.mark.parametrize("price", ["abc", "NaN", "nan", "1e309", "0x10", "inf", "-1", "1_000", "--1"])
@pytest.mark.parametrize("column", ["price_input_per_mtok", "price_output_per_mtok", "cost_per_query", "params_b"])
def test_a_price_or_size_that_is_not_a_number_names_file_row_and_column(
    tmp_path: Path, price: str, column: str
) -> None:
    path = write(tmp_path, f"model,{column}\nm1,0.5\nm2,{price}\n")
    err = refused(path, f"{column} '{price}' is not a number >= 0")
    assert (err.row, err.line, err.column) == (2, 3, column)


def test_good_prices_keep_the_usd_basis(tmp_path: Path) -> None:
    path = write(tmp_path, "model,params_b,price_input_per_mtok,price_output_per_mtok\nm1,7,0.5,1.5e0\nm2,,, \n")
    models = read_models_file(path)
    assert models["price_input_per_mtok"].tolist()[0] == 0.5 and np.isnan(models["price_input_per_mtok"].iloc[1])
    assert cost_table(["m1", "m2"], cost_info(models)).basis == "usd"


@pytest.mark.parametrize(
    "text, match, row",
    [
        ("model,params_b\nm1,7\nm2,7,extra\n", "the row has 3 fields, the header has 2", 2),  # ragged
        ('model,params_b\nm1,7\n"m2,7\n', "never closed", 2),  # an unclosed quote
        (b"model,params_b\nm1,7\n\xff\xfe\x00\x01,3\n", "not valid UTF-8|NUL byte", 2),  # binary bytes
    ],
)
def test_a_damaged_csv_names_the_file_and_row(tmp_path: Path, text, match: str, row: int) -> None:
    assert refused(write(tmp_path, text), match).row == row


def test_a_corrupt_parquet_models_file_names_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    pd.DataFrame({"model": ["m1"], "params_b": [7.0]}).to_parquet(good)
    bad = write(tmp_path, good.read_bytes()[:-20] + b"\0" * 20, "models.parquet")
    refused(bad, "not a readable Parquet file")
    inf = tmp_path / "inf.parquet"
    pd.DataFrame({"model": ["m1", "m2"], "price_input_per_mtok": [1.0, np.inf]}).to_parquet(inf)
    assert refused(inf, "price_input_per_mtok inf is not a number").row == 2
    assert read_models_file(good)["params_b"].tolist() == [7.0]
