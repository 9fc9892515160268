"""Any radial pandapower net as a `Network` snapshot: validation, loaders, content id, layout.

`snapshot(net)` turns a radial (or radially operated) distribution network into the frozen
`Network` the batched solver uses, after checking it (each failure a `NetworkError` naming the
net's table and the problem). What it models, exactly as pandapower's power flow does:

- one slack (the in-service `ext_grid`); buses numbered by their pandapower index (an uploaded net that is
  a built-in unchanged, e.g. pandapower's case33bw, as the built-in numbers it: `built_in_twins`);
- lines: series impedance and charging (`c_nf_per_km`, `g_us_per_km`, half at each end);
  out-of-service lines, and lines cut by an open switch, whose two ends are energised are the
  tie lines (`tie_*`) that reconfigurations may close;
- two-winding transformers as pandapower converts them for its own power flow (its branch
  table: series impedance, magnetising branch, off-nominal ratio at the set tap position,
  phase shift); tap *controllers* are not run, the tap stays where the net has it;
- parallel branches (two or more conducting lines, or transformers, between the same two buses)
  as one equivalent branch: series admittances added, charging and magnetising admittances
  added; parallel transformers must have the same sides, ratio and phase shift (unequal taps
  drive a circulating current), and a line in parallel with a transformer is refused;
- bus shunts (`shunt`), loads (several on one bus are summed, `scaling` applied) and static
  generators (`sgen`, negative load), all constant power; loads at the slack bus change no
  voltage and are left out of the features;
- switches: an open line or transformer switch cuts that branch for the topology; cut at one
  end only, the branch hangs from its other end as in pandapower (a line's charging, a
  transformer's magnetising branch: an admittance to ground there, a tie's only while it is
  open); a closed bus-bus switch fuses its two buses (the lower index stays), an open one
  connects nothing;
- buses that no closed path joins to the slack are left out when they carry no load.

Refused, with the reason: no slack or several, PV generators (`gen`) and other elements the
constant-power solver cannot represent (three-winding transformers, impedances, wards, DC
lines, storage, voltage-dependent loads, bus-bus switches with an impedance), an element or
switch on a missing bus or branch, a closed loop as operated (named by its buses and branches),
a disconnected bus with load, zero-impedance lines, more than `MAX_BUSES` buses, and a base
load whose power flow does not converge.

Features are P then Q of every bus with a load or sgen (`p_mw_bus<k>`, `q_mvar_bus<k>`),
outputs the voltage magnitude of every non-slack bus (`vm_pu_bus<k>`), k the bus number. Each load and
sgen's customer class (its `profile`, else its `type`) splits the consumption and generation per class
(`Network.class_names`), so a study can scale a class or give it a profile.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import logging
import math

import numpy as np

from gridsim.errors import NetworkError
from gridsim.network import Network, _frozen

__all__ = [
    "MAX_BUSES",
    "NetworkError",
    "normalise",
    "snapshot",
    "from_pandapower_json",
    "from_matpower",
    "MATPOWER_OFFSET",
    "network_id",
    "describe",
    "numbering",
    "number_offset",
    "tree_layout",
]

log = logging.getLogger(__name__)

MAX_BUSES = 500
# agreement of the snapshot's batched solution with pandapower at base load, checked on every snapshot
SELF_CHECK_PU = 1e-6
# characters of a network's title kept (its own name or the one its uploader gave)
MAX_TITLE = 120
# pandapower's load `type` default says how a load is connected, not who it serves: no customer class
_CONNECTION_TYPES = {"wye", "delta"}
# element tables the constant-power Z-bus solver cannot represent
_UNSUPPORTED = {
    "gen": "PV generators (voltage-controlled) are not supported: one slack, loads and sgens only",
    "trafo3w": "three-winding transformers are not supported",
    "impedance": "impedance elements are not supported",
    "ward": "ward equivalents are not supported",
    "xward": "extended ward equivalents are not supported",
    "dcline": "DC lines are not supported",
    "storage": "storage units are not supported (model them as loads or sgens)",
    "asymmetric_load": "asymmetric loads are not supported",
    "asymmetric_sgen": "asymmetric static generators are not supported",
    "motor": "motors are not supported",
    "svc": "static var compensators are not supported",
    "tcsc": "thyristor-controlled series capacitors are not supported",
    "ssc": "static synchronous compensators are not supported",
    "vsc": "voltage source converters are not supported",
}
# the columns this module reads, per table (pandapower.to_json output has them all)
_COLUMNS = {
    "bus": ("vn_kv", "in_service"),
    "ext_grid": ("bus", "vm_pu", "va_degree", "in_service"),
    "line": (
        "from_bus",
        "to_bus",
        "length_km",
        "r_ohm_per_km",
        "x_ohm_per_km",
        "c_nf_per_km",
        "parallel",
        "in_service",
    ),
    "load": ("bus", "p_mw", "q_mvar", "scaling", "in_service"),
    "sgen": ("bus", "p_mw", "q_mvar", "scaling", "in_service"),
    "trafo": ("hv_bus", "lv_bus", "in_service"),
    "switch": ("bus", "element", "et", "closed"),
    "shunt": ("bus",),
}
_BUS_REFERENCES = (
    ("ext_grid", "bus"),
    ("load", "bus"),
    ("sgen", "bus"),
    ("shunt", "bus"),
    ("line", "from_bus"),
    ("line", "to_bus"),
    ("trafo", "hv_bus"),
    ("trafo", "lv_bus"),
    ("switch", "bus"),
)


def _in_service(table):
    return table[table.in_service.astype(bool)] if "in_service" in table else table


def _check_tables(net) -> None:
    import pandas as pd

    for table, columns in _COLUMNS.items():
        if not isinstance(net.get(table), pd.DataFrame):
            raise NetworkError(
                table,
                f"missing or not a table (got {type(net.get(table)).__name__})",
                "a pandapower element table (pandapower.to_json output)",
            )
        missing = [c for c in columns if c not in net[table].columns]
        if missing:
            raise NetworkError(table, f"columns {missing} missing", f"a pandapower {table} table with {list(columns)}")


def _check_elements(net) -> None:
    _check_tables(net)
    n_bus = int(net.bus.in_service.astype(bool).sum())
    if n_bus > MAX_BUSES:
        raise NetworkError("bus", f"{n_bus} in-service buses is over the limit", f"at most {MAX_BUSES} buses")
    buses = set(net.bus.index.tolist())
    for table, column in _BUS_REFERENCES:
        if table not in net or net[table].empty:
            continue
        missing = net[table][~net[table][column].isin(buses)]
        if len(missing):
            idx, bus = missing.index[0], missing[column].iloc[0]
            raise NetworkError(
                f"{table}.{column}",
                f"{table} {idx} is on bus {bus}, which the net does not have",
                "the index of a row of net.bus",
            )
    for table, why in _UNSUPPORTED.items():
        if table in net and len(_in_service(net[table])):
            raise NetworkError(table, f"{len(_in_service(net[table]))} in service: {why}", f"no in-service {table}")
    slacks = _in_service(net.ext_grid)
    if len(slacks) != 1:
        problem = (
            "no slack: the net has no in-service ext_grid"
            if len(slacks) == 0
            else f"{len(slacks)} slacks (ext_grids at buses {sorted(slacks.bus.tolist())})"
        )
        raise NetworkError("ext_grid", problem, "exactly one in-service ext_grid (the substation)")
    _check_switches(net)
    loads = _in_service(net.load)
    shares = [c for c in loads.columns if c.startswith("const_") and c.endswith("percent")]
    voltage_dependent = loads[(loads[shares].fillna(0) != 0).any(axis=1)] if shares else loads.iloc[0:0]
    if len(voltage_dependent):
        raise NetworkError(
            "load",
            f"load {voltage_dependent.index[0]} is voltage-dependent (constant-impedance/current share)",
            f"{shares} all 0 (constant power)",
        )


def _check_switches(net) -> None:
    """Every switch on an element the net has, a line or transformer switch at one of its branch's ends."""
    ends = {"l": ("line", "from_bus", "to_bus"), "t": ("trafo", "hv_bus", "lv_bus")}
    buses = set(net.bus.index.tolist())
    for idx, row in net.switch.iterrows():
        et, element = row.et, row.element
        if et == "b":
            if element not in buses:
                raise NetworkError(
                    "switch.element",
                    f"bus-bus switch {idx} joins bus {element}, which the net does not have",
                    "the index of a row of net.bus",
                )
            z_ohm = row.get("z_ohm")
            if bool(row.closed) and z_ohm is not None and z_ohm > 0:  # pandapower: an impedance, not a fusion
                raise NetworkError(
                    "switch.z_ohm",
                    f"closed bus-bus switch {idx} has an impedance ({z_ohm} ohm)",
                    "z_ohm 0 (a closed bus-bus switch fuses its buses; model an impedance as a line)",
                )
        elif et in ends:
            table, a, b = ends[et]
            if element not in net[table].index:
                raise NetworkError(
                    "switch.element",
                    f"switch {idx} is on {table} {element}, which the net does not have",
                    f"the index of a row of net.{table}",
                )
            branch_ends = (net[table].at[element, a], net[table].at[element, b])
            if row.bus not in branch_ends:
                raise NetworkError(
                    "switch.bus",
                    f"switch {idx} is at bus {row.bus}, which is no end of {table} {element} "
                    f"(buses {[int(e) for e in branch_ends]})",
                    f"the {a} or {b} of the switched {table}",
                )
        elif et != "t3":  # three-winding transformers are refused when in service
            raise NetworkError("switch.et", f"switch {idx} has element type {et!r}", "'l', 't', 't3' or 'b'")


def _apply_switches(net) -> None:
    """Closed bus-bus switches fuse their two buses (the lower index stays); the open line and
    transformer switches stay (pandapower hangs such a branch from its other end, see `_hanging`),
    every other switch is dropped."""
    import pandapower as pp

    while True:
        sw = net.switch
        closed = sw[(sw.et == "b") & sw.closed.astype(bool) & (sw.bus != sw.element)]
        if closed.empty:
            break
        a, b = int(closed.bus.iloc[0]), int(closed.element.iloc[0])
        pp.toolbox.fuse_buses(net, min(a, b), max(a, b))
    sw = net.switch
    kept = ~sw.closed.astype(bool) & (
        ((sw.et == "l") & sw.element.isin(net.line.index)) | ((sw.et == "t") & sw.element.isin(net.trafo.index))
    )
    net.switch = sw[kept]


def _open_ends(net, table: str) -> dict[int, set[int]]:
    """Branch index -> the buses at which an open switch cuts it (a normalised net keeps only those switches)."""
    sw = net.switch[(net.switch.et == ("l" if table == "line" else "t")) & ~net.switch.closed.astype(bool)]
    cut: dict[int, set[int]] = {}
    for bus, element in zip(sw.bus.tolist(), sw.element.tolist()):
        cut.setdefault(int(element), set()).add(int(bus))
    return cut


def _closed(net, table: str):
    """The in-service rows of a branch table that no open switch cuts: the branches that conduct."""
    rows = _in_service(net[table])
    return rows[~rows.index.isin(list(_open_ends(net, table)))]


def _energised(net):
    """(networkx MultiGraph of the closed branches among in-service buses, slack bus, reached buses)."""
    import networkx as nx

    live = set(net.bus.index[net.bus.in_service.astype(bool)].tolist())
    graph = nx.MultiGraph()
    graph.add_nodes_from(live)
    for table, a, b in (("line", "from_bus", "to_bus"), ("trafo", "hv_bus", "lv_bus")):
        for idx, row in _closed(net, table).iterrows():
            if row[a] in live and row[b] in live:
                graph.add_edge(int(row[a]), int(row[b]), key=(table, int(idx)))
    slack = int(_in_service(net.ext_grid).bus.iloc[0])
    if slack not in live:
        raise NetworkError("ext_grid.bus", f"the slack's bus {slack} is out of service", "an in-service bus")
    return graph, slack, nx.node_connected_component(graph, slack)


def _check_topology(net, graph, slack, reached) -> None:
    import networkx as nx

    loaded = set(_in_service(net.load).bus.tolist()) | set(_in_service(net.sgen).bus.tolist())
    stranded = sorted(int(b) for b in loaded - reached)
    if stranded:
        raise NetworkError(
            "bus",
            f"buses {stranded[:10]}{' ...' if len(stranded) > 10 else ''} carry loads but no "
            f"closed line or transformer connects them to the slack (bus {slack})",
            "every bus with a load or sgen energised from the slack",
        )
    sub = graph.subgraph(reached)
    pairs = sorted({(min(a, b), max(a, b)) for a, b in sub.edges()})
    for a, b in pairs:  # parallel branches are merged into one (see `_line_branches`, `_trafo_branches`)
        keys = sorted(sub[a][b])
        if len({table for table, _ in keys}) > 1:
            raise NetworkError(
                "line",
                f"{' and '.join(f'{t} {i}' for t, i in keys)} in parallel between buses {a} and {b}: "
                "a line in parallel with a transformer is not supported",
                "parallel branches of one kind (lines with lines, transformers with transformers)",
            )
    simple = nx.Graph(sub)  # parallel branches as one edge
    if simple.number_of_edges() != simple.number_of_nodes() - 1:
        cycle = nx.find_cycle(simple, source=slack)
        buses = [int(edge[0]) for edge in cycle]
        branches = ["/".join(f"{t} {i}" for t, i in sorted(sub[edge[0]][edge[1]])) for edge in cycle]
        raise NetworkError(
            "line",
            f"not radial when operated: closed loop through buses {buses} ({', '.join(branches)})",
            "a radial feeder: open one branch of every loop (in_service=False or an open switch)",
        )
    lines = _in_service(net.line)
    zero = lines[(lines.r_ohm_per_km == 0) & (lines.x_ohm_per_km == 0)]
    if len(zero):
        raise NetworkError(
            "line",
            f"line {zero.index[0]} has zero impedance",
            "r_ohm_per_km or x_ohm_per_km > 0 (join such buses with a closed bus-bus switch)",
        )


def _base_load_flow(net) -> None:
    import pandapower as pp

    try:
        pp.runpp(net, tolerance_mva=1e-10, max_iteration=50, calculate_voltage_angles=True, numba=False)
    except pp.LoadflowNotConverged as exc:
        raise NetworkError(
            "load",
            "the power flow does not converge at the net's base load",
            "a case whose base load has a power-flow solution",
        ) from exc
    except MemoryError:
        raise  # the reader's memory cap, not a fault of the net: the upload sandbox answers it (413)
    except ArithmeticError as exc:  # an overflow or underflow (numpy raises FloatingPointError in pandapower's calls)
        log.warning("pandapower.runpp failed numerically: %r", exc)
        raise NetworkError(
            "net",
            "the power flow fails numerically: a value (an impedance, load or voltage) is far outside a feeder's range",
            "the impedances, loads and voltages of a real feeder",
        ) from exc
    except Exception as exc:  # pandapower's own checks (missing columns, bad values); the log has which
        log.warning("pandapower.runpp refused a net: %r", exc)
        raise NetworkError(
            "net", "pandapower cannot run a power flow on it", "a net that pandapower.runpp accepts"
        ) from exc


def _branch_rows(net, table: str, index) -> dict[str, np.ndarray]:
    """pandapower's own MATPOWER branch rows of some lines or transformers (after its power flow): ppc bus
    of each end, series impedance, shunt admittance, ratio (1 where none) and phase shift."""
    from pandapower.pypower import idx_brch
    from pandapower.pypower.idx_brch import BR_B, BR_R, BR_STATUS, BR_X, F_BUS, SHIFT, T_BUS, TAP

    start, _ = net._pd2ppc_lookups["branch"][table]
    branch = net._ppc["branch"][[start + net[table].index.get_loc(i) for i in index]]
    rows = branch.real
    # branch-table columns of pandapower 3 (older versions have no shunt conductance or asymmetry)
    optional = {
        name: getattr(idx_brch, name, None) for name in ("BR_G", "BR_R_ASYM", "BR_X_ASYM", "BR_G_ASYM", "BR_B_ASYM")
    }
    asym = [c for name, c in optional.items() if name.endswith("ASYM") and c is not None]
    if len(rows) and asym and np.abs(rows[:, asym]).max() > 0:
        raise NetworkError(table, f"asymmetric {table} impedance is not supported", "a symmetric T or pi model")
    # shunt admittance as pandapower's makeYbus forms it: BR_G + j BR_B (pandapower 3), j BR_B with a
    # complex BR_B = b - j g (pandapower 2)
    y_sh = 1j * branch[:, BR_B] + (rows[:, optional["BR_G"]] if optional["BR_G"] is not None else 0.0)
    return dict(
        f=rows[:, F_BUS].astype(np.int64),
        t=rows[:, T_BUS].astype(np.int64),
        status=rows[:, BR_STATUS] != 0,
        z=rows[:, BR_R] + 1j * rows[:, BR_X],
        y_sh=np.asarray(y_sh, dtype=np.complex128),
        ratio=np.where(rows[:, TAP] != 0, rows[:, TAP], 1.0),
        shift=rows[:, SHIFT],
    )


def _trafo_branches(net, trafos, number):
    """MATPOWER branch rows of the conducting transformers from pandapower's own conversion, transformers
    in parallel (the same two buses) merged into one: series and magnetising admittances added."""
    if not len(trafos):
        return {}
    rows = _branch_rows(net, "trafo", trafos.index)
    ppc_bus = net._pd2ppc_lookups["bus"]
    hv, lv = trafos.hv_bus.to_numpy(), trafos.lv_bus.to_numpy()
    if not (np.array_equal(rows["f"], ppc_bus[hv]) and np.array_equal(rows["t"], ppc_bus[lv])):
        raise NetworkError("trafo", "pandapower's branch table does not run from hv_bus to lv_bus", "hv_bus -> lv_bus")
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (a, b) in enumerate(zip(hv.tolist(), lv.tolist())):
        groups.setdefault((min(a, b), max(a, b)), []).append(i)
    z, y_sh, first = [], [], []
    for members in groups.values():
        first.append(members[0])
        if len(members) == 1:
            z.append(rows["z"][members[0]])
            y_sh.append(rows["y_sh"][members[0]])
            continue
        _check_parallel_trafos(trafos, hv, lv, rows, members)
        z.append(1.0 / np.sum(1.0 / rows["z"][members]))
        y_sh.append(np.sum(rows["y_sh"][members]))
    z, y_sh = np.array(z), np.array(y_sh)
    return dict(
        trafo_hv_bus=_frozen([number[int(b)] for b in hv[first]], np.int64),
        trafo_lv_bus=_frozen([number[int(b)] for b in lv[first]], np.int64),
        trafo_r_pu=_frozen(z.real),
        trafo_x_pu=_frozen(z.imag),
        trafo_g_pu=_frozen(y_sh.real),
        trafo_b_pu=_frozen(y_sh.imag),
        trafo_ratio=_frozen(rows["ratio"][first]),
        trafo_shift_degree=_frozen(rows["shift"][first]),
    )


def _check_parallel_trafos(trafos, hv, lv, rows, members) -> None:
    """Parallel transformers merge into one only with the same sides, ratio and phase shift: unequal taps
    drive a current round the pair that one equivalent transformer cannot carry."""
    names = " and ".join(f"trafo {trafos.index[i]}" for i in members)
    where = f"between buses {min(hv[members[0]], lv[members[0]])} and {max(hv[members[0]], lv[members[0]])}"
    if len({(int(hv[i]), int(lv[i])) for i in members}) > 1:
        raise NetworkError(
            "trafo",
            f"{names} in parallel {where} have their high-voltage sides on different buses",
            "parallel transformers with hv_bus and lv_bus on the same buses",
        )
    ratio, shift = rows["ratio"][members], rows["shift"][members]
    if np.ptp(ratio) > 1e-9 or np.ptp(shift) > 1e-9:
        raise NetworkError(
            "trafo",
            f"{names} in parallel {where} have unequal ratios {[round(float(r), 6) for r in ratio]} or phase "
            f"shifts {[round(float(d), 6) for d in shift]} (tap positions, rated voltages): a circulating current "
            "no single equivalent transformer carries",
            "parallel transformers with the same ratio and phase shift (the same rated voltages and tap position)",
        )


def _hanging(net, table: str, reached) -> list[tuple[int, int, complex]]:
    """In-service branches that an open switch cuts at one end hang from the other, as pandapower models
    them (an open end on an auxiliary bus): (index, bus, admittance to ground in p.u. the branch puts at
    that bus) for each whose other end is energised."""
    a, b = ("from_bus", "to_bus") if table == "line" else ("hv_bus", "lv_bus")
    rows = _in_service(net[table])
    hanging = []
    for idx, cut in _open_ends(net, table).items():
        if idx not in rows.index:
            continue
        ends = (int(rows.at[idx, a]), int(rows.at[idx, b]))
        live = [end for end in ends if end not in cut]
        if len(live) != 1 or ends[0] == ends[1] or live[0] not in reached:
            continue
        row = {k: v[0] for k, v in _branch_rows(net, table, [idx]).items()}
        if not row["status"]:
            continue
        ys, y_sh = 1.0 / row["z"], row["y_sh"]
        tap = row["ratio"] * np.exp(1j * np.pi / 180 * row["shift"])
        y_ff, y_ft, y_tf, y_tt = (ys + y_sh / 2) / (tap * np.conj(tap)), -ys / np.conj(tap), -ys / tap, ys + y_sh / 2
        y = y_ff - y_ft * y_tf / y_tt if live[0] == ends[0] else y_tt - y_tf * y_ft / y_ff
        hanging.append((int(idx), live[0], complex(y)))
    return hanging


def _bus_shunts(net, buses, number, hanging=()):
    """Bus shunts (p.u.) from pandapower's bus table, plus the admittances `hanging` (bus, y) adds."""
    from pandapower.pypower.idx_bus import BS, GS

    ppc_bus = net._pd2ppc_lookups["bus"]
    rows = net._ppc["bus"][ppc_bus[np.asarray(buses)]].real
    y = (rows[:, GS] + 1j * rows[:, BS]) / net.sn_mva
    position = {bus: i for i, bus in enumerate(buses)}
    for bus, y_bus in hanging:
        y[position[bus]] += y_bus
    keep = np.flatnonzero(y != 0)
    return dict(
        shunt_bus=_frozen([number[int(buses[i])] for i in keep], np.int64), shunt_y_pu=_frozen(y[keep], np.complex128)
    )


def _line_branches(lines, vn_kv, sn_mva, f_hz):
    """(from_bus, to_bus, r_ohm, x_ohm, g_pu, b_pu) of the lines, parallel lines (the same two buses) merged
    into one equivalent: series admittances and charging added, in p.u. of each line's own base."""
    g, b = _charging(lines, vn_kv, sn_mva, f_hz)
    length = (lines.length_km / lines.parallel).to_numpy()
    z_ohm = lines.r_ohm_per_km.to_numpy() * length + 1j * lines.x_ohm_per_km.to_numpy() * length
    fb, tb = lines.from_bus.to_numpy(np.int64), lines.to_bus.to_numpy(np.int64)
    z_base = np.array([vn_kv[int(bus)] ** 2 / sn_mva for bus in fb])
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (a, c) in enumerate(zip(fb.tolist(), tb.tolist())):
        groups.setdefault((min(a, c), max(a, c)), []).append(i)
    first = [members[0] for members in groups.values()]
    z = np.array(
        [z_ohm[m[0]] if len(m) == 1 else z_base[m[0]] / np.sum(z_base[m] / z_ohm[m]) for m in groups.values()],
        dtype=np.complex128,
    )
    g_sum = np.array([g[m].sum() for m in groups.values()])
    b_sum = np.array([b[m].sum() for m in groups.values()])
    return fb[first], tb[first], z.real, z.imag, g_sum, b_sum


def _charging(lines, vn_kv, sn_mva, f_hz):
    """Total charging (g, b) in p.u. per line, pandapower's formula (build_branch._calc_line_parameter)."""
    base_r = np.array([vn_kv[int(b)] for b in lines.from_bus]) ** 2 / sn_mva
    g_us = lines.g_us_per_km.to_numpy() if "g_us_per_km" in lines else np.zeros(len(lines))
    b = (
        2
        * f_hz
        * math.pi
        * lines.c_nf_per_km.to_numpy()
        * 1e-9
        * base_r
        * lines.length_km.to_numpy()
        * lines.parallel.to_numpy()
    )
    g = g_us * 1e-6 * base_r * lines.length_km.to_numpy() * lines.parallel.to_numpy()
    return g, b


def _geodata(net, buses) -> np.ndarray:
    """(n, 2) bus coordinates when every bus has geodata, else (0, 2)."""
    old_style = net.get("bus_geodata")  # pandapower 2: a table of x, y
    if "geo" not in net.bus and old_style is not None and len(old_style) and {"x", "y"} <= set(old_style.columns):
        if not set(buses) <= set(old_style.index):
            return np.zeros((0, 2))
        return old_style.loc[buses, ["x", "y"]].to_numpy(dtype=np.float64)
    xy = []
    for bus in buses:
        geo = net.bus.geo.get(bus) if "geo" in net.bus else None
        try:
            point = json.loads(geo) if isinstance(geo, str) else geo
            xy.append([float(point["coordinates"][0]), float(point["coordinates"][1])])
        except (TypeError, KeyError, IndexError, ValueError):
            return np.zeros((0, 2))
    return np.array(xy, dtype=np.float64).reshape(-1, 2)


def normalise(net):
    """A checked copy of the net with its closed bus-bus switches fused and only its open line and
    transformer switches kept (the net the snapshot describes; pandapower's power flow on it is the
    original's)."""
    net = copy.deepcopy(net)
    # forget an earlier power flow's internals (pandapower's recycle would reuse stale element tables)
    for cached in ("_ppc", "_ppc0", "_ppc1", "_ppc2", "_is_elements", "_is_elements_final"):
        if cached in net:
            net[cached] = None
    if isinstance(net.get("_pd2ppc_lookups"), dict):
        net["_pd2ppc_lookups"] = dict.fromkeys(net["_pd2ppc_lookups"])
    _check_elements(net)
    _apply_switches(net)
    return net


def snapshot(net, name: str | None = None, number_offset: int = 0, keep_source: bool = True) -> Network:
    """Validate a pandapower net and snapshot it as a `Network` (see the module docstring).

    The net is not changed. `name` defaults to the content id (`network_id`); buses are numbered
    pandapower index + `number_offset`. `keep_source` keeps the normalised net as pandapower JSON
    in `source_json`, so `pandapower_net(network)` can rebuild the reference model.
    """
    import pandapower as pp

    net = normalise(net)
    graph, slack, reached = _energised(net)
    _check_topology(net, graph, slack, reached)
    source = pp.to_json(net) if keep_source else ""
    _base_load_flow(net)

    buses = sorted(int(b) for b in reached)
    number = {b: b + number_offset for b in buses}
    vn = {b: float(net.bus.vn_kv.at[b]) for b in buses}
    sn_mva = float(net.sn_mva)
    one_level = len(set(vn.values())) == 1
    out_buses = [b for b in buses if b != slack]

    p, q, gen_p, gen_q, extra = {}, {}, {}, {}, {}
    # class -> table -> bus -> [P, Q] of that class's elements (consumption for loads, production for sgens)
    by_class: dict[str, dict[str, dict[int, list[float]]]] = {}
    for table, sign in (("load", 1.0), ("sgen", -1.0)):
        elements = _in_service(net[table])
        columns = elements[["bus", "p_mw", "q_mvar", "scaling"]].itertuples(index=False)
        for (bus, p_mw, q_mvar, scaling), label in zip(columns, _class_labels(elements)):
            if int(bus) == slack:
                log.info("%s at the slack bus %d left out of the features (it changes no voltage)", table, slack)
                continue
            p[int(bus)] = p.get(int(bus), 0.0) + sign * p_mw * scaling
            q[int(bus)] = q.get(int(bus), 0.0) + sign * q_mvar * scaling
            if table == "sgen":
                gen_p[int(bus)] = gen_p.get(int(bus), 0.0) + p_mw * scaling
                gen_q[int(bus)] = gen_q.get(int(bus), 0.0) + q_mvar * scaling
            if label is not None:
                at = by_class.setdefault(label, {}).setdefault(table, {}).setdefault(int(bus), [0.0, 0.0])
                at[0] += p_mw * scaling
                at[1] += q_mvar * scaling
    load_buses = [b for b in out_buses if b in p]
    if gen_p:
        extra["base_gen_p_mw"] = _frozen([gen_p.get(bus, 0.0) for bus in load_buses])
        extra["base_gen_q_mvar"] = _frozen([gen_q.get(bus, 0.0) for bus in load_buses])
    extra.update(_class_arrays(by_class, load_buses))

    lines = _closed(net, "line")
    lines = lines[lines.from_bus.isin(reached) & lines.to_bus.isin(reached)]
    ties = net.line[~net.line.in_service.astype(bool) | net.line.index.isin(list(_open_ends(net, "line")))]
    ties = ties[ties.from_bus.isin(reached) & ties.to_bus.isin(reached)]
    from_bus, to_bus, r_ohm, x_ohm, g, b = _line_branches(lines, vn, sn_mva, float(net.f_hz))
    tie_g, tie_b = _charging(ties, vn, sn_mva, float(net.f_hz))
    if np.any(g) or np.any(b) or np.any(tie_g) or np.any(tie_b):
        extra.update(line_g_pu=_frozen(g), line_b_pu=_frozen(b), tie_g_pu=_frozen(tie_g), tie_b_pu=_frozen(tie_b))
    trafos = _closed(net, "trafo")
    extra.update(_trafo_branches(net, trafos[trafos.hv_bus.isin(reached) & trafos.lv_bus.isin(reached)], number))
    # branches hanging from an open switch: a tie's charging counts only while the tie is open
    fixed, tie_ends = [], np.zeros((len(ties), 2), dtype=np.complex128)
    tie_row = {idx: i for i, idx in enumerate(ties.index)}
    for idx, bus, y in _hanging(net, "line", reached):
        if idx in tie_row:
            tie_ends[tie_row[idx], 0 if bus == int(ties.at[idx, "from_bus"]) else 1] += y
        else:
            fixed.append((bus, y))
    fixed += [(bus, y) for _, bus, y in _hanging(net, "trafo", reached)]
    if np.any(tie_ends):
        extra.update(
            tie_from_y_pu=_frozen(tie_ends[:, 0], np.complex128), tie_to_y_pu=_frozen(tie_ends[:, 1], np.complex128)
        )
    extra.update(_bus_shunts(net, buses, number, fixed))
    if not one_level:
        extra["bus_vn_kv"] = _frozen([vn[bus] for bus in buses])
    if number_offset != 1 or buses != list(range(len(buses))):
        extra["pandapower_index"] = tuple(buses)
    tie_length = ties.length_km / ties.parallel
    names = ["" if n is None or (isinstance(n, float) and math.isnan(n)) else str(n) for n in net.bus.name.loc[buses]]
    ext_grid = _in_service(net.ext_grid)
    result = Network(
        name=name or "pending",
        vn_kv=vn[slack] if not one_level else vn[buses[0]],
        sn_mva=sn_mva,
        slack_bus=number[slack],
        slack_vm_pu=float(ext_grid.vm_pu.iloc[0]),
        slack_va_degree=float(ext_grid.va_degree.iloc[0]),
        bus_numbers=tuple(number[bus] for bus in buses),
        load_buses=tuple(number[bus] for bus in load_buses),
        base_p_mw=_frozen([p[bus] for bus in load_buses]),
        base_q_mvar=_frozen([q[bus] for bus in load_buses]),
        from_bus=_frozen([number[int(b)] for b in from_bus], np.int64),
        to_bus=_frozen([number[int(b)] for b in to_bus], np.int64),
        r_ohm=_frozen(r_ohm),
        x_ohm=_frozen(x_ohm),
        tie_from_bus=_frozen([number[int(b)] for b in ties.from_bus], np.int64),
        tie_to_bus=_frozen([number[int(b)] for b in ties.to_bus], np.int64),
        tie_r_ohm=_frozen(ties.r_ohm_per_km * tie_length),
        tie_x_ohm=_frozen(ties.x_ohm_per_km * tie_length),
        output_buses=tuple(number[bus] for bus in out_buses),
        bus_names=tuple(names),
        bus_xy=_frozen(_geodata(net, buses)),
        source_json=source,
        title=_title(net),
        **extra,
    )
    _self_check(result, net, out_buses)
    if name is None:
        result = dataclasses.replace(result, name=network_id(result))
    return result


def _class_labels(elements) -> list[str | None]:
    """Each element's customer class: its `profile` (SimBench's H0-A, PV5, ...), else its `type` unless that is
    pandapower's connection type (wye, delta), else None (no class)."""
    labels: list[str | None] = []
    for i in range(len(elements)):
        label = None
        for column in ("profile", "type"):
            value = elements[column].iloc[i] if column in elements else None
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            text = str(value).strip()
            if text and not (column == "type" and text.lower() in _CONNECTION_TYPES):
                label = text
                break
        labels.append(label)
    return labels


def _class_arrays(by_class: dict[str, dict[str, dict[int, list[float]]]], load_buses: list[int]) -> dict:
    """The Network's class fields: names in sorted order, (n_classes, 2 n_load) consumption and generation."""
    if not by_class:
        return {}
    names = sorted(by_class)
    arrays = {}
    for table, key in (("load", "class_consumption"), ("sgen", "class_generation")):
        rows = []
        for name in names:
            at = by_class[name].get(table, {})
            rows.append([at.get(b, (0.0, 0.0))[0] for b in load_buses] + [at.get(b, (0.0, 0.0))[1] for b in load_buses])
        arrays[key] = _frozen(np.array(rows, dtype=np.float64).reshape(len(names), 2 * len(load_buses)))
    return {"class_names": tuple(names), **arrays}


def normal_title(text: str) -> str:
    """A network's title as kept: runs of whitespace one space, no leading or trailing."""
    return " ".join(text.split())


def _title(net) -> str:
    """The net's own name (pandapower's `net.name`), normalised and cut to MAX_TITLE; "" when it has none."""
    name = getattr(net, "name", None)
    return "" if not isinstance(name, str) else normal_title(name)[:MAX_TITLE]


def _self_check(network: Network, net, out_buses) -> None:
    """The snapshot's batched solution at base load must reproduce pandapower's (anything missed shows here)."""
    from gridsim.batched import solve_batched

    z, w = network.zbus()
    v, ok, _ = solve_batched(z, w, network.loads_to_pu(network.base_x[None, :]), workers=1)
    if not bool(ok.all()):
        raise NetworkError(
            "load",
            "the batched solver does not converge at the net's base load",
            "a case whose base load has a power-flow solution",
        )
    gap = float(np.abs(v[0].abs().numpy() - net.res_bus.vm_pu.loc[out_buses].to_numpy()).max())
    if not gap <= SELF_CHECK_PU:
        raise NetworkError(
            "net",
            f"the snapshot's base-load voltages differ from pandapower's by {gap:.2e} p.u. "
            "(an element this snapshot does not model)",
            f"<= {SELF_CHECK_PU} p.u.",
        )


@functools.cache
def built_in_twins() -> dict[str, tuple[str, int, str]]:
    """Built-ins numbered other than by pandapower index, known by the content id their own pandapower net
    gets when uploaded (numbered by index) -> (name, number offset, their content id as built in). An upload
    that is one of them, unchanged, is numbered as the built-in is. Computed from the installed pandapower
    (its case33bw's numbers move between releases, so no id is pinned)."""
    from gridsim.network import _BUILDERS, _pandapower_net_cached
    from gridsim.network import network as built_in

    twins = {}
    for name, (_, offset) in _BUILDERS.items():
        if offset:
            by_index = twin_key(snapshot(_pandapower_net_cached(name), name=name))
            twins[by_index] = (name, offset, twin_key(built_in(name)))
    return twins


def twin_key(network: Network) -> str:
    """The content id without the buses' coordinates: a net written by one pandapower release and read back
    keeps every modelled number, but older releases' geodata tables are not read (pandapower 2.x)."""
    return network_id(dataclasses.replace(network, bus_xy=np.zeros((0, 2))))


# fields added after the first content ids were given out: left out of the id while empty, so a network
# without them keeps its id
_ID_WHEN_SET = (
    "tie_from_y_pu",
    "tie_to_y_pu",
    "base_gen_p_mw",
    "base_gen_q_mvar",
    "class_names",
    "class_consumption",
    "class_generation",
)


def network_id(network: Network) -> str:
    """sha256 of the canonical form: every modelled number, bus names and coordinates (not the name)."""
    canon = {}
    for f in dataclasses.fields(network):
        if f.name in ("name", "source_json", "title"):
            continue
        value = getattr(network, f.name)
        if f.name in _ID_WHEN_SET and not len(value):
            continue
        if isinstance(value, np.ndarray):
            value = np.stack([value.real, value.imag], -1).tolist() if np.iscomplexobj(value) else value.tolist()
        elif isinstance(value, tuple):
            value = list(value)
        canon[f.name] = value
    text = json.dumps(canon, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(b"gridpfn-network-v1" + text.encode()).hexdigest()


def from_pandapower_json(text: str | bytes, name: str | None = None, number_offset: int | None = None) -> Network:
    """A user network from `pandapower.to_json(net)` output, read as data (`gridsim.pandapower_json`: no
    object decoder, an allow-list of tables and columns) and validated (see `snapshot`). Buses are numbered
    by pandapower index, or as a built-in numbers them when the net is that built-in unchanged (`numbering`);
    with `number_offset`, pandapower index + it: an upload's stored JSON rebuilt as the upload was numbered
    (a MATPOWER case's is `MATPOWER_OFFSET`: `number_offset(network)` gives any network's)."""
    from gridsim.pandapower_json import read_pandapower_json

    net = read_pandapower_json(text)
    if number_offset is not None:
        return snapshot(net, name=name, number_offset=number_offset)
    network = snapshot(net, name=name)
    twin = built_in_twins().get(twin_key(network))
    if twin is not None:  # a built-in's own net: its bus numbers, so the built-in's column names fit it
        network = snapshot(net, name=name, number_offset=twin[1])
    return network


def number_offset(network: Network) -> int:
    """What is added to a bus's pandapower index to give its number (0: numbered by index; a MATPOWER case's and
    ieee33's: 1). Rebuilding the network's `source_json` with it (`from_pandapower_json`) numbers it the same."""
    first = network.bus_numbers[0]
    return int(first - network.pandapower_bus(first))


def numbering(network: Network, uploaded: bool = False) -> str:
    """How the network's buses are numbered, in words (GET /v1/networks/{id}); for an `uploaded` pandapower
    net numbered by index, why it does not take a built-in's numbering."""
    offset = number_offset(network)
    key = twin_key(network)
    twin = next((t for t in built_in_twins().values() if t[2] == key), None)
    if twin is not None and offset == twin[1]:
        return f"as the built-in {twin[0]}: pandapower bus index + {offset} (the slack is bus {network.slack_bus})"
    if offset != 0:
        return f"pandapower bus index + {offset} (a MATPOWER case: its own bus numbers, column 1 of mpc.bus)"
    text = f"pandapower bus index (the slack is bus {network.slack_bus})"
    if uploaded:
        text += (
            "; an upload is numbered as a built-in only when it is that built-in unchanged (pandapower's "
            "case33bw: as ieee33, from 1), and this one is not"
        )
    return text


# a MATPOWER case's buses keep its own numbers (column 1 of mpc.bus): pandapower indexes them from 0 (gridsim.matpower)
MATPOWER_OFFSET = 1


def from_matpower(data: str | bytes, name: str | None = None, f_hz: float = 50.0) -> Network:
    """A user network from a MATPOWER case (version 2): `.m` text or `.mat` bytes, read by `gridsim.matpower`
    and converted by pandapower.converter.from_ppc. Buses keep the case's own numbers (pandapower index +
    `MATPOWER_OFFSET`); its stored JSON rebuilds so numbered with `from_pandapower_json(..., number_offset=1)`."""
    from pandapower.converter.pypower import from_ppc

    from gridsim.matpower import check_lines, parse_m, parse_mat, to_ppc

    raw = data.encode() if isinstance(data, str) else bytes(data)
    ppc = to_ppc(parse_mat(raw) if raw.startswith(b"MATLAB") else parse_m(raw))
    try:
        net = from_ppc(ppc, f_hz=f_hz, validate_conversion=False)
    except MemoryError:
        raise  # the reader's memory cap, not a fault of the case: the upload sandbox answers it (413)
    except Exception as exc:  # the converter raises many kinds on inconsistent cases; the log has which
        log.warning("pandapower.converter.from_ppc refused a case: %r", exc)
        raise NetworkError(
            "body",
            "not a convertible MATPOWER case",
            "a MATPOWER case file (version 2) whose branches and generators name its buses",
        ) from exc
    check_lines(net, ppc)
    return snapshot(net, name=name, number_offset=MATPOWER_OFFSET)


def tree_layout(network: Network) -> np.ndarray:
    """(n_bus, 2) picture coordinates of the operated tree: x = depth (branches from the slack),
    y = lateral position (leaves one apart in depth-first order, a parent centred on its children)."""
    links: dict[int, list[int]] = {b: [] for b in network.bus_numbers}
    ends = list(zip(network.from_bus.tolist(), network.to_bus.tolist()))
    ends += list(zip(network.trafo_hv_bus.tolist(), network.trafo_lv_bus.tolist()))
    for a, b in ends:
        links[a].append(b)
        links[b].append(a)
    depth, parent, order = {network.slack_bus: 0}, {network.slack_bus: None}, []
    todo = [network.slack_bus]
    while todo:  # depth-first, children in bus order
        bus = todo.pop()
        order.append(bus)
        for nxt in sorted(links[bus], reverse=True):
            if nxt not in depth:
                depth[nxt], parent[nxt] = depth[bus] + 1, bus
                todo.append(nxt)
    y: dict[int, float] = {}
    children: dict[int, list[int]] = {b: [] for b in order}
    for bus in order[1:]:
        children[parent[bus]].append(bus)
    leaf = 0
    for bus in order:  # leaves in depth-first order
        if not children[bus]:
            y[bus], leaf = float(leaf), leaf + 1
    for bus in reversed(order):  # parents after their children
        if children[bus]:
            y[bus] = (y[children[bus][0]] + y[children[bus][-1]]) / 2
    return np.array([[float(depth.get(b, 0)), y.get(b, 0.0)] for b in network.bus_numbers])


def describe(network: Network) -> dict:
    """JSON-ready description: buses (number, name, kV, picture coordinates), loads, lines, transformers,
    feature and output names, and where the coordinates came from (`geodata` or a computed `tree`)."""
    geo = len(network.bus_xy) == len(network.bus_numbers)
    xy = network.bus_xy if geo else tree_layout(network)
    vn = network.bus_vn_kv if len(network.bus_vn_kv) else np.full(len(network.bus_numbers), network.vn_kv)
    names = network.bus_names or ("",) * len(network.bus_numbers)
    lines = [
        {"from_bus": int(a), "to_bus": int(b), "r_ohm": float(r), "x_ohm": float(x), "closed": closed}
        for fb, tb, rr, xx, closed in (
            (network.from_bus, network.to_bus, network.r_ohm, network.x_ohm, True),
            (network.tie_from_bus, network.tie_to_bus, network.tie_r_ohm, network.tie_x_ohm, False),
        )
        for a, b, r, x in zip(fb, tb, rr, xx)
    ]
    return {
        "name": network.name,
        "title": network.title,
        "slack_bus": network.slack_bus,
        "sn_mva": network.sn_mva,
        "n_buses": len(network.bus_numbers),
        "buses": [
            {"bus": int(b), "name": n, "vn_kv": float(v), "x": float(p[0]), "y": float(p[1])}
            for b, n, v, p in zip(network.bus_numbers, names, vn, xy)
        ],
        "loads": [
            {"bus": int(b), "p_mw": float(p), "q_mvar": float(q)}
            for b, p, q in zip(network.load_buses, network.base_p_mw, network.base_q_mvar)
        ],
        "lines": lines,
        "transformers": [
            {
                "hv_bus": int(a),
                "lv_bus": int(b),
                "r_pu": float(r),
                "x_pu": float(x),
                "ratio": float(t),
                "shift_degree": float(s),
            }
            for a, b, r, x, t, s in zip(
                network.trafo_hv_bus,
                network.trafo_lv_bus,
                network.trafo_r_pu,
                network.trafo_x_pu,
                network.trafo_ratio,
                network.trafo_shift_degree,
            )
        ],
        "features": list(network.feature_names),
        "outputs": list(network.output_names),
        "layout": "geodata" if geo else "tree",
        "numbering": numbering(network),
        "classes": _class_entries(network),
    }


def _class_entries(network: Network) -> list[dict]:
    """Per customer class: its name, the load buses where it consumes or produces, and its base P."""
    n = network.n_load
    entries = []
    for name, consumption, generation in zip(network.class_names, network.class_consumption, network.class_generation):
        present = (consumption.reshape(2, n) != 0).any(axis=0) | (generation.reshape(2, n) != 0).any(axis=0)
        entries.append(
            {
                "name": name,
                "load_buses": [int(network.load_buses[i]) for i in np.flatnonzero(present)],
                "consumption_p_mw": float(consumption[:n].sum()),
                "generation_p_mw": float(generation[:n].sum()),
            }
        )
    return entries
