"""MATPOWER cases read as data: a linear-time reader of `mpc.*` matrices (.m text), and .mat bytes.

Why not `pandapower.converter.from_mpc`: its .m reader (matpowercaseframes) finds matrices with
regular expressions that take quadratic time on hostile text (`mpc.bus=[` repeated) and writes the
upload to disk first. This reader makes one pass over the text with `str.find` and splits: no
`eval`, no regular expressions, no temporary files; text, matrices and numbers are capped
(`MAX_TEXT_BYTES`, `MAX_ROWS`, `MAX_CELLS`). `.mat` bytes go through `scipy.io.loadmat` (a binary
reader of numeric arrays that runs no code; uploads are read in the upload sandbox, whose memory
limit bounds it). Either way the result is a MATPOWER `ppc` dict of float arrays that
`pandapower.converter.from_ppc` turns into a net, whose lines `check_lines` puts through the pandapower JSON
reader's own checks: the net is stored as pandapower JSON and rebuilt by that reader at every later use.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from gridsim.errors import NetworkError
from gridsim.upload_limits import MAX_BUS_INDEX

__all__ = ["MAX_TEXT_BYTES", "MAX_ROWS", "MAX_CELLS", "parse_m", "parse_mat", "to_ppc", "check_lines"]

MAX_TEXT_BYTES = 8 * 1024 * 1024
MAX_ROWS = 20_000  # rows of any one matrix
MAX_CELLS = 2_000_000  # numbers in the whole case
EXPECTED = "a MATPOWER case file (version 2): .m text with mpc.bus/mpc.branch/mpc.gen, or .mat"
# columns MATPOWER requires of each matrix (more are allowed: OPF results, extra user columns)
REQUIRED = {"bus": 13, "gen": 10, "branch": 11}
# the line column pandapower.converter.from_ppc makes of each branch column (1-based, as MATPOWER names them)
LINE_COLUMNS = {"r_ohm_per_km": (3, "BR_R"), "x_ohm_per_km": (4, "BR_X"), "c_nf_per_km": (5, "BR_B")}


def _refuse(field: str, problem: str) -> NetworkError:
    return NetworkError(field, problem, EXPECTED)


def _shown(value: float) -> str:
    """A number as the case wrote it: whole numbers in full (bus 2147483647, not 2.14748e+09)."""
    return str(int(value)) if math.isfinite(value) and value == int(value) and abs(value) < 2**63 else f"{value:g}"


def _strip_comment(line: str) -> str:
    """The line without its `%` comment (a `%` inside a quoted string stays)."""
    if "%" not in line:
        return line
    quoted = False
    for i, char in enumerate(line):
        if char == "'":
            quoted = not quoted
        elif char == "%" and not quoted:
            return line[:i]
    return line


def _number(token: str, field: str) -> float:
    try:
        value = float(token)
    except ValueError:
        low = token.lower()
        if low in ("inf", "+inf"):
            return math.inf
        if low == "-inf":
            return -math.inf
        raise _refuse(field, f"{token[:40]!r} is not a number") from None
    if math.isnan(value):
        raise _refuse(field, "NaN is not a value")
    return value


def _matrix(body: str, field: str, budget: list[int]) -> np.ndarray:
    """The rows of `[...]` (rows split by `;` or line breaks, cells by spaces, tabs or commas)."""
    rows: list[list[float]] = []
    for raw in body.replace("\n", ";").split(";"):
        cells = raw.replace(",", " ").replace("\t", " ").split()
        if not cells:
            continue
        budget[0] -= len(cells)
        if budget[0] < 0 or len(rows) >= MAX_ROWS:
            raise NetworkError(
                field, "the case is too large", f"at most {MAX_ROWS} rows per matrix and {MAX_CELLS} numbers in all"
            )
        if rows and len(cells) != len(rows[0]):
            raise _refuse(field, f"row {len(rows) + 1} has {len(cells)} columns, row 1 has {len(rows[0])}")
        rows.append([_number(c, field) for c in cells])
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(rows[0]) if rows else 0)


def parse_m(data: bytes) -> dict[str, Any]:
    """`{field: value}` of the `mpc.<field> = ...;` statements of a .m case (numbers, strings, matrices)."""
    if len(data) > MAX_TEXT_BYTES:
        raise NetworkError("body", f"{len(data)} bytes is over the limit", f"at most {MAX_TEXT_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _refuse("body", "not UTF-8 text") from None
    text = "\n".join(_strip_comment(line) for line in text.splitlines())
    fields: dict[str, Any] = {}
    budget = [MAX_CELLS]
    pos, end, line_end = 0, len(text), -1
    while pos < end:  # every find below is bounded by the current line or consumed: one pass over the text
        start = text.find("mpc.", pos)
        if start < 0:
            break
        if start > line_end:
            line_end = text.find("\n", start)
            line_end = end if line_end < 0 else line_end
        equals = text.find("=", start, line_end)
        name = text[start + 4 : equals].strip() if equals >= 0 else ""
        if not name.isidentifier() or len(name) > 64:  # `mpc.x` used, not assigned: skip the line
            pos = line_end + 1
            continue
        value_start = equals + 1
        while value_start < line_end and text[value_start] in " \t":
            value_start += 1
        opener = text[value_start : value_start + 1]
        field = f"mpc.{name}"
        if opener in ("[", "{"):
            closer = "]" if opener == "[" else "}"
            stop = text.find(closer, value_start + 1)
            if stop < 0:
                raise _refuse(field, f"{opener} without its {closer}")
            body = text[value_start + 1 : stop]
            if opener == "[":
                if "[" in body:
                    raise _refuse(field, "a matrix inside a matrix")
                fields[name] = _matrix(body, field, budget)
            else:  # a cell array of strings (bus_name)
                fields[name] = [cell.strip().strip("'") for cell in body.replace("\n", ";").split(";") if cell.strip()]
            pos = stop + 1
        elif opener == "'":
            stop = text.find("'", value_start + 1)
            if stop < 0 or stop > line_end:
                raise _refuse(field, "a string without its closing quote")
            fields[name] = text[value_start + 1 : stop]
            pos = stop + 1
        else:
            stop = text.find(";", value_start, line_end)
            stop = line_end if stop < 0 else stop
            token = text[value_start:stop].strip()
            fields[name] = _number(token, field) if token else None
            pos = stop + 1
    return fields


def parse_mat(data: bytes) -> dict[str, Any]:
    """`{field: value}` of the `mpc` struct in .mat bytes."""
    import scipy.io

    try:
        content = scipy.io.loadmat(io.BytesIO(data), squeeze_me=True, struct_as_record=False, mat_dtype=False)
    except MemoryError:
        raise  # the reader's memory cap (a compressed matrix that inflates past it): the upload sandbox's 413
    except Exception:  # scipy raises many kinds on malformed files
        raise _refuse("body", "not a readable .mat file") from None
    mpc = content.get("mpc")
    if mpc is None or not hasattr(mpc, "_fieldnames"):
        raise _refuse("body", "the .mat file holds no struct named mpc")
    return {name: getattr(mpc, name) for name in mpc._fieldnames}


def to_ppc(fields: dict[str, Any]) -> dict[str, Any]:
    """A pypower case (0-based bus numbers) from the parsed fields, each matrix checked: bus numbers distinct,
    from 1 to MAX_BUS_INDEX (pandapower indexes buses by them), and every branch and generator on one of them."""
    version = str(fields.get("version", "2")).strip()
    if version != "2":
        raise _refuse("mpc.version", f"version {version!r}: only MATPOWER case format version 2 is read")
    try:
        base_mva = float(fields.get("baseMVA", 100.0))
    except (TypeError, ValueError):
        raise _refuse("mpc.baseMVA", "not a number") from None
    if not (math.isfinite(base_mva) and base_mva > 0):
        raise _refuse("mpc.baseMVA", f"{base_mva} is not a positive number")
    ppc: dict[str, Any] = {"version": "2", "baseMVA": base_mva}
    for name, columns in REQUIRED.items():
        if name not in fields:
            raise _refuse(f"mpc.{name}", "missing")
        try:
            matrix = np.array(fields[name], dtype=np.float64, ndmin=2)
        except (TypeError, ValueError):
            raise _refuse(f"mpc.{name}", "not a numeric matrix") from None
        if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] < columns:
            raise _refuse(f"mpc.{name}", f"shape {matrix.shape}: needs at least one row of {columns} columns")
        if matrix.shape[0] > MAX_ROWS:
            raise NetworkError(f"mpc.{name}", f"{matrix.shape[0]} rows is over the limit", f"at most {MAX_ROWS} rows")
        if np.isnan(matrix).any():
            raise _refuse(f"mpc.{name}", "NaN is not a value")
        ppc[name] = matrix.copy()
    numbers = ppc["bus"][:, 0]
    bad = np.flatnonzero(
        ~np.isfinite(numbers) | (numbers != np.round(numbers)) | (numbers < 1) | (numbers > MAX_BUS_INDEX)
    )
    if len(bad):  # pandapower indexes its buses by these numbers, and sizes its lookups by the largest
        raise NetworkError(
            "mpc.bus",
            f"row {bad[0] + 1}, column 1: {_shown(numbers[bad[0]])} is not a bus number from 1 to {MAX_BUS_INDEX}",
            f"bus numbers (integers) from 1 to {MAX_BUS_INDEX}; renumber a case with larger ones",
        )
    _, first = np.unique(numbers, return_index=True)
    if len(first) < len(numbers):
        again = int(np.setdiff1d(np.arange(len(numbers)), first)[0])
        before = int(np.flatnonzero(numbers == numbers[again])[0])
        raise _refuse(
            "mpc.bus",
            f"bus number {_shown(numbers[again])} is in rows {before + 1} and {again + 1}: each bus has its own",
        )
    for name, column in (("gen", 0), ("branch", 0), ("branch", 1)):
        ids = ppc[name][:, column]
        missing = np.flatnonzero(~np.isin(ids, numbers))
        if len(missing):
            raise NetworkError(
                f"mpc.{name}",
                f"row {missing[0] + 1}, column {column + 1}: {_shown(ids[missing[0]])} is not a bus number of mpc.bus",
                "the number (column 1) of a row of mpc.bus",
            )
    for name, column in (("bus", 0), ("gen", 0), ("branch", 0), ("branch", 1)):
        ppc[name][:, column] -= 1  # MATPOWER numbers from 1, pypower from 0
    branch = ppc["branch"]
    branch[branch[:, 8] == 0, 8] = 1  # MATPOWER's TAP 0 means "not a transformer", pypower's 1
    return ppc


def check_lines(net: Any, ppc: dict[str, Any]) -> None:
    """The branches pandapower.converter.from_ppc made lines of, through the very checks the stored net's
    rebuild applies to every line (gridsim.pandapower_json.TABLES): refused here, naming the branch's row and
    column, rather than accepted and then refused at every later use (a negative resistance did just that)."""
    from gridsim.pandapower_json import TABLES, expected_of

    lookup = net._from_ppc_lookups["branch"]
    row_of = {int(e): row for row, (e, kind) in enumerate(zip(lookup.element, lookup.element_type)) if kind == "line"}
    for column, (position, name) in LINE_COLUMNS.items():
        check = TABLES["line"][column][0]
        for line, value in zip(net.line.index.tolist(), net.line[column].tolist()):
            try:
                check(value)
            except ValueError as exc:
                row = row_of[int(line)]
                given = float(ppc["branch"][row, position - 1])
                converted = "" if given == value else f" (as a line, {column} = {value:.4g})"
                raise NetworkError(
                    "mpc.branch",
                    f"row {row + 1}, column {position} ({name}): {given:g}{converted} is {exc}",
                    f"{name} of a line such that pandapower's {column} is {expected_of('line', column)}",
                ) from None
