"""Sparse contexts over real HTTP: null (JSON) / NaN or an empty cell (Arrow, CSV, Parquet) where a load or
a voltage was not measured. network-fit answers every bus, finite, and every answer says which buses the
context read; every other model, and the exact GP, is refused with a 422 naming the field and network-fit;
queries stay complete. Real uvicorn server, real pandapower truth (gridsim), both stores."""

from __future__ import annotations

import dataclasses
import io

import httpx
import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gridsim
from models import typical_loads
from service.client import arrow_request_body
from service.engine.load_table import InputError
from service.http.routers.ui import context_arrays
from tests.service.conftest import MODEL, assert_problem
from tests.service.engine.test_parquet_limits import footer_field

NET = gridsim.network("ieee33")
NEVER = 5  # vm_pu_bus7: never metered
SOMETIMES = 10  # vm_pu_bus12: read in two rows of three
UNMETERED_LOAD = 3  # p_mw_bus5: never metered
ARROW = "application/vnd.apache.arrow.stream"


def nulled(a: np.ndarray) -> list:
    return [[None if np.isnan(v) else float(v) for v in row] for row in np.asarray(a)]


@pytest.fixture(scope="module")
def sparse(scenarios):
    """(x, y) of the first 150 scenarios with a bus never read, one read in 2 of 3 rows, a load never
    metered and one metered in 3 of 4 rows; the other 50 are queries with their power-flow truth."""
    x, y = scenarios[0][:150].copy(), scenarios[1][:150].copy()
    y[:, NEVER] = np.nan
    y[::3, SOMETIMES] = np.nan
    x[:, UNMETERED_LOAD] = np.nan
    x[::4, 40] = np.nan
    return x, y


@pytest.fixture(scope="module")
def queries(scenarios):
    return scenarios[0][150:160], scenarios[1][150:160]


def assert_finite_answer(body: dict) -> None:
    """No NaN or infinity anywhere in an answer's numbers (JSON would show them as null)."""
    arrays = [body["mean"], body["std"], *body["quantiles"].values(), body["extrapolation"]]
    if body.get("p_outside_band") is not None:
        arrays.append(body["p_outside_band"])
    for values in arrays:
        a = np.asarray(values, dtype=np.float64)  # a null would be NaN here
        assert np.isfinite(a).all(), values


def test_inline_nulls_in_x_and_y_predict_every_bus_and_say_which_were_metered(client, sparse, queries, scenarios):
    x, y = sparse
    q, truth = queries
    body = {
        "model": "network-fit",
        "context": {"x": nulled(x), "y": nulled(y)},
        "queries": q.tolist(),
        "quantiles": [0.05, 0.95],
        "voltage_band": [0.95, 1.05],
    }
    response = client.post("/v1/predict", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert_finite_answer(answer)
    expected_readings = (~np.isnan(y)).sum(axis=0)
    assert answer["readings"] == expected_readings.tolist()
    assert answer["readings"][NEVER] == 0 and answer["readings"][SOMETIMES] == 100
    assert answer["metered"] == (expected_readings > 0).tolist() and answer["metered"].count(False) == 1
    mean, std = np.asarray(answer["mean"]), np.asarray(answer["std"])
    # the never-metered bus is predicted from the network model: close to the power flow's truth, with a spread
    assert np.abs(mean[:, NEVER] - truth[:, NEVER]).max() < 2e-3
    assert (std[:, NEVER] > 0).all()
    determined = np.asarray(answer["determined"])
    assert determined.shape == (32,) and np.all((determined >= 0) & (determined <= 1))
    # network-fit says per bus how far the readings pin its correction where they show one (lines 20 % longer than
    # the model: on a feeder its model describes, the evidence takes the prior to its tightest and no bus has a
    # correction to pin): the bus no meter reads, least of all
    longer = dataclasses.replace(NET, r_ohm=NET.r_ohm * 1.2, x_ohm=NET.x_ohm * 1.2)
    departed = np.where(np.isnan(y), np.nan, gridsim.solve(scenarios[0][:150], network=longer, solver="batched").vm_pu)
    shown = client.post("/v1/predict", json={**body, "context": {"x": nulled(x), "y": nulled(departed)}})
    assert shown.status_code == 200, shown.text
    determined = np.asarray(shown.json()["determined"])
    assert determined[NEVER] < np.median(determined)
    assert np.abs(mean - truth).max() < 5e-3
    # the same context sent with the bus column read everywhere changes the answer's metering
    full = client.post("/v1/predict", json={**body, "context": {"x": nulled(x), "y": sparse_y_read(y)}})
    assert full.status_code == 200, full.text
    assert all(full.json()["metered"]) and full.json()["readings"][NEVER] == 150


def sparse_y_read(y: np.ndarray) -> list:
    """y with the never-read bus filled (any plausible value): a context that reads it."""
    filled = y.copy()
    filled[:, NEVER] = 0.97
    return nulled(filled)


def test_stored_sparse_context_round_trips_nulls_and_answers_like_inline(client, sparse, queries):
    x, y = sparse
    created = client.post("/v1/context-sets", json={"x": nulled(x), "y": nulled(y)})
    assert created.status_code == 201, created.text
    info = created.json()
    assert info["readings"][NEVER] == 0 and info["metered"][NEVER] is False and info["typical_loads"] is None
    again = client.post("/v1/context-sets", json={"x": nulled(x), "y": nulled(y)})
    assert again.json()["id"] == info["id"]  # content-addressed, nulls included
    data = client.get(f"/v1/context-sets/{info['id']}", params={"include_data": "true"}).json()
    assert data["y"] == nulled(y) and data["x"] == nulled(x)  # null stays null, numbers stay numbers
    # a missing value never collides with a number: the same cell as 0.0 (or as a value) is another set
    zeroed = y.copy()
    zeroed[np.isnan(zeroed)] = 0.97
    other = client.post("/v1/context-sets", json={"x": nulled(x), "y": nulled(zeroed)})
    assert other.status_code == 201 and other.json()["id"] != info["id"]
    q = queries[0].tolist()
    stored = client.post("/v1/predict", json={"model": "network-fit", "context_id": info["id"], "queries": q})
    inline = client.post(
        "/v1/predict", json={"model": "network-fit", "context": {"x": nulled(x), "y": nulled(y)}, "queries": q}
    )
    assert stored.status_code == inline.status_code == 200, stored.text
    assert stored.json()["mean"] == inline.json()["mean"] and stored.json()["metered"] == inline.json()["metered"]
    assert_finite_answer(stored.json())
    assert client.delete(f"/v1/context-sets/{info['id']}").status_code == 204


def test_models_that_do_not_accept_missing_values_are_refused_naming_the_field(client, sparse, queries, scenarios):
    x, y = sparse
    q = queries[0].tolist()
    only_y = {"x": x_full(x), "y": nulled(y)}
    for model in ("physics-fit", MODEL):
        body = assert_problem(
            client.post("/v1/predict", json={"model": model, "context": only_y, "queries": q}), 422, "context.y"
        )
        assert "network-fit" in body["errors"][0]["expected"] and model in body["detail"]
    body = assert_problem(
        client.post(
            "/v1/predict", json={"model": "physics-fit", "context": {"x": nulled(x), "y": nulled(y)}, "queries": q}
        ),
        422,
        "context.x",
    )
    assert "x and y" in body["detail"]
    cid = client.post("/v1/context-sets", json=only_y).json()["id"]
    body = assert_problem(
        client.post("/v1/predict", json={"model": MODEL, "context_id": cid, "queries": q}), 422, "context_id"
    )
    assert "network-fit" in body["errors"][0]["expected"]
    # the exact GP, alone or beside network-fit, interpolates every reading: refused too
    assert_problem(client.post("/v1/gp/predict", json={"context_id": cid, "queries": q}), 422, "context_id")
    compare = {"model": "network-fit", "context_id": cid, "queries": q, "compare_gp": True}
    assert "exact-gp" in assert_problem(client.post("/v1/predict", json=compare), 422, "context_id")["detail"]
    # a full context (every load and bus as measured) still works for every model (gaps filled with a placeholder
    # would not: 0.97 p.u. in a third of a bus's rows scatters about as much as READING_SCATTER_PU allows)
    full = {"x": scenarios[0][:150].tolist(), "y": scenarios[1][:150].tolist()}
    answer = client.post("/v1/predict", json={"model": "physics-fit", "context": full, "queries": q})
    assert answer.status_code == 200, answer.text


def x_full(x: np.ndarray) -> list:
    filled = x.copy()
    filled[np.isnan(filled)] = 0.05
    return filled.tolist()


def test_queries_stay_complete_and_contexts_keep_their_rules(client, sparse, queries):
    x, y = sparse
    q = queries[0].tolist()
    q[1][7] = None
    ctx = {"x": nulled(x), "y": nulled(y)}
    body = assert_problem(
        client.post("/v1/predict", json={"model": "network-fit", "context": ctx, "queries": q}), 422, "queries[1][7]"
    )
    assert "null" in body["errors"][0]["message"]
    # a row reading no voltage at all carries nothing
    empty = y.copy()
    empty[4] = np.nan
    body = assert_problem(client.post("/v1/context-sets", json={"x": nulled(x), "y": nulled(empty)}), 422, "body.y[4]")
    assert "no reading" in body["detail"]
    # infinity is still no value (JSON has none; Python's json writes it as Infinity)
    text = orjson.dumps({"x": nulled(x), "y": nulled(y)}).replace(b"0.", b"Infinity, 0.", 1)
    bad = client.post("/v1/context-sets", content=text, headers={"content-type": "application/json"})
    assert bad.status_code == 422, bad.text
    # typical loads are one per load feature
    wrong = {"x": nulled(x), "y": nulled(y), "typical_loads": [0.1] * 10}
    assert "64" in assert_problem(client.post("/v1/context-sets", json=wrong), 422, "body.typical_loads")["detail"]
    simulated = {"simulate": {"n": 20}, "typical_loads": [0.1] * 64}
    assert_problem(client.post("/v1/context-sets", json=simulated), 422)


def test_typical_loads_stand_in_for_unmetered_loads(client, sparse, queries):
    x, y = sparse
    q = queries[0].tolist()
    base = np.asarray(NET.base_x, dtype=np.float64)
    guessed = typical_loads.estimated(x, NET)  # the context-wide typical values the default starts from
    answers = {}
    for name, typical in (("default", None), ("guessed", guessed), ("heavier", base * 1.5)):
        context = {"x": nulled(x), "y": nulled(y), **({} if typical is None else {"typical_loads": typical.tolist()})}
        created = client.post("/v1/context-sets", json=context)
        assert created.status_code == 201, created.text
        assert created.json()["typical_loads"] == (None if typical is None else typical.tolist())
        response = client.post(
            "/v1/predict", json={"model": "network-fit", "context_id": created.json()["id"], "queries": q}
        )
        assert response.status_code == 200, response.text
        assert_finite_answer(response.json())
        answers[name] = (created.json()["id"], np.asarray(response.json()["mean"]))
    assert len({cid for cid, _ in answers.values()}) == 3  # typical loads are part of the content id
    heavier = {"x": nulled(x), "y": nulled(y), "typical_loads": (base * 1.5).tolist()}
    inline = client.post("/v1/predict", json={"model": "network-fit", "context": heavier, "queries": q})
    assert inline.status_code == 200 and inline.json()["mean"] == answers["heavier"][1].tolist()
    # these loads vary each on their own (profile share 0): the default takes the unmetered ones at the context-wide
    # guess in every row (models.typical_loads.per_row), and the same values sent as typical_loads are weighed, widened
    # and fitted levels beside as the service's own guesses are (service.engine.sparse.fit): the same answer
    assert not typical_loads.profile_shares(x, NET).any()
    assert np.array_equal(answers["guessed"][1], answers["default"][1])
    # typical loads 1.5x the base (the rows vary about the base): the level the readings show beside them is fitted
    # and the guesses moved by it, so the answer is the default's (taken as given before, it was not)
    assert np.abs(answers["heavier"][1] - answers["default"][1]).max() < 1e-6


def test_typical_loads_the_feeder_cannot_carry_are_named_not_the_contexts_loads(client, sparse, queries):
    """Half the load buses never metered, typical_loads 100x the base (a units slip): no power flow at any context
    row with the unmetered loads there, where the service's own guesses have one: a 422 naming context.typical_loads
    (it named context.x, which the user had sent right); at -100x the power flow exists but lies far from every reading:
    named so too (it named context.y); the same context without them is answered."""
    x, y = sparse
    x = x.copy()
    x[:, np.r_[0 : NET.n_load : 2, NET.n_load : 2 * NET.n_load : 2]] = np.nan
    q = queries[0].tolist()
    context = {"x": nulled(x), "y": nulled(y)}
    wrong = {**context, "typical_loads": (np.asarray(NET.base_x) * 100.0).tolist()}
    refused = client.post("/v1/predict", json={"model": "network-fit", "context": wrong, "queries": q})
    body = assert_problem(refused, 422, "context.typical_loads")
    assert not any(e["field"] == "context.x" for e in body["errors"]), body
    negative = {**context, "typical_loads": (np.asarray(NET.base_x) * -100.0).tolist()}
    far = client.post("/v1/predict", json={"model": "network-fit", "context": negative, "queries": q})
    body = assert_problem(far, 422, "context.typical_loads")  # a power flow, far from every reading: not context.y
    assert not any(e["field"].startswith("context.y") for e in body["errors"]), body
    answered = client.post("/v1/predict", json={"model": "network-fit", "context": context, "queries": q})
    assert answered.status_code == 200, answered.text


def test_arrow_request_with_a_sparse_inline_context_and_its_answer_metadata(client, sparse, queries):
    x, y = sparse
    fields = {
        "model": "network-fit",
        "context": {"x": nulled(x), "y": nulled(y), "network": "ieee33"},
        "quantiles": [0.05],
    }
    body = arrow_request_body(queries[0], fields, NET.feature_names)
    response = client.post("/v1/predict", content=body, headers={"content-type": ARROW, "accept": ARROW})
    assert response.status_code == 200, response.text
    table = pa.ipc.open_stream(response.content).read_all()
    about = orjson.loads(table.schema.metadata[b"gridpfn"])
    assert about["metered"][NEVER] is False and about["readings"][SOMETIMES] == 100
    assert len(about["metered"]) == len(NET.output_names)
    values = np.column_stack(
        [table.column(i).to_numpy() for i in range(table.num_columns) if table.schema.field(i).type == pa.float64()]
    )
    assert np.isfinite(values).all()
    # a NaN query cell is refused, naming its row and column
    bad = queries[0].copy()
    bad[2, 9] = np.nan
    refused = client.post(
        "/v1/predict", content=arrow_request_body(bad, fields, NET.feature_names), headers={"content-type": ARROW}
    )
    problem = assert_problem(refused, 422, "queries")
    assert problem["errors"][0]["row"] == 3 and problem["errors"][0]["column"] == NET.feature_names[9]
    # a row the feeder cannot carry is numbered as the table numbers it, from 1 (the JSON body's from 0)
    beyond = queries[0].copy()
    beyond[3] *= 200.0
    refused = client.post(
        "/v1/predict", content=arrow_request_body(beyond, fields, NET.feature_names), headers={"content-type": ARROW}
    )
    assert "queries: rows [4]" in assert_problem(refused, 422, "queries")["detail"]


def _context_file(x: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(np.hstack([x, y]), columns=[*NET.feature_names, *NET.output_names])


def test_csv_and_parquet_context_uploads_take_empty_and_nan_cells(client, sparse, queries):
    x, y = sparse
    frame = _context_file(x, y)
    parquet = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), parquet)
    csv = frame.to_csv(index=False, na_rep="").encode()  # missing values as empty cells
    csv_nan = frame.to_csv(index=False, na_rep="NaN").encode()
    ids = set()
    for name, data in (("c.parquet", parquet.getvalue()), ("c.csv", csv), ("n.csv", csv_nan)):
        response = client.post("/ui/api/context-sets", files={"file": (name, data)})
        assert response.status_code == 201, (name, response.text)
        info = response.json()
        assert info["metered"][NEVER] is False and info["readings"][SOMETIMES] == 100, name
        ids.add(info["id"])
    assert len(ids) == 1  # the same data whichever way it came (CSV text round-trips float64)
    answer = client.post(
        "/v1/predict", json={"model": "network-fit", "context_id": ids.pop(), "queries": queries[0].tolist()}
    )
    assert answer.status_code == 200 and answer.json()["metered"][NEVER] is False
    # a column never filled at all (type null in CSV) is a bus never read; infinity is still refused
    blank = frame.copy()
    blank[NET.output_names[NEVER]] = None
    assert (
        client.post("/ui/api/context-sets", files={"file": ("b.csv", blank.to_csv(index=False).encode())}).status_code
        == 201
    )
    infinite = frame.copy()
    infinite.iloc[6, 2] = np.inf
    problem = assert_problem(
        client.post("/ui/api/context-sets", files={"file": ("i.csv", infinite.to_csv(index=False).encode())}), 422
    )
    assert problem["errors"][0]["row"] == 7 and problem["errors"][0]["column"] == NET.feature_names[2]
    # so is a reading no feeder operates at (here in kV), named with the range it is not in
    kilovolts = frame.copy()
    kilovolts[NET.output_names[4]] = 12.66
    problem = assert_problem(
        client.post("/ui/api/context-sets", files={"file": ("k.csv", kilovolts.to_csv(index=False).encode())}), 422
    )
    error = problem["errors"][0]
    assert (error["row"], error["column"], error["expected"]) == (1, NET.output_names[4], "a number <= 1.5"), problem
    # a row that reads no voltage at all: named by the file's row, as every cell is
    unread = frame.copy()
    unread.loc[4, list(NET.output_names)] = np.nan
    problem = assert_problem(
        client.post("/ui/api/context-sets", files={"file": ("u.csv", unread.to_csv(index=False).encode())}), 422
    )
    assert problem["errors"][0]["row"] == 5 and "no voltage read" in problem["errors"][0]["message"], problem


def test_a_context_upload_names_the_row_and_column_of_what_its_reader_refused(memory_server, scenarios):
    """A cell the CSV reader cannot convert past its first block (`1_0`: Python's float() reads 10), a Parquet
    file whose row group states fewer rows than its pages hold: each a 422 naming the row and column (or the
    counts), never an unplaced "unreadable file" (and nothing dropped)."""
    x, y = (np.resize(a, (600, a.shape[1])) for a in scenarios)  # the most rows a context may have here
    frame = _context_file(x, y).astype(object)
    frame.iloc[590, 9] = "1_0"
    csv = frame.to_csv(index=False).encode()
    assert csv.index(b"1_0") > (1 << 20)  # past the reader's first block (its types come from that one)
    table = pa.Table.from_pandas(_context_file(x[:100], y[:100]), preserve_index=False)
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=60, write_statistics=False)
    understated = footer_field(footer_field(sink.getvalue(), 60, 50, 96), 100, 90, 0)  # group 0: 50 of 60 rows
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        for name, data, row, column, words in (
            ("late.csv", csv, 591, NET.feature_names[9], "'1_0' is not a number"),
            ("short.parquet", understated, None, NET.feature_names[0], "row group 0 states 50 rows"),
        ):
            problem = assert_problem(client.post("/ui/api/context-sets", files={"file": (name, data)}), 422, "file")
            error = problem["errors"][0]
            assert (error["row"], error["column"]) == (row, column) and error["message"].startswith(words), problem
            assert len(problem["detail"]) < 400, problem["detail"][:500]


def test_a_context_file_row_longer_than_its_reader_takes_is_named_by_row_and_column(scenarios):
    """20 MiB in one cell (over the test server's body limit, within the default 32 MiB): the CSV reader refuses
    its row, longer than the 1 MiB block it reads at a time, naming neither row nor column."""
    long = _context_file(scenarios[0][:20], scenarios[1][:20]).astype(object)
    long.iloc[12, 40] = "7" * (20 << 20)
    features, outputs = list(NET.feature_names), list(NET.output_names)
    with pytest.raises(InputError) as refused:
        context_arrays(long.to_csv(index=False).encode(), "long.csv", features, outputs, 600)
    assert (refused.value.row, refused.value.column) == (13, NET.feature_names[40]), refused.value
    assert refused.value.message.startswith(f"a value of {20 << 20} bytes") and "a number" in refused.value.expected


def test_typical_loads_with_a_full_context_and_a_model_that_needs_none_are_ignored(client, scenarios):
    """Red-team finding: typical loads sent with every value given reached a checkpoint's fit (a 500)."""
    x, y = scenarios
    for model in (MODEL, "physics-fit"):
        body = {"model": model, "context": {"x": x.tolist(), "y": y.tolist(), "typical_loads": [0.1] * 64}}
        response = client.post("/v1/predict", json={**body, "queries": x[:3].tolist()})
        assert response.status_code == 200, response.text
        assert "determined" not in response.json()  # only network-fit's fit says how well each bus is known


def _late(scenarios, rows: int = 1500) -> tuple[pd.DataFrame, int]:
    """A context file of `rows` rows, and the first of its rows (0-based) past its CSV reader's first block (1 MiB):
    one the reader never saw when it chose a type for each column."""
    x, y = (np.resize(a, (rows, a.shape[1])) for a in scenarios)
    frame = _context_file(x, y).astype(object)
    ends = np.cumsum([len(line) + 1 for line in frame.to_csv(index=False).splitlines()])  # the header's first
    return frame, int(np.searchsorted(ends, 1 << 20)) + 50  # (a margin for cells made shorter)


def test_a_context_upload_reads_its_columns_as_numbers_whatever_its_first_block_holds(scenarios):
    """The reader typed a column from its first block: whole numbers there made it int64 and a later 0.25 a 422
    naming no row; a column empty there (a meter read later) was null and its first reading a 422 likewise."""
    features, outputs = list(NET.feature_names), list(NET.output_names)
    frame, late = _late(scenarios)
    frame.iloc[:late, 3] = 0  # whole numbers, then the file's own decimals
    frame.iloc[:late, 70] = None  # vm_pu_bus9: read only from row `late` on
    data = frame.to_csv(index=False, na_rep="").encode()
    assert sum(len(line) + 1 for line in data.splitlines()[: late + 1]) > 1 << 20  # row `late` starts past 1 MiB
    x, y, rows = context_arrays(data, "c.csv", features, outputs, 5000)
    assert len(rows) == len(frame) and x[late, 3] == frame.iloc[late, 3] and x[0, 3] == 0.0
    assert np.isnan(y[:late, 70 - 64]).all() and y[late, 70 - 64] == frame.iloc[late, 70]


@pytest.mark.parametrize("cell, words", [("yes", "'yes' is not true or false"), ("", "missing value")])
def test_a_converged_cell_that_is_not_true_or_false_is_refused_naming_its_row(scenarios, cell, words):
    """`yes` was a 500 (ArrowInvalid); an empty cell left its row out silently, as if false: the flag says
    which rows the file's own solver left unsolved, and a row is neither kept nor dropped on a guess."""
    features, outputs = list(NET.feature_names), list(NET.output_names)
    frame, late = _late(scenarios)
    frame["converged"] = "true"
    frame.loc[3, "converged"] = "false"  # left out, as ever
    for row in (late, 7):  # past the reader's first block, and within it
        bad = frame.copy()
        bad.loc[row, "converged"] = cell
        with pytest.raises(InputError) as refused:
            context_arrays(bad.to_csv(index=False).encode(), "c.csv", features, outputs, 5000)
        assert (refused.value.row, refused.value.column) == (row + 1, "converged"), refused.value
        assert refused.value.message.startswith(words) and "true or false" in refused.value.expected
        flags = (
            pa.array(bad["converged"])
            if cell
            else pa.array([{"true": True, "false": False}.get(v) for v in bad["converged"]])
        )
        table = pa.Table.from_pandas(bad.drop(columns="converged").astype(float), preserve_index=False)
        parquet = io.BytesIO()  # the same in a Parquet file: text, or booleans with a null
        pq.write_table(table.append_column("converged", flags), parquet)
        with pytest.raises(InputError) as refused:
            context_arrays(parquet.getvalue(), "c.parquet", features, outputs, 5000)
        assert (refused.value.row, refused.value.column) == (row + 1, "converged"), refused.value
    x, _, rows = context_arrays(frame.to_csv(index=False).encode(), "c.csv", features, outputs, 5000)
    assert len(x) == len(frame) - 1 and 4 not in rows


def test_a_context_upload_refuses_a_bad_flag_and_a_blank_in_a_name_as_422s(client, scenarios):
    frame = _context_file(*scenarios).assign(converged="yes")
    for data, column, row in (
        (frame.to_csv(index=False).encode(), "converged", 1),
        (frame.rename(columns={"vm_pu_bus2": "vm_pu_bus2 "}).to_csv(index=False).encode(), "vm_pu_bus2 ", None),
    ):
        problem = assert_problem(client.post("/ui/api/context-sets", files={"file": ("c.csv", data)}), 422, "file")
        assert (problem["errors"][0]["row"], problem["errors"][0]["column"]) == (row, column), problem


def test_network_fit_says_which_set_point_and_taps_the_readings_show(client, server):
    """A feeder whose substation runs at 1.02 p.u. and that has a +1.25 % regulator on line 6-7, neither in its
    model: network-fit's answer (JSON, and Arrow through the client) names the set point and the step on the branch
    into bus 7, none elsewhere; physics-fit's carries neither (its fit knows no network)."""
    from gridsim.departures import with_regulator, with_set_point
    from service.client import GridPFNClient

    real = with_set_point(with_regulator(NET, 6, 7, 0.0125), 1.02)
    rng = np.random.default_rng(12)
    x = NET.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (200, NET.n_features)))
    y = gridsim.solve(x, network=real, solver="batched").vm_pu + rng.normal(0.0, 1e-4, (200, NET.n_outputs))
    q = x[:5] * 1.2
    bus7 = NET.output_buses.index(7)
    body = {"model": "network-fit", "context": {"x": x.tolist(), "y": y.tolist()}, "queries": q.tolist()}
    answer = client.post("/v1/predict", json=body).json()
    assert answer["substation_vm_pu"] == pytest.approx(1.02, abs=2e-4)
    steps = np.asarray(answer["tap_steps"])
    assert steps.shape == (NET.n_outputs,) and steps[bus7] == pytest.approx(0.0125, abs=5e-4)
    assert np.count_nonzero(steps) == 1
    with GridPFNClient(server.url) as python_client:
        frame = python_client.predict(q, model="network-fit", context=(x, y))
    assert frame.attrs["substation_vm_pu"] == pytest.approx(answer["substation_vm_pu"])
    assert frame.attrs["tap_steps"] == answer["tap_steps"]
    plain = client.post("/v1/predict", json={**body, "model": "physics-fit"}).json()
    assert "substation_vm_pu" not in plain and "tap_steps" not in plain
