"""A JSON body's lists and values are bounded before their items are read (service.http.limits).

Found by a penetration test: a list without a bound, of a few MB of invalid items (`"x"`), made an error per item,
every one converted before the first hundred were listed, all on the event loop: 4 MB in a study's time series
held it 27 s, 28 MB drove the server to 20 GiB and an out-of-memory kill, 6 MB of predict queries held it 9.9 s.
Each list here (200,000 bad items, 0.8 MB) is refused in one error naming it, while /healthz answers and the
server does not grow: a 413 naming the setting past a configured row limit, a 422 otherwise. A quantile level
whose tail a model answered with infinity (5e-324) and an integer longer than Python reads are 422s naming the
field, or the body, where they were a 500 and a bare 400.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from service.http.fast_json import MAX_INT_DIGITS
from service.http.limits import MAX_DER_ADDITIONS, MAX_LOAD_BUSES, MAX_SEED, MAX_STEPS, MIN_LEVEL
from service.http.problems import MAX_LISTED_ERRORS
from tests.security.conftest import SECURITY_ENV, assert_refused, assert_stayed_healthy, watched
from tests.service.conftest import MODEL

BAD_ITEMS = 200_000
MAX_QUERIES = int(SECURITY_ENV["GRIDPFN_MAX_QUERIES"])
MAX_CONTEXT_ROWS = int(SECURITY_ENV["GRIDPFN_MAX_CONTEXT_ROWS"])
MAX_SIMULATE = int(SECURITY_ENV["GRIDPFN_MAX_SIMULATE"])
ROW = [0.01] * 64  # an IEEE 33 load vector
BAD = "@BAD@"  # where a body's list of bad items goes (spliced in as bytes: the test itself stays small)


def _bad_list(item: bytes = b'"x"', count: int = BAD_ITEMS) -> bytes:
    return b"[" + b",".join([item] * count) + b"]"


def _splice(body: dict, items: bytes) -> bytes:
    """`body` as JSON with its BAD placeholder replaced by `items`."""
    return orjson.dumps(body).replace(orjson.dumps(BAD), items)


@pytest.fixture(scope="module")
def cid(hostile_server) -> str:
    """A stored context of 16 rows: physics-fit's smallest, where its Student-t has the fewest degrees of freedom."""
    with hostile_server.client() as client:
        answer = client.post("/v1/context-sets", json={"simulate": {"network": "ieee33", "n": 16, "seed": 3}})
    assert answer.status_code == 201 and answer.json()["rows"] == 16, answer.text
    return answer.json()["id"]


def _post(server, path: str, body: bytes) -> dict:
    """POST a hostile body while the watchdog polls; the refusal it got."""
    with watched(server) as watch, server.client() as client:
        problem = assert_refused(client.post(path, content=body, headers={"content-type": "application/json"}))
    assert_stayed_healthy(watch, server)
    return problem


def _study(cid: str, **fields) -> dict:
    return {"context_id": cid, "scenarios": [{}], **fields}


def _series(**fields) -> dict:
    return {"timestamps": ["t0"], **fields}


# (name, path, body with BAD where the bad items go, status, the field the one error names, words of `expected`)
OVER_A_ROW_LIMIT = [
    ("predict queries", "/v1/predict", lambda c: {"model": MODEL, "context_id": c, "queries": BAD}, "queries",
     f"at most {MAX_QUERIES} rows (GRIDPFN_MAX_QUERIES)"),
    ("GP queries", "/v1/gp/predict", lambda c: {"context_id": c, "queries": BAD}, "queries",
     f"at most {MAX_QUERIES} rows (GRIDPFN_MAX_QUERIES)"),
    ("meter placement queries", "/v1/meter-placement", lambda c: {"context_id": c, "queries": BAD}, "queries",
     f"at most {MAX_QUERIES} rows (GRIDPFN_MAX_QUERIES)"),
    ("inline context x", "/v1/predict", lambda c: {"model": MODEL, "context": {"x": BAD, "y": [[1.0]]},
     "queries": [ROW]}, "context.x", f"at most {MAX_CONTEXT_ROWS} rows (GRIDPFN_MAX_CONTEXT_ROWS)"),
    ("context set y", "/v1/context-sets", lambda c: {"x": [ROW], "y": BAD}, "body.y",
     f"at most {MAX_CONTEXT_ROWS} rows (GRIDPFN_MAX_CONTEXT_ROWS)"),
    ("simulated loads", "/v1/simulate", lambda c: {"loads": BAD}, "loads",
     f"at most {MAX_SIMULATE} rows (GRIDPFN_MAX_SIMULATE)"),
]  # fmt: skip


@pytest.mark.parametrize("name, path, body, field, expected", OVER_A_ROW_LIMIT, ids=[c[0] for c in OVER_A_ROW_LIMIT])
def test_rows_past_their_configured_limit_are_refused_unread(hostile_server, cid, name, path, body, field, expected):
    """The list is counted before any of its rows is validated: one 413, the engine's own (naming the setting)."""
    problem = _post(hostile_server, path, _splice(body(cid), _bad_list()))
    assert problem["status"] == 413 and problem["type"].endswith(":too-large"), problem
    (error,) = problem["errors"]
    assert error["field"] == field and error["expected"].startswith(expected), problem
    assert error["message"].startswith(f"{BAD_ITEMS} ") and "over the limit" in error["message"], problem


BAD_ITEM_LISTS = [
    ("study load factors", "/v1/studies", lambda c: _study(c, time_series=_series(load=BAD)), "time_series.load"),
    ("study pv factors", "/v1/studies", lambda c: _study(c, time_series=_series(pv=BAD)), "time_series.pv"),
    ("study profile", "/v1/studies", lambda c: _study(c, time_series=_series(profiles={"PV5": BAD})),
     "time_series.profiles.PV5[0]"),
    ("study timestamps", "/v1/studies", lambda c: _study(c, time_series={"timestamps": BAD}),
     "time_series.timestamps"),  # "x" is a timestamp: past MAX_STEPS of them, refused at the first one over
    ("study years", "/v1/studies", lambda c: _study(c, scenarios=[{"years": BAD}]), "scenarios[0].years[0]"),
    ("study DER", "/v1/studies", lambda c: _study(c, scenarios=[{"der": BAD}]), "scenarios"),  # counted first
    ("hosting candidate buses", "/v1/hosting-capacity", lambda c: {"context_id": c, "buses": BAD}, "buses[0]"),
    ("hosting PV profile", "/v1/hosting-capacity", lambda c: {"context_id": c, "pv_profile": BAD}, "pv_profile[0]"),
    ("hosting load rows", "/v1/hosting-capacity", lambda c: {"context_id": c, "loads": BAD}, "loads[0]"),
    ("hosting load scales", "/v1/hosting-capacity", lambda c: {"context_id": c, "load_scales": BAD}, "load_scales[0]"),
]  # fmt: skip


@pytest.mark.parametrize("name, path, body, field", BAD_ITEM_LISTS, ids=[c[0] for c in BAD_ITEM_LISTS])
def test_a_list_of_bad_items_is_one_error(hostile_server, cid, name, path, body, field):
    """The list stops at its first bad item (fail_fast): one error, not one per item (a factor list may be one
    per step or one row per step: one error for each of those two shapes)."""
    problem = _post(hostile_server, path, _splice(body(cid), _bad_list()))
    assert problem["status"] == 422 and problem["type"].endswith(":validation-error"), problem
    fields = [error["field"] for error in problem["errors"]]
    assert 1 <= len(fields) <= 2 and all(f.startswith(field) for f in fields), problem
    assert "more" not in problem["detail"], problem  # no errors past the ones listed


def test_objects_of_bad_entries_are_one_error(hostile_server, cid):
    entries = b"{" + b",".join(b'"%d":"x"' % i for i in range(BAD_ITEMS)) + b"}"
    for body, field in (
        (_study(cid, scenarios=[{"bus_load_scale": BAD}]), "scenarios[0].bus_load_scale"),
        (_study(cid, scenarios=[{"class_scaling": BAD}]), "scenarios[0].class_scaling"),
        (_study(cid, time_series=_series(profiles=BAD)), "time_series.profiles"),
        (_study(cid, classes=BAD), "classes"),
    ):
        problem = _post(hostile_server, "/v1/studies", _splice(body, entries))
        assert problem["status"] == 422 and len(problem["errors"]) == 1, problem
        assert problem["errors"][0]["field"].startswith(field), problem


def test_valid_lists_past_their_fixed_bound_are_refused_naming_it(hostile_server, cid):
    """Lists of valid items, one past what any network or study takes (service.http.limits)."""
    cases = [
        (_study(cid, time_series=_series(profiles={"PV5": [1.0] * (MAX_STEPS + 1)})), "time_series.profiles.PV5",
         f"length between 0 and {MAX_STEPS}"),
        (_study(cid, scenarios=[{"bus_load_scale": {str(b): 1.0 for b in range(MAX_LOAD_BUSES + 1)}}]),
         "scenarios[0].bus_load_scale", f"at most {MAX_LOAD_BUSES} entries"),
        # DER additions are counted over every scenario, before any is validated
        (_study(cid, scenarios=[{"der": [{"bus": 18, "kw": 1.0}] * (MAX_DER_ADDITIONS // 2 + 1)}] * 2), "scenarios",
         f"at most {MAX_DER_ADDITIONS} DER additions across the scenarios"),
    ]  # fmt: skip
    for body, field, expected in cases:
        problem = _post(hostile_server, "/v1/studies", orjson.dumps(body))
        assert problem["status"] == 422 and len(problem["errors"]) == 1, problem
        assert problem["errors"][0]["field"] == field and problem["errors"][0]["expected"] == expected, problem
    buses = {"context_id": cid, "buses": list(range(2, 2 + MAX_LOAD_BUSES + 1))}
    problem = _post(hostile_server, "/v1/hosting-capacity", orjson.dumps(buses))
    assert problem["status"] == 422 and len(problem["errors"]) == 1, problem
    assert problem["errors"][0]["field"] == "buses", problem
    assert problem["errors"][0]["expected"] == f"length between 0 and {MAX_LOAD_BUSES}", problem


def test_rows_within_the_limit_list_one_error_each_up_to_the_listed_bound(hostile_server, cid):
    """Bad rows within the row limit are each named (a row stops at its first bad cell), the first
    MAX_LISTED_ERRORS of them listed, and the rest counted."""
    problem = _post(
        hostile_server,
        "/v1/predict",
        _splice({"model": MODEL, "context_id": cid, "queries": BAD}, _bad_list(b'["x"]', MAX_QUERIES)),
    )
    assert problem["status"] == 422 and len(problem["errors"]) == MAX_LISTED_ERRORS, problem
    assert [e["field"] for e in problem["errors"][:2]] == ["queries[0][0]", "queries[1][0]"], problem
    assert f"({MAX_QUERIES} errors, the first {MAX_LISTED_ERRORS} listed)" in problem["detail"], problem


# --- quantile levels ---------------------------------------------------------------------------------
def _models(server) -> list[str]:
    with server.client() as client:
        return [card["name"] for card in client.get("/v1/models").json()["models"]]


def test_quantile_levels_at_their_bounds_are_answered_finitely_by_every_model(hostile_server, cid):
    levels = [MIN_LEVEL, 0.5, 1.0 - MIN_LEVEL]
    models = _models(hostile_server)
    assert {"physics-fit", MODEL} <= set(models), models
    with hostile_server.client() as client:
        for model in models:
            answer = client.post(
                "/v1/predict", json={"model": model, "context_id": cid, "queries": [ROW], "quantiles": levels}
            )
            assert answer.status_code == 200, (model, answer.text)
            values = np.asarray(list(answer.json()["quantiles"].values()), dtype=np.float64)
            assert values.shape == (3, 1, 32) and np.isfinite(values).all(), (model, values)
            assert (np.diff(values, axis=0) >= 0).all(), model  # the levels' order


TINY_LEVEL = 5e-324  # > 0, which was all the schema asked: physics-fit's Student-t answered infinity (a 500)


def test_a_quantile_level_no_model_answers_finitely_is_a_422_naming_it(hostile_server, cid):
    requests = [
        ("/v1/predict", {"model": "physics-fit", "context_id": cid, "queries": [ROW], "quantiles": [TINY_LEVEL]}),
        ("/v1/studies", {"model": "physics-fit", "context_id": cid, "scenarios": [{}], "quantiles": [0.5, TINY_LEVEL]}),
        ("/v1/batch-jobs", {"model": "physics-fit", "context_id": cid, "simulate": {"n": 20},
                            "quantiles": [1.0 - MIN_LEVEL / 10]}),
    ]  # fmt: skip
    with hostile_server.client() as client:
        for path, body in requests:
            problem = assert_refused(client.post(path, json=body))  # a job too: refused, never accepted to fail
            level = len(body["quantiles"]) - 1
            assert problem["status"] == 422 and problem["errors"][0]["field"] == f"quantiles[{level}]", (path, problem)
            low = body["quantiles"][level] < 0.5
            expected = f"a number >= {MIN_LEVEL!r}" if low else f"a number <= {1.0 - MIN_LEVEL!r}"
            assert problem["errors"][0]["expected"] == expected, (path, problem)
        form = {"model": "physics-fit", "context_id": cid, "quantiles": f"0.5,{TINY_LEVEL!r}"}
        problem = assert_refused(client.post("/v1/batch-jobs", data=form, files={"file": ("x.csv", b"a\n1\n")}))
    assert problem["status"] == 422 and problem["errors"][0]["field"] == "quantiles[1]", problem


# --- integers Python does not read ---------------------------------------------------------------------
def test_an_integer_longer_than_python_reads_is_a_422_naming_the_body(hostile_server, cid):
    huge = b"1" + b"0" * (MAX_INT_DIGITS + 700)
    bodies = {
        "/v1/context-sets": b'{"simulate": {"network": "ieee33", "n": 20, "seed": %s}}' % huge,
        "/v1/predict": b'{"model": "%s", "context_id": "%s", "queries": [[%s]]}' % (MODEL.encode(), cid.encode(), huge),
    }
    with hostile_server.client() as client:
        for path, body in bodies.items():
            answer = client.post(path, content=body, headers={"content-type": "application/json"})
            problem = assert_refused(answer)
            assert problem["status"] == 422 and problem["type"].endswith(":validation-error"), (path, problem)
            error = problem["errors"][0]
            assert error["field"] == "body" and f"more than {MAX_INT_DIGITS} digits" in error["message"], problem
            assert error["expected"] == f"JSON numbers of at most {MAX_INT_DIGITS} digits", problem


def test_a_seed_past_64_bits_is_a_422_naming_it(hostile_server, cid):
    """A seed of 21-4300 digits (read by Python's parser past orjson's 64 bits) is refused naming `simulate.seed`, on
    a context set and a batch job: 310 digits and more reached the stored metadata, which orjson cannot write (a 500)."""
    seed = "1" * 400
    bodies = {
        "/v1/context-sets": f'{{"simulate": {{"network": "ieee33", "n": 20, "seed": {seed}}}}}',
        "/v1/batch-jobs": f'{{"context_id": "{cid}", "model": "{MODEL}", "simulate": {{"n": 10, "seed": {seed}}}}}',
    }
    json_type = {"content-type": "application/json"}
    with hostile_server.client() as client:
        for path, body in bodies.items():
            problem = assert_refused(client.post(path, content=body, headers=json_type))
            assert problem["status"] == 422 and problem["errors"][0]["field"] == "simulate.seed", (path, problem)
        largest = f'{{"simulate": {{"network": "ieee33", "n": 20, "seed": {MAX_SEED}}}}}'
        assert client.post("/v1/context-sets", content=largest, headers=json_type).status_code == 201
