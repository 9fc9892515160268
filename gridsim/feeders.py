"""Any radial pandapower net as a `Network` snapshot: validation, loaders, content id, layout.

`snapshot(net)` turns a radial (or radially operated) distribution network into the frozen
`Network` the batched solver uses, after checking it (each failure a `NetworkError` naming the
net's table and the problem). What it models, exactly as pandapower's power flow does:

- one slack (the in-service `ext_grid`); buses numbered by their pandapower index;
- lines: series impedance and charging (`c_nf_per_km`, `g_us_per_km`, half at each end);
  out-of-service lines whose two ends are energised are the tie lines (`tie_*`) that
  reconfigurations may close;
- two-winding transformers as pandapower converts them for its own power flow (its branch
  table: series impedance, magnetising branch, off-nominal ratio at the set tap position,
  phase shift); tap *controllers* are not run, the tap stays where the net has it;
- bus shunts (`shunt`), loads (several on one bus are summed, `scaling` applied) and static
  generators (`sgen`, negative load), all constant power; loads at the slack bus change no
  voltage and are left out of the features;
- switches: an open line or transformer switch takes that branch out of service (the charging
  of a line hanging from an open switch is dropped with it), a closed bus-bus switch fuses its
  two buses (the lower index stays), an open one connects nothing;
- buses that no closed path joins to the slack are left out when they carry no load.

Refused, with the reason: no slack or several, PV generators (`gen`) and other elements the
constant-power solver cannot represent (three-winding transformers, impedances, wards, DC
lines, storage, voltage-dependent loads), an element on a missing bus, a closed loop, a
disconnected bus with load, zero-impedance lines, more than `MAX_BUSES` buses, and a base
load whose power flow does not converge.

Features are P then Q of every bus with a load or sgen (`p_mw_bus<k>`, `q_mvar_bus<k>`),
outputs the voltage magnitude of every non-slack bus (`vm_pu_bus<k>`), k the bus number.
"""

from __future__ import annotations

import copy
import dataclasses
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
    "network_id",
    "describe",
    "tree_layout",
]

log = logging.getLogger(__name__)

MAX_BUSES = 500
# agreement of the snapshot's batched solution with pandapower at base load, checked on every snapshot
SELF_CHECK_PU = 1e-6
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
    loads = _in_service(net.load)
    shares = [c for c in loads.columns if c.startswith("const_") and c.endswith("percent")]
    voltage_dependent = loads[(loads[shares].fillna(0) != 0).any(axis=1)] if shares else loads.iloc[0:0]
    if len(voltage_dependent):
        raise NetworkError(
            "load",
            f"load {voltage_dependent.index[0]} is voltage-dependent (constant-impedance/current share)",
            f"{shares} all 0 (constant power)",
        )


def _apply_switches(net) -> None:
    """Switch states into branch states and fused buses; the switch table is emptied."""
    import pandapower as pp

    sw = net.switch
    for _, row in sw[(sw.et == "l") & ~sw.closed.astype(bool)].iterrows():
        if row.element in net.line.index:
            net.line.loc[row.element, "in_service"] = False
    for _, row in sw[(sw.et == "t") & ~sw.closed.astype(bool)].iterrows():
        if row.element in net.trafo.index:
            net.trafo.loc[row.element, "in_service"] = False
    while True:
        sw = net.switch
        closed = sw[(sw.et == "b") & sw.closed.astype(bool) & (sw.bus != sw.element)]
        if closed.empty:
            break
        a, b = int(closed.bus.iloc[0]), int(closed.element.iloc[0])
        pp.toolbox.fuse_buses(net, min(a, b), max(a, b))
    net.switch = net.switch.iloc[0:0]


def _energised(net):
    """(networkx MultiGraph of the closed branches among in-service buses, slack bus, reached buses)."""
    import networkx as nx

    live = set(net.bus.index[net.bus.in_service.astype(bool)].tolist())
    graph = nx.MultiGraph()
    graph.add_nodes_from(live)
    for table, a, b in (("line", "from_bus", "to_bus"), ("trafo", "hv_bus", "lv_bus")):
        for idx, row in _in_service(net[table]).iterrows():
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
    if sub.number_of_edges() != sub.number_of_nodes() - 1:
        cycle = nx.find_cycle(sub, source=slack)
        buses = [int(edge[0]) for edge in cycle]
        branches = [f"{edge[2][0]} {edge[2][1]}" for edge in cycle]
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
    except Exception as exc:  # pandapower's own checks (missing columns, bad values)
        raise NetworkError(
            "net",
            f"pandapower cannot run a power flow on it: {type(exc).__name__}: {exc}",
            "a net that pandapower.runpp accepts",
        ) from exc


def _trafo_branches(net, trafos, number):
    """MATPOWER branch rows of the in-service transformers from pandapower's own conversion."""
    if not len(trafos):
        return {}
    from pandapower.pypower import idx_brch
    from pandapower.pypower.idx_brch import BR_B, BR_R, BR_X, F_BUS, SHIFT, T_BUS, TAP

    start, _ = net._pd2ppc_lookups["branch"]["trafo"]
    ppc_bus = net._pd2ppc_lookups["bus"]
    branch = net._ppc["branch"][[start + net.trafo.index.get_loc(i) for i in trafos.index]]
    rows = branch.real
    # branch-table columns of pandapower 3 (older versions have no shunt conductance or asymmetry)
    optional = {
        name: getattr(idx_brch, name, None) for name in ("BR_G", "BR_R_ASYM", "BR_X_ASYM", "BR_G_ASYM", "BR_B_ASYM")
    }
    asym = [c for name, c in optional.items() if name.endswith("ASYM") and c is not None]
    if asym and np.abs(rows[:, asym]).max() > 0:
        raise NetworkError("trafo", "asymmetric transformer impedance is not supported", "a symmetric T or pi model")
    # shunt admittance as pandapower's makeYbus forms it: BR_G + j BR_B (pandapower 3), j BR_B with a
    # complex BR_B = b - j g (pandapower 2)
    y_sh = 1j * branch[:, BR_B] + (rows[:, optional["BR_G"]] if optional["BR_G"] is not None else 0.0)
    hv, lv = trafos.hv_bus.to_numpy(), trafos.lv_bus.to_numpy()
    if not (np.array_equal(rows[:, F_BUS], ppc_bus[hv]) and np.array_equal(rows[:, T_BUS], ppc_bus[lv])):
        raise NetworkError("trafo", "pandapower's branch table does not run from hv_bus to lv_bus", "hv_bus -> lv_bus")
    return dict(
        trafo_hv_bus=_frozen([number[int(b)] for b in hv], np.int64),
        trafo_lv_bus=_frozen([number[int(b)] for b in lv], np.int64),
        trafo_r_pu=_frozen(rows[:, BR_R]),
        trafo_x_pu=_frozen(rows[:, BR_X]),
        trafo_g_pu=_frozen(y_sh.real),
        trafo_b_pu=_frozen(y_sh.imag),
        trafo_ratio=_frozen(np.where(rows[:, TAP] != 0, rows[:, TAP], 1.0)),
        trafo_shift_degree=_frozen(rows[:, SHIFT]),
    )


def _bus_shunts(net, buses, number):
    from pandapower.pypower.idx_bus import BS, GS

    ppc_bus = net._pd2ppc_lookups["bus"]
    rows = net._ppc["bus"][ppc_bus[np.asarray(buses)]].real
    y = (rows[:, GS] + 1j * rows[:, BS]) / net.sn_mva
    keep = np.flatnonzero(y != 0)
    return dict(
        shunt_bus=_frozen([number[int(buses[i])] for i in keep], np.int64), shunt_y_pu=_frozen(y[keep], np.complex128)
    )


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
    """A checked copy of the net with its switch states applied (the net the snapshot describes)."""
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

    p, q = {}, {}
    for table, sign in (("load", 1.0), ("sgen", -1.0)):
        for bus, p_mw, q_mvar, scaling in _in_service(net[table])[["bus", "p_mw", "q_mvar", "scaling"]].itertuples(
            index=False
        ):
            if int(bus) == slack:
                log.info("%s at the slack bus %d left out of the features (it changes no voltage)", table, slack)
                continue
            p[int(bus)] = p.get(int(bus), 0.0) + sign * p_mw * scaling
            q[int(bus)] = q.get(int(bus), 0.0) + sign * q_mvar * scaling
    load_buses = [b for b in out_buses if b in p]

    lines = _in_service(net.line)
    lines = lines[lines.from_bus.isin(reached) & lines.to_bus.isin(reached)]
    ties = net.line[~net.line.in_service.astype(bool)]
    ties = ties[ties.from_bus.isin(reached) & ties.to_bus.isin(reached)]
    extra = {}
    g, b = _charging(lines, vn, sn_mva, float(net.f_hz))
    tie_g, tie_b = _charging(ties, vn, sn_mva, float(net.f_hz))
    if np.any(g) or np.any(b) or np.any(tie_g) or np.any(tie_b):
        extra.update(line_g_pu=_frozen(g), line_b_pu=_frozen(b), tie_g_pu=_frozen(tie_g), tie_b_pu=_frozen(tie_b))
    trafos = _in_service(net.trafo)
    extra.update(_trafo_branches(net, trafos[trafos.hv_bus.isin(reached) & trafos.lv_bus.isin(reached)], number))
    extra.update(_bus_shunts(net, buses, number))
    if not one_level:
        extra["bus_vn_kv"] = _frozen([vn[bus] for bus in buses])
    if number_offset != 1 or buses != list(range(len(buses))):
        extra["pandapower_index"] = tuple(buses)
    length, tie_length = lines.length_km / lines.parallel, ties.length_km / ties.parallel
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
        from_bus=_frozen([number[int(b)] for b in lines.from_bus], np.int64),
        to_bus=_frozen([number[int(b)] for b in lines.to_bus], np.int64),
        r_ohm=_frozen(lines.r_ohm_per_km * length),
        x_ohm=_frozen(lines.x_ohm_per_km * length),
        tie_from_bus=_frozen([number[int(b)] for b in ties.from_bus], np.int64),
        tie_to_bus=_frozen([number[int(b)] for b in ties.to_bus], np.int64),
        tie_r_ohm=_frozen(ties.r_ohm_per_km * tie_length),
        tie_x_ohm=_frozen(ties.x_ohm_per_km * tie_length),
        output_buses=tuple(number[bus] for bus in out_buses),
        bus_names=tuple(names),
        bus_xy=_frozen(_geodata(net, buses)),
        source_json=source,
        **extra,
    )
    _self_check(result, net, out_buses)
    if name is None:
        result = dataclasses.replace(result, name=network_id(result))
    return result


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


def network_id(network: Network) -> str:
    """sha256 of the canonical form: every modelled number, bus names and coordinates (not the name)."""
    canon = {}
    for f in dataclasses.fields(network):
        if f.name in ("name", "source_json"):
            continue
        value = getattr(network, f.name)
        if isinstance(value, np.ndarray):
            value = np.stack([value.real, value.imag], -1).tolist() if np.iscomplexobj(value) else value.tolist()
        elif isinstance(value, tuple):
            value = list(value)
        canon[f.name] = value
    text = json.dumps(canon, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(b"gridpfn-network-v1" + text.encode()).hexdigest()


def from_pandapower_json(text: str | bytes, name: str | None = None) -> Network:
    """A user network from `pandapower.to_json(net)` output, read as data (`gridsim.pandapower_json`: no
    object decoder, an allow-list of tables and columns) and validated (see `snapshot`)."""
    from gridsim.pandapower_json import read_pandapower_json

    return snapshot(read_pandapower_json(text), name=name)


def from_matpower(data: str | bytes, name: str | None = None, f_hz: float = 50.0) -> Network:
    """A user network from a MATPOWER case (version 2): `.m` text or `.mat` bytes, read by `gridsim.matpower`
    and converted by pandapower.converter.from_ppc. Buses are numbered 1..n in the case's row order
    (MATPOWER's own numbers for consecutively numbered cases)."""
    from pandapower.converter.pypower import from_ppc

    from gridsim.matpower import parse_m, parse_mat, to_ppc

    raw = data.encode() if isinstance(data, str) else bytes(data)
    ppc = to_ppc(parse_mat(raw) if raw.startswith(b"MATLAB") else parse_m(raw))
    try:
        net = from_ppc(ppc, f_hz=f_hz, validate_conversion=False)
    except Exception as exc:  # the converter raises many kinds on inconsistent cases
        raise NetworkError(
            "body",
            f"not a convertible MATPOWER case: {type(exc).__name__}: {str(exc)[:200]}",
            "a MATPOWER case file (version 2) whose branches and generators name its buses",
        ) from exc
    return snapshot(net, name=name, number_offset=1)


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
    }
