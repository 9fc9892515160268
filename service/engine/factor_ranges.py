"""The range of each kind of time-series factor, one definition for a JSON `time_series` and a profile table.

Why one module: the two transports checked `load` against different ranges ([0, 100] in JSON, [-1, 100] in a
file, where -1 turned consumption into generation). Consumption factors are never negative; generation output
shares may dip just below 0 (inverters draw a little at night), and so may a profile (it may be a generation
class's)."""

from __future__ import annotations

import re

LOAD_RANGE = (0.0, 100.0)  # `load`, `load_bus<k>`: consumption x this
PV_RANGE = (-1.0, 100.0)  # `pv`, `pv_bus<k>`: generation's output share
PROFILE_RANGE = PV_RANGE  # a profile by name (a class's, `<class>_pload` / `_qload`, one a DER follows)

PER_BUS_COLUMN = re.compile(r"(load|pv)_bus([0-9]+)", re.ASCII)  # a profile table's per-bus factor column


def column_range(name: str) -> tuple[float, float]:
    """The range of a profile table column `name` holds (the JSON field of the same kind holds the same)."""
    per_bus = PER_BUS_COLUMN.fullmatch(name)
    kind = per_bus.group(1) if per_bus else name
    return LOAD_RANGE if kind == "load" else PV_RANGE if kind == "pv" else PROFILE_RANGE
