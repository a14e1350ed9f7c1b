"""Query encodings as arrays: one conversion for frames and mappings, in the order asked, naming a missing query."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from locus_model.data.query_encodings import MissingEncodingError, encoding_matrix, query_rows


def frame() -> pd.DataFrame:
    return pd.DataFrame({"query_id": ["q3", "q1", "q2"], "encoding": [[3.0, 3.0], [1.0, 1.0], [2.0, 2.0]]})


def test_a_frame_gives_its_rows_in_its_own_order_or_in_the_order_asked() -> None:
    whole = encoding_matrix(frame())
    assert whole.dtype == np.float32 and whole.tolist() == [[3, 3], [1, 1], [2, 2]]
    assert encoding_matrix(frame(), ["q2", "q3"]).tolist() == [[2, 2], [3, 3]]
    assert query_rows(frame(), pd.Series(["q1", "q1", "q3"])).tolist() == [1, 1, 0]


def test_a_mapping_gives_the_same_matrix_as_the_frame() -> None:
    mapping = dict(zip(frame()["query_id"], map(np.asarray, frame()["encoding"])))
    np.testing.assert_array_equal(
        encoding_matrix(mapping, ["q1", "q2", "q3"]), encoding_matrix(frame(), ["q1", "q2", "q3"])
    )


@pytest.mark.parametrize("encodings", [frame(), {"q1": np.ones(2)}])
def test_a_missing_query_is_named_with_the_fix(encodings) -> None:
    with pytest.raises(
        MissingEncodingError, match=r"model 'm': query_id 'q9' has no query encoding .*How to fix: encode"
    ):
        encoding_matrix(encodings, ["q1", "q9"], what="model 'm': ")
    for caught in (KeyError, ValueError):  # a lookup error, and what the commands catch to print the fix
        with pytest.raises(caught):
            encoding_matrix(encodings, ["q9"])
