"""Bounds on an uploaded network's values, one set for both readers (gridsim.pandapower_json, gridsim.matpower).

Why shared: a MATPOWER upload is stored as pandapower JSON and rebuilt from it by the pandapower JSON reader,
so whatever the MATPOWER reader lets through must pass that reader too; one set of numbers keeps the two from
drifting apart (a negative line resistance once uploaded fine and then failed every later use).
"""

from __future__ import annotations

# Bus indices (pandapower) and bus numbers (MATPOWER, from 1) stay below this. pandapower sizes its bus lookups by
# the largest index, not by the number of buses: a bus numbered 2^25 cost half a GiB and seconds in every power
# flow. 2^20 holds six-digit (PSS/E-style) numbering and costs about 16 MiB, what a 500-bus feeder costs anyway.
MAX_BUS_INDEX = 2**20
# A line's series resistance and reactance (ohm/km), charging (nF/km) and length (km): far beyond any real
# conductor or feeder, far from a float's range (x = 1e300 ohm/km underflowed the power flow).
MAX_LINE_OHM_PER_KM = 1e6
MAX_LINE_NF_PER_KM = 1e6
MAX_LINE_KM = 1e4
