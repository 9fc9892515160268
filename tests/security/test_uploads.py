"""Hostile network uploads (issue 28, findings 1-3 and the deep-JSON row of 8), through a real server process.

Each payload is a variant of a benign upload that the same server accepts (the control), so a
refusal is the payload's doing. Every answer must be a 4xx problem+json, no marker file may appear
(a payload that ran a command would create it), the server's file contents must not come back,
and /healthz must stay under 100 ms with resident memory bounded while the upload is read.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pandapower as pp
import pytest

from gridsim.network import pandapower_net
from tests.security.conftest import KEY_A, assert_refused, assert_stayed_healthy, curl_post, watched

BASE = "kerber_landnetz_kabel_1"  # a feeder with a transformer, so tap columns reach pandapower's branch model


@pytest.fixture(scope="module")
def base_json() -> dict:
    return json.loads(pp.to_json(pandapower_net(BASE)))


def _table(document: dict, name: str) -> dict:
    return json.loads(document["_object"][name]["_object"])


def _set_table(document: dict, name: str, split: dict, escape: bool = False) -> None:
    text = json.dumps(split, ensure_ascii=True)
    document["_object"][name]["_object"] = _escape_keys(text) if escape else text


def _escape_keys(text: str) -> str:
    """`"_module"` spelled with JSON escapes, as an attacker would to slip past a text search."""
    return text.replace('"_module"', '"_modul\\u0065"').replace('"_class"', '"\\u005fclass"')


def _marker(server) -> Path:
    return server.workdir / f"pwned-{uuid.uuid4().hex}"


def _post(server, body: bytes | str, content_type: str = "application/json", key: str = KEY_A):
    with server.client(key, timeout=120) as client:
        return client.post("/v1/networks", content=body, headers={"content-type": content_type})


def test_the_benign_base_upload_is_accepted(hostile_server, base_json):
    """The control: without a payload the same document uploads, so the refusals below are the payloads'."""
    response = _post(hostile_server, json.dumps(base_json))
    assert response.status_code == 201, response.text
    assert response.json()["n_buses"] == 18


def _rce_characteristic(base: dict, command: str, module: str, function: str, escape: bool) -> str:
    """Finding 1 as reported: a `characteristic` table whose cell decodes to `module.function`, and a
    transformer with a tap-dependent impedance that calls it with `tap_pos` (a shell command)."""
    document = json.loads(json.dumps(base))
    characteristic = {
        "columns": ["object"],
        "index": [0],
        "data": [[{"_module": module, "_class": "function", "_object": function}]],
    }
    document["_object"]["characteristic"] = {
        "_module": "pandas.core.frame",
        "_class": "DataFrame",
        "_object": "",
        "orient": "split",
        "dtype": {"object": "object"},
        "is_multiindex": False,
        "is_multicolumn": False,
    }
    _set_table(document, "characteristic", characteristic, escape)
    trafo = _table(document, "trafo")
    for column in ("tap_dependency_table", "id_characteristic_table"):  # pandapower 3 then takes the spline path
        if column in trafo["columns"]:
            position = trafo["columns"].index(column)
            trafo["columns"].pop(position)
            for row in trafo["data"]:
                row.pop(position)
    document["_object"]["trafo"]["dtype"].update(
        tap_pos="object", tap_dependent_impedance="bool", vk_percent_characteristic="object"
    )
    for column, value in (("tap_dependent_impedance", True), ("vk_percent_characteristic", 0), ("tap_pos", command)):
        if column in trafo["columns"]:
            trafo["data"][0][trafo["columns"].index(column)] = value
        else:
            trafo["columns"].append(column)
            trafo["data"][0].append(value)
    _set_table(document, "trafo", trafo, escape)
    return json.dumps(document)


def test_the_payload_is_live_against_pandapowers_own_decoder(base_json, tmp_path):
    """The control for the corpus: pandapower's decoder plus a power flow runs the command (a `touch`).
    If this ever stops creating the marker, the corpus below no longer proves anything."""
    marker = tmp_path / "live"
    net = pp.from_json_string(_rce_characteristic(base_json, f"touch {marker}", "os", "system", escape=True))
    with pytest.raises(AttributeError):  # os.system's int has no .item(): the flow fails after the command ran
        pp.runpp(net)
    assert marker.exists()


RCE_VARIANTS = [
    ("os", "system", False),
    ("os", "system", True),
    ("subprocess", "getoutput", True),
    ("builtins", "exec", True),
    ("importlib", "import_module", False),
    ("posix", "system", True),
]


@pytest.mark.parametrize("module,function,escape", RCE_VARIANTS)
def test_code_execution_through_a_characteristic_is_refused(hostile_server, base_json, module, function, escape):
    marker = _marker(hostile_server)
    body = _rce_characteristic(base_json, f"touch {marker}", module, function, escape)
    with watched(hostile_server) as watch:
        response = _post(hostile_server, body)
    body = assert_refused(response)
    assert response.status_code == 422 and not marker.exists()
    assert any(
        e["field"] in ("characteristic", "trafo.tap_pos", "trafo.tap_dependent_impedance") for e in body["errors"]
    ), body
    assert_stayed_healthy(watch, hostile_server)


def _object_cell(module: str, cls: str, obj: str) -> dict:
    return {"_module": module, "_class": cls, "_object": obj}


@pytest.mark.parametrize("table", ["bus", "line", "load", "ext_grid", "trafo"])
@pytest.mark.parametrize("escape", [False, True])
def test_objects_nested_in_any_table_are_never_decoded(hostile_server, base_json, table, escape):
    """An object envelope as a cell of an accepted column: a value of the wrong type, refused by name."""
    marker = _marker(hostile_server)
    document = json.loads(json.dumps(base_json))
    split = _table(document, table)
    column = "name" if "name" in split["columns"] else split["columns"][0]
    if not split["data"]:
        pytest.skip(f"{BASE} has no {table} rows")
    split["data"][0][split["columns"].index(column)] = _object_cell("subprocess", "check_output", f"touch {marker}")
    _set_table(document, table, split, escape)
    response = _post(hostile_server, json.dumps(document))
    body = assert_refused(response)
    assert body["errors"][0]["field"] == f"{table}.{column}" and not marker.exists()


@pytest.mark.parametrize("where", ["top-level entry", "table envelope", "std_types", "controller"])
def test_object_envelopes_anywhere_else_are_refused_or_ignored_unread(hostile_server, base_json, where):
    marker = _marker(hostile_server)
    document = json.loads(json.dumps(base_json))
    payload = _object_cell("os", "system", f"touch {marker}")
    if where == "top-level entry":
        document["_object"]["evil"] = payload
    elif where == "table envelope":
        document["_object"]["load"] = payload
    elif where == "std_types":
        document["_object"]["std_types"] = {"line": {"evil": payload}}
    else:
        document["_object"]["controller"] = {
            "_module": "pandas.core.frame",
            "_class": "DataFrame",
            "orient": "split",
            "_object": json.dumps({"columns": ["object"], "index": [0], "data": [[payload]]}),
        }
    response = _post(hostile_server, json.dumps(document))
    assert not marker.exists()
    if where == "std_types":  # bookkeeping the service never reads: accepted, the payload never decoded
        assert response.status_code == 201, response.text
    else:
        assert_refused(response)


@pytest.mark.parametrize("spelling", ["absolute", "file-url", "relative", "missing"])
@pytest.mark.parametrize("table", ["bus", "line"])
def test_paths_in_place_of_table_data_never_read_a_file(hostile_server, base_json, tmp_path, spelling, table):
    """Finding 2: pandas reads a table's `_object` as a file when it looks like a path; here it is never read,
    and an existing path and a missing one answer the same (no file-existence oracle)."""
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"columns": ["name"], "index": [0], "data": [["SECRET-7f3a"]]}))
    path = {
        "absolute": str(secret),
        "file-url": secret.as_uri(),
        "relative": f"../../{secret}",
        "missing": str(tmp_path / "missing.json"),
    }[spelling]
    document = json.loads(json.dumps(base_json))
    document["_object"][table]["_object"] = path
    response = _post(hostile_server, json.dumps(document))
    body = assert_refused(response)
    assert "SECRET-7f3a" not in response.text and "does not exist" not in response.text
    assert body["errors"][0]["field"] == table and body["errors"][0]["message"].startswith("not JSON")


def test_an_existing_and_a_missing_path_answer_alike(hostile_server, base_json, tmp_path):
    answers = []
    for path in (tmp_path / "there.json", tmp_path / "not-there.json"):
        if path.name == "there.json":
            path.write_text("{}")
        document = json.loads(json.dumps(base_json))
        document["_object"]["bus"]["_object"] = str(path)
        answers.append(_post(hostile_server, json.dumps(document)))
    first, second = (a.json() for a in answers)
    assert first["errors"][0]["message"].split("(")[0] == second["errors"][0]["message"].split("(")[0]
    assert answers[0].status_code == answers[1].status_code == 422


MATPOWER_BOMBS = {
    "opening brackets": b"mpc.bus=[" * 16_000,
    "opening brackets, 4 MB": b"mpc.bus=[" * 450_000,
    "mpc. without =": b"mpc." * 1_000_000,
    "assignments on one line": b"mpc.a=1;" * 400_000,
    "a string never closed": b"mpc.version = '" + b"x" * 3_000_000,
    "rows of growing width": b"mpc.bus = [" + b"1 " * 2_000_000 + b"];",
}


@pytest.mark.parametrize("name", list(MATPOWER_BOMBS))
def test_matpower_text_that_was_quadratic_is_refused_without_freezing(hostile_server, name):
    """Finding 3: the old reader's patterns were quadratic on the event loop (/healthz blocked 19 s)."""
    with watched(hostile_server) as watch:
        response = _post(hostile_server, MATPOWER_BOMBS[name], "text/plain")
    assert_refused(response)
    assert_stayed_healthy(watch, hostile_server)


@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_json_nested_100000_deep_is_a_422(hostile_server, opener):
    """Finding 8 on /v1/networks: a RecursionError was a 500."""
    response = _post(hostile_server, opener * 100_000)
    body = assert_refused(response)
    assert response.status_code == 422 and body["errors"][0]["field"] == "body"


def test_a_table_declaring_a_million_rows_is_refused_by_its_size(hostile_server, base_json, tmp_path):
    document = json.loads(json.dumps(base_json))
    document["_object"]["load"]["_object"] = json.dumps(
        {
            "columns": ["bus", "p_mw", "q_mvar", "scaling", "in_service"],
            "index": list(range(1_000_000)),
            "data": [[3, 0.01, 0.0, 1.0, True]] * 1_000_000,
        }
    )
    body = tmp_path / "million.json"
    body.write_text(json.dumps(document))
    with watched(hostile_server) as watch:  # sent from another process (curl_post says why)
        code, text = curl_post(
            f"{hostile_server.url}/v1/networks", "-H", "content-type: application/json", "--data-binary", f"@{body}"
        )
    assert_stayed_healthy(watch, hostile_server)
    assert 400 <= code < 500, text
    assert json.loads(text)["status"] == code


def _mpc(bus_rows: int) -> dict:
    import numpy as np

    return {"version": "2", "baseMVA": 10.0, "bus": np.zeros((bus_rows, 13)), "gen": np.zeros((1, 10)),
            "branch": np.zeros((1, 13))}  # fmt: skip


def _savemat(mpc: dict) -> bytes:
    import io

    import scipy.io

    sink = io.BytesIO()
    scipy.io.savemat(sink, {"mpc": mpc}, do_compression=True)
    return sink.getvalue()


def _mat_bomb(bus_rows: int, block_bytes: int = 16 << 20) -> bytes:
    """The file `scipy.io.savemat(..., do_compression=True)` writes for `_mpc(bus_rows)`, built in ~0.1 s: savemat
    itself spends ~15 s of a busy 2-core host materialising and deflating 16e6 rows (1.6 GB) of zeros. savemat
    writes the struct with 7 bus rows; its compressed element is unpacked, the bus matrix's sizes and dimensions
    set to `bus_rows`, and it is deflated again with its zeros as one deflated `block_bytes` block repeated (past
    a full flush a deflate stream refers back to nothing, so each such block deflates to the same bytes); the
    zlib checksum steps over the zeros arithmetically (a zero byte leaves Adler-32's `a` and adds `a` to `b`)."""
    import struct
    import zlib

    small = 7
    template = _savemat(_mpc(small))
    header, (kind, _) = template[:128], struct.unpack("<II", template[128:136])
    assert kind == 15  # miCOMPRESSED: the whole variable, zlib-compressed
    element = bytearray(zlib.decompress(template[136:]))
    grow = (bus_rows - small) * 13 * 8
    dims = element.index(struct.pack("<4i", 5, 8, small, 13))  # miINT32, 8 bytes: (7, 13), the bus matrix's
    # the struct's miMATRIX (at 0), the bus field's miMATRIX (before its array flags), its miDOUBLE data (after its name)
    for at, expected_kind in ((0, 14), (dims - 24, 14), (dims + 24, 9)):
        found_kind, size = struct.unpack_from("<II", element, at)
        assert found_kind == expected_kind, (at, found_kind)
        struct.pack_into("<II", element, at, found_kind, size + grow)
    struct.pack_into("<2i", element, dims + 8, bus_rows, 13)
    start = dims + 32
    prefix, suffix, zeros = bytes(element[:start]), bytes(element[start + small * 13 * 8 :]), bus_rows * 13 * 8
    deflate, block = zlib.compressobj(9, zlib.DEFLATED, -15), bytes(block_bytes)
    parts = [deflate.compress(prefix), deflate.flush(zlib.Z_FULL_FLUSH)]
    repeated = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    blocks, rest = divmod(zeros, len(block))
    parts += [repeated * blocks, deflate.compress(bytes(rest)), deflate.compress(suffix), deflate.flush()]
    adler = zlib.adler32(prefix)
    a, b = adler & 0xFFFF, adler >> 16
    adler = zlib.adler32(suffix, ((b + zeros * a) % 65521) << 16 | a)
    stream = b"\x78\x9c" + b"".join(parts) + struct.pack(">I", adler)
    return header + struct.pack("<II", kind, len(stream)) + stream


def test_a_compressed_mat_bomb_is_stopped_by_the_sandbox(hostile_server):
    """A .mat file whose zlib-compressed matrix decompresses to ~2 GB: the reader process hits its memory
    cap (413/422), the server does not grow."""
    import zlib

    small = _mat_bomb(1000, block_bytes=4096)  # every step of the construction (25 repeated blocks and a rest) ...
    assert zlib.decompress(small[136:]) == zlib.decompress(_savemat(_mpc(1000))[136:])  # ... gives savemat's bytes
    data = _mat_bomb(16_000_000)  # 1.6 GB of zeros, a few MB compressed
    assert len(data) < 4_000_000
    with watched(hostile_server) as watch:
        with hostile_server.client(KEY_A, timeout=120) as client:
            response = client.post("/v1/networks", files={"file": ("bomb.mat", data, "application/octet-stream")})
    assert_refused(response)
    assert response.status_code in (413, 422)
    assert_stayed_healthy(watch, hostile_server)


def test_a_table_with_300000_columns_is_refused_at_once(hostile_server, base_json):
    """Found after the first fixes: unknown columns were looked up one by one (quadratic), so one upload of 700k columns
    held the upload reader for its whole CPU limit while other keys' uploads queued."""
    import time

    document = json.loads(json.dumps(base_json))
    document["_object"]["bus"]["_object"] = json.dumps(
        {"columns": [f"c{i}" for i in range(300_000)], "index": [], "data": []}
    )
    started = time.monotonic()
    response = _post(hostile_server, json.dumps(document))
    body = assert_refused(response)
    assert body["errors"][0]["field"] == "bus" and "columns" in body["errors"][0]["message"]
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("entry,value", [("f_hz", 0), ("f_hz", -60), ("sn_mva", -10)])
def test_nonsense_system_values_are_refused(hostile_server, base_json, entry, value):
    document = json.loads(json.dumps(base_json))
    document["_object"][entry] = value
    body = assert_refused(_post(hostile_server, json.dumps(document)))
    assert body["errors"][0]["field"] == entry


@pytest.mark.parametrize("column, name, value", [(3, "BR_R", "-0.01"), (4, "BR_X", "-0.02"), (5, "BR_B", "-0.001")])
def test_a_matpower_line_with_a_negative_constant_is_a_422_naming_its_branch(hostile_server, column, name, value):
    """Was a 201, and every later use of the network a 500 (its stored form's rebuild refused the line)."""
    from tests.gridsim.feeder_cases import CASE3_M

    row = "1\t2\t0.0575\t0.0293\t0\t0\t0\t0\t0\t0\t1\t-360\t360;"
    cells = row.rstrip(";").split("\t")
    cells[column - 1] = value
    response = _post(hostile_server, CASE3_M.replace(row, "\t".join(cells) + ";"), "text/plain")
    body = assert_refused(response)
    assert response.status_code == 422 and body["errors"][0]["field"] == "mpc.branch"
    assert body["errors"][0]["message"].startswith(f"row 1, column {column} ({name}): {value} "), body


def _bus_renumbered(base: dict, index: int) -> str:
    """The base feeder with its last bus given pandapower index `index` (and every reference to it)."""
    document = json.loads(json.dumps(base))
    old = _table(document, "bus")["index"][-1]
    for name in ("bus", "line", "trafo", "load", "sgen", "switch"):
        split = _table(document, name)
        if name == "bus":
            split["index"][-1] = index
        for column in ("bus", "from_bus", "to_bus", "hv_bus", "lv_bus"):
            if column in split["columns"]:
                position = split["columns"].index(column)
                for row in split["data"]:
                    row[position] = index if row[position] == old else row[position]
        _set_table(document, name, split)
    return json.dumps(document)


def test_a_bus_index_of_2_25_is_refused_before_anything_is_sized_by_it(hostile_server, base_json):
    """Was a 201 (~8 KB), then 4.8 s and +511 MiB of the server for every rebuild; 2^26 a 422 quoting a
    MemoryError. Refused by the reader, naming the index and its range; 2^20 - 1 is still a bus index."""
    with watched(hostile_server) as watch:
        response = _post(hostile_server, _bus_renumbered(base_json, 2**25 - 1))
    body = assert_refused(response)
    assert response.status_code == 422 and body["errors"][0]["field"] == "bus.index", body
    assert "[0, 1048576)" in body["errors"][0]["expected"]
    assert_stayed_healthy(watch, hostile_server)
    assert _post(hostile_server, _bus_renumbered(base_json, 2**20 - 1)).status_code == 201


def test_a_matpower_bus_number_of_a_billion_is_a_422_naming_its_row(hostile_server):
    from tests.gridsim.feeder_cases import CASE3_M

    case = CASE3_M.replace("\t3\t1\t0.09", "\t1000000000\t1\t0.09").replace("2\t3\t0.3076", "2\t1000000000\t0.3076")
    body = assert_refused(_post(hostile_server, case, "text/plain"))
    assert body["status"] == 422 and body["errors"][0]["field"] == "mpc.bus", body
    assert body["errors"][0]["message"] == "row 3, column 1: 1000000000 is not a bus number from 1 to 1048576"


def test_absurd_values_are_refused_in_words_not_exception_names(hostile_server, base_json):
    """x = 1e300 ohm/km answered 'FloatingPointError: underflow encountered in divide'; now refused up front with
    its range, and a case the power flow cannot compute (a tap ratio of 1e300) in words."""
    from tests.gridsim.feeder_cases import CASE3_M

    document = json.loads(json.dumps(base_json))
    line = _table(document, "line")
    line["data"][0][line["columns"].index("x_ohm_per_km")] = 1e300
    _set_table(document, "line", line)
    body = assert_refused(_post(hostile_server, json.dumps(document)))
    assert body["errors"][0]["field"] == "line.x_ohm_per_km" and "1e+06 ohm/km" in body["errors"][0]["expected"]
    row = "1\t2\t0.0575\t0.0293\t0\t0\t0\t0\t0\t0\t1\t-360\t360;"
    tapped = CASE3_M.replace(row, row.replace("0\t0\t0\t0\t0\t0\t1", "0\t0\t0\t0\t1e300\t0\t1"))
    response = _post(hostile_server, tapped, "text/plain")
    body = assert_refused(response)
    assert response.status_code == 422 and body["errors"][0]["field"] == "net", body
    assert "Error" not in response.text and "allocate" not in response.text
