"""pandapower JSON read as data: an allow-list of tables, columns and value types, never an object decoder.

`pandapower.from_json` resolves every `{"_module", "_class", "_object"}` it meets, at any depth
(DataFrames nest JSON documents inside strings), and pandas reads a table's `_object` as a file
path when it looks like one: an uploaded file could import any module, call any function and read
server files. This module never does either. It parses the upload with orjson (depth-limited),
checks the envelope pandapower writes (a `pandapowerNet` of `DataFrame`s in `split` orientation),
parses each table's inner JSON with orjson again, and keeps only the tables and columns the
snapshot models (`TABLES`), each cell checked against its column's type: finite numbers, booleans,
short strings or null. Element tables the solver cannot represent are read only far enough to
refuse in-service rows; result tables (`res_*`) and bookkeeping are ignored; anything else with
rows is refused by name. The net is then rebuilt from those values on `pandapower.create_empty_network`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from gridsim.errors import NetworkError
from gridsim.upload_limits import MAX_BUS_INDEX, MAX_LINE_KM, MAX_LINE_NF_PER_KM, MAX_LINE_OHM_PER_KM

__all__ = ["TABLES", "MAX_ROWS", "expected_of", "read_pandapower_json"]

MAX_ROWS = 5_000  # rows in any one table (a 500-bus feeder has well under this)
MAX_COLUMNS = 256  # columns of one table (pandapower's widest have about 60)
MAX_ENTRIES = 512  # entries of the net (pandapower 3 writes about 90 tables and values)
MAX_TEXT = 256  # characters in a name or other label
MAX_GEO_TEXT = 4_096  # characters in one bus's GeoJSON point
EXPECTED = "pandapower JSON (pandapower.to_json output) of element tables"

# Value kinds. Each check returns the Python value pandas will hold, or raises ValueError.
# what a check expects, where its column's dtype ("float64 values") says too little
_EXPECTED: dict[Callable[[Any], Any], str] = {}


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError("not finite")
    return result


def _optional_number(value: Any) -> float:
    return math.nan if value is None else _number(value)


def _positive(value: Any) -> float:
    number = _number(value)
    if number <= 0:
        raise ValueError("not a positive number")
    return number


def _line_value(limit: float, unit: str) -> Callable[[Any], float]:
    """A line's resistance, reactance or charging per km: a negative one is no conductor, and an absurd one
    breaks the power flow's arithmetic (gridsim.upload_limits); gridsim.matpower checks converted lines with it."""

    def check(value: Any) -> float:
        number = _number(value)
        if number < 0:
            raise ValueError("a negative number (a line's resistance, reactance or charging is at least 0)")
        if number > limit:
            raise ValueError(f"over the limit of {limit:g} {unit}")
        return number

    _EXPECTED[check] = f"a number from 0 to {limit:g} {unit}"
    return check


def _line_length(value: Any) -> float:
    number = _positive(value)
    if number > MAX_LINE_KM:
        raise ValueError(f"over the limit of {MAX_LINE_KM:g} km")
    return number


_EXPECTED[_line_length] = f"a length above 0 and at most {MAX_LINE_KM:g} km"


def _count(value: Any) -> int:
    number = _index(value)
    if number < 1:
        raise ValueError("not a count of at least 1")
    return number


def _index(value: Any) -> int:
    number = _number(value)
    if number != int(number) or not 0 <= number < 2**31:
        raise ValueError("not a table index (an integer in [0, 2^31))")
    return int(number)


def _bus_index(value: Any) -> int:
    """A bus's index, or a reference to one: bounded (pandapower's lookups are as long as the largest)."""
    number = _number(value)
    if number != int(number) or not 0 <= number < MAX_BUS_INDEX:
        raise ValueError(
            f"not a bus index in [0, {MAX_BUS_INDEX}) (renumber the buses: pandapower.toolbox.create_continuous_bus_index)"
        )
    return int(number)


_EXPECTED[_bus_index] = f"a bus index in [0, {MAX_BUS_INDEX})"


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    raise ValueError("not a boolean")


def _optional_flag(value: Any) -> bool:
    """A flag the power flow does not read (controllable, current_source): null, as SimBench writes
    it for many elements, is false."""
    return False if value is None else _flag(value)


def _false(value: Any) -> bool:
    if value is None or _flag(value) is False:
        return False
    raise ValueError("must be false: characteristic and dependency tables are not supported")


def _absent(value: Any) -> float:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    raise ValueError("must be empty: characteristic and dependency tables are not supported")


def _text(limit: int) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # a number used as a name
            _number(value)
            return value
        if not isinstance(value, str):
            raise ValueError("not a string")
        if len(value) > limit:
            raise ValueError(f"longer than {limit} characters")
        return value

    return check


def _choice(*allowed: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None or value in allowed:
            return value
        raise ValueError(f"not one of {list(allowed)}")

    return check


_name = _text(MAX_TEXT)
# column -> (check, dtype of the rebuilt column); required columns are the snapshot's `_COLUMNS`
_Column = tuple[Callable[[Any], Any], str]
TABLES: dict[str, dict[str, _Column]] = {
    "bus": {
        "name": (_name, "object"),
        "vn_kv": (_positive, "float64"),
        "type": (_name, "object"),
        "zone": (_name, "object"),
        "in_service": (_flag, "bool"),
        "max_vm_pu": (_optional_number, "float64"),
        "min_vm_pu": (_optional_number, "float64"),
        "geo": (_text(MAX_GEO_TEXT), "object"),
    },
    "ext_grid": {
        "name": (_name, "object"),
        "bus": (_bus_index, "int64"),
        "vm_pu": (_number, "float64"),
        "va_degree": (_number, "float64"),
        "slack_weight": (_optional_number, "float64"),
        "in_service": (_flag, "bool"),
        "controllable": (_optional_flag, "bool"),
    },
    "line": {
        "name": (_name, "object"),
        "std_type": (_name, "object"),
        "from_bus": (_bus_index, "int64"),
        "to_bus": (_bus_index, "int64"),
        "length_km": (_line_length, "float64"),
        "r_ohm_per_km": (_line_value(MAX_LINE_OHM_PER_KM, "ohm/km"), "float64"),
        "x_ohm_per_km": (_line_value(MAX_LINE_OHM_PER_KM, "ohm/km"), "float64"),
        "c_nf_per_km": (_line_value(MAX_LINE_NF_PER_KM, "nF/km"), "float64"),
        "g_us_per_km": (_optional_number, "float64"),
        "max_i_ka": (_optional_number, "float64"),
        "df": (_optional_number, "float64"),
        "parallel": (_count, "int64"),
        "type": (_name, "object"),
        "in_service": (_flag, "bool"),
        "geo": (_text(MAX_GEO_TEXT), "object"),
    },
    "trafo": {
        "name": (_name, "object"),
        "std_type": (_name, "object"),
        "hv_bus": (_bus_index, "int64"),
        "lv_bus": (_bus_index, "int64"),
        "sn_mva": (_positive, "float64"),
        "vn_hv_kv": (_positive, "float64"),
        "vn_lv_kv": (_positive, "float64"),
        "vk_percent": (_number, "float64"),
        "vkr_percent": (_number, "float64"),
        "pfe_kw": (_number, "float64"),
        "i0_percent": (_number, "float64"),
        "shift_degree": (_optional_number, "float64"),
        "tap_side": (_choice("hv", "lv"), "object"),
        "tap_neutral": (_optional_number, "float64"),
        "tap_min": (_optional_number, "float64"),
        "tap_max": (_optional_number, "float64"),
        "tap_step_percent": (_optional_number, "float64"),
        "tap_step_degree": (_optional_number, "float64"),
        "tap_pos": (_optional_number, "float64"),
        "tap_phase_shifter": (_false, "bool"),
        "tap_changer_type": (_choice("Ratio", "Symmetrical", "Ideal"), "object"),
        "tap_dependent_impedance": (_false, "bool"),
        "tap_dependency_table": (_false, "bool"),
        "id_characteristic_table": (_absent, "float64"),
        "vk_percent_characteristic": (_absent, "float64"),
        "vkr_percent_characteristic": (_absent, "float64"),
        "parallel": (_index, "int64"),
        "df": (_optional_number, "float64"),
        "in_service": (_flag, "bool"),
    },
    "load": {
        "name": (_name, "object"),
        "bus": (_bus_index, "int64"),
        "p_mw": (_number, "float64"),
        "q_mvar": (_number, "float64"),
        "const_z_percent": (_optional_number, "float64"),
        "const_i_percent": (_optional_number, "float64"),
        "const_z_p_percent": (_optional_number, "float64"),
        "const_i_p_percent": (_optional_number, "float64"),
        "const_z_q_percent": (_optional_number, "float64"),
        "const_i_q_percent": (_optional_number, "float64"),
        "sn_mva": (_optional_number, "float64"),
        "scaling": (_number, "float64"),
        "in_service": (_flag, "bool"),
        "type": (_name, "object"),
        "profile": (_name, "object"),  # a customer class (SimBench: H0-A, ...), read by studies
        "controllable": (_optional_flag, "bool"),
    },
    "sgen": {
        "name": (_name, "object"),
        "bus": (_bus_index, "int64"),
        "p_mw": (_number, "float64"),
        "q_mvar": (_number, "float64"),
        "min_q_mvar": (_optional_number, "float64"),
        "max_q_mvar": (_optional_number, "float64"),
        "sn_mva": (_optional_number, "float64"),
        "scaling": (_number, "float64"),
        "controllable": (_optional_flag, "bool"),
        "id_q_capability_characteristic": (_absent, "float64"),
        "reactive_capability_curve": (_false, "bool"),
        "curve_style": (_name, "object"),
        "in_service": (_flag, "bool"),
        "type": (_name, "object"),
        "profile": (_name, "object"),  # a generation class (SimBench: PV5, ...), read by studies
        "current_source": (_optional_flag, "bool"),
        "k": (_optional_number, "float64"),
        "rx": (_optional_number, "float64"),
        "generator_type": (_name, "object"),
        "lrc_pu": (_optional_number, "float64"),
        "max_ik_ka": (_optional_number, "float64"),
        "kappa": (_optional_number, "float64"),
    },
    "shunt": {
        "bus": (_bus_index, "int64"),
        "name": (_name, "object"),
        "q_mvar": (_number, "float64"),
        "p_mw": (_number, "float64"),
        "vn_kv": (_number, "float64"),
        "step": (_number, "float64"),
        "max_step": (_index, "int64"),
        "id_characteristic_table": (_absent, "float64"),
        "step_dependency_table": (_false, "bool"),
        "in_service": (_flag, "bool"),
    },
    "switch": {
        "bus": (_bus_index, "int64"),
        "element": (_index, "int64"),
        "et": (_choice("l", "t", "t3", "b"), "object"),
        "type": (_name, "object"),
        "closed": (_flag, "bool"),
        "name": (_name, "object"),
        "z_ohm": (_optional_number, "float64"),
        "in_ka": (_optional_number, "float64"),
    },
}
# tables the snapshot refuses when they have in-service rows (gridsim.feeders._UNSUPPORTED): read only
# far enough for that, so the refusal keeps its clear reason
_REFUSED_IF_IN_SERVICE = (
    "gen",
    "trafo3w",
    "impedance",
    "ward",
    "xward",
    "dcline",
    "storage",
    "asymmetric_load",
    "asymmetric_sgen",
    "motor",
    "svc",
    "tcsc",
    "ssc",
    "vsc",
    "bus_dc",
    "line_dc",
    "source_dc",
    "load_dc",
    "vsc_stacked",
    "vsc_bipolar",
)
# bookkeeping that does not change a power flow: ignored whatever it holds (never decoded)
_IGNORED = (
    "measurement",
    "pwl_cost",
    "poly_cost",
    "group",
    "bus_geodata",
    "line_geodata",
    "std_types",
    "user_pf_options",
    "version",
    "format_version",
    "converged",
    "OPF_converged",
    "_options",
    # SimBench's study-case factors and substation names: tables its own tools read, the power flow never
    "loadcases",
    "substation",
)
_SCALARS = {"name": _name, "f_hz": _positive, "sn_mva": _positive}


def expected_of(table: str, column: str) -> str:
    """What a column's values must be, in words (the `expected` of its refusals)."""
    check, dtype = TABLES[table][column]
    return _EXPECTED.get(check, f"{dtype} values")


def _refuse(field: str, problem: str, expected: str = EXPECTED) -> NetworkError:
    return NetworkError(field, problem, expected)


def _loads(text: bytes | str, field: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:  # also JSON nested deeper than orjson's limit (1024)
        raise _refuse(field, f"not JSON ({str(exc)[:120]})") from None


def _rows(
    field: str, frame: Any, row_index: Callable[[Any], int] = _index
) -> tuple[list[str], list[int], list[list[Any]]]:
    """(columns, index, data) of one table's envelope, checked for the shape pandas' `split` orientation has
    (its row indices by `row_index`: the bus table's are bounded)."""
    if not isinstance(frame, dict) or frame.get("_module") != "pandas.core.frame" or frame.get("_class") != "DataFrame":
        raise _refuse(field, "not a DataFrame table", "a DataFrame envelope as pandapower.to_json writes it")
    if frame.get("orient", "split") != "split" or frame.get("is_multiindex") or frame.get("is_multicolumn"):
        raise _refuse(field, "only split-oriented tables with a plain index are accepted")
    inner = frame.get("_object")
    if not isinstance(inner, str):  # never a path, a URL or a nested object: the table's own JSON text
        raise _refuse(field, "the table's data is not a JSON document in a string")
    split = _loads(inner, field)
    if (
        not isinstance(split, dict)
        or not isinstance(split.get("columns"), list)
        or not isinstance(split.get("index"), list)
        or not isinstance(split.get("data"), list)
    ):
        raise _refuse(field, "the table's data has no columns/index/data lists")
    columns, index, data = split["columns"], split["index"], split["data"]
    if len(data) != len(index) or len(index) > MAX_ROWS:
        raise _refuse(
            field, f"{len(index)} index entries for {len(data)} rows", f"matching lengths, at most {MAX_ROWS} rows"
        )
    if len(columns) > MAX_COLUMNS:
        raise _refuse(field, f"{len(columns)} columns is over the limit", f"at most {MAX_COLUMNS} columns")
    if not all(isinstance(c, str) for c in columns) or len(set(columns)) != len(columns):
        raise _refuse(field, "column names are not distinct strings")
    if not all(isinstance(row, list) and len(row) == len(columns) for row in data):
        raise _refuse(field, f"a row is not a list of {len(columns)} cells")
    rows = []
    for i in index:
        try:
            rows.append(row_index(i))
        except ValueError as exc:
            problem = f"{exc} (got {_preview(i)})"
            raise _refuse(f"{field}.index", problem, _EXPECTED.get(row_index, "integer row indices")) from None
    if len(set(rows)) != len(rows):
        raise _refuse(f"{field}.index", "repeated row index", "distinct row indices")
    return columns, rows, data


def _table(name: str, frame: Any) -> Any:
    """A checked pandas DataFrame of the allowed columns of one element table."""
    import pandas as pd

    columns, index, data = _rows(name, frame, _bus_index if name == "bus" else _index)
    schema = TABLES[name]
    values: dict[str, Any] = {}
    for position, column in enumerate(columns):
        if column not in schema:
            continue
        check, dtype = schema[column]
        cells = []
        for row, cells_of_row in zip(index, data):
            try:
                cells.append(check(cells_of_row[position]))
            except ValueError as exc:
                raise _refuse(
                    f"{name}.{column}",
                    f"row {row}: {exc} (got {_preview(cells_of_row[position])})",
                    expected_of(name, column),
                ) from None
        values[column] = pd.Series(cells, index=index, dtype=dtype)
    for position, column in enumerate(columns):  # others never read into the net; refused where they hold values
        if column in schema:
            continue
        if not _harmless(column) and any(row[position] not in (None, "", False) for row in data):
            raise _refuse(
                f"{name}.{column}",
                f"column {column!r} is not modelled by this service",
                f"the {name} columns {sorted(schema)} (others empty)",
            )
    return pd.DataFrame(values, index=pd.Index(index, dtype="int64"))


# short-circuit, OPF-limit and asymmetric (zero-sequence) data: no balanced power flow reads them
_HARMLESS = {
    "s_sc_max_mva",
    "s_sc_min_mva",
    "rx_max",
    "rx_min",
    "r0x0_max",
    "x0x_max",
    "k",
    "rx",
    "kappa",
    "lrc_pu",
    "max_ik_ka",
    "generator_type",
    "vector_group",
    "mag0_rx",
    "si0_hv_partial",
    "endtemp_degree",
    "xn_ohm",
    "oltc",
    "power_station_trafo",
    "description",
    "subnet",
    "voltLvl",
    "autoTap",  # SimBench's tap-controller settings: it builds controllers from them, pandapower's power flow never reads them
    "autoTapSide",
    "autoTapSetp",
    "profile",
    "phys_type",
    "substation",
    "origin",
    "geo",
    "type",
    "dependency_table",
    "slack",
    "controllable",
}


def _harmless(column: str) -> bool:
    """Columns the service ignores by design (see `_HARMLESS`), whatever they hold: never read into the net."""
    return column in _HARMLESS or column.startswith(
        (
            "max_",
            "min_",
            "cost",
            "vk0",
            "vkr0",
            "mag0",
            "r0_",
            "x0_",
            "c0_",
            "g0_",
            "alpha",
            "temperature",
            "wind",
            "r_theta",
        )
    )


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _in_service_flags(name: str, frame: Any) -> dict[int, bool]:
    columns, index, data = _rows(name, frame)
    if "in_service" not in columns:
        return dict.fromkeys(index, True)
    position = columns.index("in_service")
    try:
        return {row: _flag(cells[position]) for row, cells in zip(index, data)}
    except ValueError:
        raise _refuse(f"{name}.in_service", "not a boolean", "true or false") from None


def read_pandapower_json(text: str | bytes) -> Any:
    """A pandapower net rebuilt from the values of an upload (see the module docstring); NetworkError if refused."""
    import pandapower as pp
    import pandas as pd

    document = _loads(text, "body")
    if (
        not isinstance(document, dict)
        or document.get("_module") != "pandapower.auxiliary"
        or document.get("_class") != "pandapowerNet"
        or not isinstance(document.get("_object"), dict)
    ):
        raise _refuse("body", "not a pandapower net (no pandapowerNet envelope)")
    entries: dict[str, Any] = document["_object"]
    if len(entries) > MAX_ENTRIES:
        raise _refuse("body", f"{len(entries)} entries is over the limit", f"at most {MAX_ENTRIES} tables and values")
    for key in entries:
        if not isinstance(key, str) or len(key) > 64:
            raise _refuse("body", "an entry name is not a short string")
    scalars: dict[str, Any] = {}
    for key, check in _SCALARS.items():
        if key in entries and entries[key] is not None:
            try:
                scalars[key] = check(entries[key])
            except ValueError as exc:
                raise _refuse(key, str(exc), "a positive number (f_hz, sn_mva) or a string (name)") from None
    net = pp.create_empty_network(
        name=str(scalars.get("name") or ""), f_hz=scalars.get("f_hz", 50.0), sn_mva=scalars.get("sn_mva", 1.0)
    )
    for key, value in entries.items():
        if key in _SCALARS or key in _IGNORED or key.startswith(("res_", "_empty_res", "_")):
            continue
        if key in TABLES:
            net[key] = _merge(net[key], _table(key, value))
        elif key in _REFUSED_IF_IN_SERVICE:  # only its in-service flags: the snapshot refuses it with the reason
            flags = _in_service_flags(key, value)
            if any(flags.values()):
                net[key] = pd.DataFrame({"in_service": pd.Series(flags, dtype=bool)})
        elif not _empty_table(value):
            raise _refuse(
                key,
                "this table is not accepted in an uploaded net (controllers, characteristics and "
                "other objects are never decoded)",
                "element tables only",
            )
    return net


def _empty_table(value: Any) -> bool:
    """An entry with nothing in it: null, an empty container, or a DataFrame envelope without rows."""
    if value is None or value == {} or value == [] or value == "":
        return True
    if isinstance(value, dict) and value.get("_class") == "DataFrame" and isinstance(value.get("_object"), str):
        try:
            split = orjson.loads(value["_object"])
        except orjson.JSONDecodeError:
            return False
        return isinstance(split, dict) and split.get("data") == [] and split.get("index") == []
    return False


def _merge(empty: Any, read: Any) -> Any:
    """The read table in pandapower's column layout: its columns typed as pandapower types them, the
    columns it lacks at pandapower's defaults (NaN, or False for flags)."""
    import pandas as pd

    out = pd.DataFrame(index=read.index)
    for column in dict.fromkeys([*empty.columns, *read.columns]):
        if column in read:
            out[column] = read[column]
        elif str(empty[column].dtype) == "bool":
            out[column] = np.zeros(len(read), dtype=bool)
        elif str(empty[column].dtype) in ("object", "str"):
            out[column] = pd.Series([None] * len(read), index=read.index, dtype="object")
        else:
            out[column] = np.full(len(read), np.nan)
    return out
