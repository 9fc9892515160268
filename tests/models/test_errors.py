"""The models' typed refusals cross process boundaries whole (a GP or batch worker process sends them)."""

from __future__ import annotations

import pickle

from models.errors import InputValidationError, RowsRefused


def test_refusals_pickle_whole():
    plain = pickle.loads(pickle.dumps(InputValidationError("band", "must hold 1.0", "low < 1 <= high")))
    assert (type(plain), plain.field, plain.message, plain.expected) == (
        InputValidationError,
        "band",
        "must hold 1.0",
        "low < 1 <= high",
    )
    # rows included: the server renumbers them (a block's into the request's, an Arrow table's from 1)
    rows = pickle.loads(pickle.dumps(RowsRefused("query_x", [3, 5], "no power flow", "loads the feeder can carry")))
    assert isinstance(rows, RowsRefused) and rows.rows == [3, 5] and rows.reason == "no power flow"
    assert (rows.field, rows.message, rows.expected) == (
        "query_x",
        "rows [3, 5]: no power flow",
        "loads the feeder can carry",
    )
