"""Feeder descriptions: bus numbering, base loads, line data and the reduced Z-bus.

A `Network` is a frozen, pandapower-free snapshot of a feeder, so the batched solver and the
priors can use it without touching pandapower; `pandapower_net(name)` gives the reference
model the snapshot was built from.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

__all__ = ["Network", "network", "pandapower_net", "KNOWN_NETWORKS"]


def _case33bw():
    import pandapower.networks as pn

    return pn.case33bw()


# name -> pandapower constructor; other radial feeders can be added behind the same interface.
_BUILDERS: dict[str, Callable] = {"ieee33": _case33bw}
KNOWN_NETWORKS: tuple[str, ...] = tuple(_BUILDERS)


def _frozen(array, dtype=np.float64) -> np.ndarray:
    out = np.array(array, dtype=dtype)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Network:
    """A radial distribution feeder with IEEE bus numbers (bus 1 = slack)."""

    name: str
    vn_kv: float
    sn_mva: float
    slack_bus: int
    slack_vm_pu: float
    slack_va_degree: float
    bus_numbers: tuple[int, ...]  # all buses, IEEE numbering 1..n_bus
    load_buses: tuple[int, ...]  # the non-slack buses, in feature order
    base_p_mw: np.ndarray  # (n_load,)
    base_q_mvar: np.ndarray  # (n_load,)
    from_bus: np.ndarray  # (n_lines,) int IEEE numbers, in-service lines only
    to_bus: np.ndarray  # (n_lines,) int
    r_ohm: np.ndarray
    x_ohm: np.ndarray
    # normally-open tie lines (IEEE numbers and impedances), for reconfigured (switched) feeders
    tie_from_bus: np.ndarray = field(default_factory=lambda: _frozen([], np.int64))
    tie_to_bus: np.ndarray = field(default_factory=lambda: _frozen([], np.int64))
    tie_r_ohm: np.ndarray = field(default_factory=lambda: _frozen([]))
    tie_x_ohm: np.ndarray = field(default_factory=lambda: _frozen([]))

    @property
    def n_lines(self) -> int:
        return len(self.r_ohm)

    @property
    def n_load(self) -> int:
        return len(self.load_buses)

    @property
    def n_features(self) -> int:
        return 2 * self.n_load

    @property
    def z_base_ohm(self) -> float:
        return self.vn_kv**2 / self.sn_mva

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(f"p_mw_bus{b}" for b in self.load_buses) + tuple(f"q_mvar_bus{b}" for b in self.load_buses)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f"vm_pu_bus{b}" for b in self.load_buses)

    @property
    def angle_names(self) -> tuple[str, ...]:
        return tuple(f"va_degree_bus{b}" for b in self.load_buses)

    @property
    def base_x(self) -> np.ndarray:
        """Base load vector in feature order (P then Q)."""
        return np.concatenate([self.base_p_mw, self.base_q_mvar])

    def zbus(self, line_scale=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reduced impedance matrix z (p.u.) of the non-slack buses and no-load voltages w.

        With the slack fixed, V = w + z @ I for bus current injections I, which is what the
        batched solver iterates. `line_scale` (..., n_lines) multiplies each line's impedance and
        gives batched (..., n, n) matrices (for priors over feeder parameters).
        """
        z_line = torch.as_tensor((self.r_ohm + 1j * self.x_ohm) / self.z_base_ohm, dtype=torch.complex128)
        return self._reduced(self.from_bus, self.to_bus, 1.0 / (z_line * self._scale(line_scale, self.n_lines)))

    def zbus_switched(self, closed, line_scale=None) -> tuple[torch.Tensor, torch.Tensor]:
        """`zbus` of reconfigured feeders: `closed` (..., n_lines + n_ties) says which of the lines
        and then the tie lines conduct (see `radial_configurations`); `line_scale` covers both."""
        closed = torch.as_tensor(closed, dtype=torch.bool)
        n_all = self.n_lines + len(self.tie_r_ohm)
        if closed.ndim == 0 or closed.shape[-1] != n_all:
            raise ValueError(f"closed: expected shape (..., {n_all}), got {tuple(closed.shape)}")
        r = np.concatenate([self.r_ohm, self.tie_r_ohm])
        x = np.concatenate([self.x_ohm, self.tie_x_ohm])
        z_line = torch.as_tensor((r + 1j * x) / self.z_base_ohm, dtype=torch.complex128) * self._scale(line_scale, n_all)
        y_line = torch.where(closed, 1.0 / z_line, torch.zeros((), dtype=torch.complex128))
        return self._reduced(np.concatenate([self.from_bus, self.tie_from_bus]),
                             np.concatenate([self.to_bus, self.tie_to_bus]), y_line)

    def radial_configurations(self, batch: int, exchanges: int, rng: np.random.Generator) -> np.ndarray:
        """(batch, n_lines + n_ties) closed masks of radial feeders, each `exchanges` branch exchanges
        away from the normal one: close an open tie, open a random line of the loop it makes."""
        n_all = self.n_lines + len(self.tie_r_ohm)
        ends = list(zip(np.concatenate([self.from_bus, self.tie_from_bus]).tolist(),
                        np.concatenate([self.to_bus, self.tie_to_bus]).tolist()))
        out = np.zeros((batch, n_all), dtype=bool)
        for b in range(batch):
            closed = np.arange(n_all) < self.n_lines
            for _ in range(exchanges):
                open_lines = np.flatnonzero(~closed)
                if open_lines.size == 0:
                    break
                tie = int(rng.choice(open_lines))
                loop = _tree_path(ends, closed, *ends[tie])
                closed[tie] = True
                closed[int(rng.choice(loop))] = False
            out[b] = closed
        return out

    @staticmethod
    def _scale(line_scale, n: int) -> torch.Tensor:
        if line_scale is None:
            return torch.ones((), dtype=torch.complex128)
        scale = torch.as_tensor(line_scale, dtype=torch.float64)
        if scale.ndim == 0 or scale.shape[-1] != n:
            raise ValueError(f"line_scale: expected shape (..., {n}), got {tuple(scale.shape)}")
        if not bool(torch.isfinite(scale).all()) or bool((scale <= 0).any()):
            raise ValueError("line_scale: expected finite values > 0")
        return scale.to(torch.complex128)

    def _reduced(self, from_bus, to_bus, y_line: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reduced Z-bus and no-load voltages from line ends and (..., lines) series admittances."""
        index = {bus: i for i, bus in enumerate(self.bus_numbers)}
        n_bus, n_lines = len(self.bus_numbers), len(from_bus)
        incidence = torch.zeros(n_lines, n_bus, dtype=torch.complex128)
        rows = torch.arange(n_lines)
        incidence[rows, [index[int(b)] for b in from_bus]] = 1.0
        incidence[rows, [index[int(b)] for b in to_bus]] = -1.0
        ybus = incidence.T @ (y_line.unsqueeze(-1) * incidence)  # (..., n_bus, n_bus)
        slack = index[self.slack_bus]
        keep = [index[b] for b in self.load_buses]
        y_red = ybus[..., keep, :][..., :, keep]
        y_slack = ybus[..., keep, slack]
        z = torch.linalg.inv(y_red)
        v_slack = self.slack_vm_pu * np.exp(1j * np.deg2rad(self.slack_va_degree))
        w = -(z @ y_slack.unsqueeze(-1)).squeeze(-1) * v_slack
        return z, w

    def loads_to_pu(self, x) -> torch.Tensor:
        """(..., 2*n_load) MW/MVAr load vectors -> complex per-unit load power (..., n_load)."""
        t = torch.as_tensor(x)
        if t.ndim == 0 or t.shape[-1] != self.n_features:
            raise ValueError(f"x: expected shape (..., {self.n_features}) [P then Q in MW/MVAr], got {tuple(t.shape)}")
        t = t.to(torch.float64)
        n = self.n_load
        return torch.complex(t[..., :n], t[..., n:]) / self.sn_mva


def _tree_path(ends: list[tuple[int, int]], closed: np.ndarray, start: int, goal: int) -> list[int]:
    """Indices of the closed lines on the path from bus `start` to bus `goal` (a radial feeder)."""
    links: dict[int, list[tuple[int, int]]] = {}
    for i in np.flatnonzero(closed):
        a, b = ends[i]
        links.setdefault(a, []).append((b, int(i)))
        links.setdefault(b, []).append((a, int(i)))
    via: dict[int, tuple[int, int] | None] = {start: None}
    todo = [start]
    while todo:
        bus = todo.pop()
        for nxt, line in links.get(bus, ()):
            if nxt not in via:
                via[nxt] = (bus, line)
                todo.append(nxt)
    if goal not in via:
        raise ValueError(f"buses {start} and {goal} are not connected")
    path, bus = [], goal
    while via[bus] is not None:
        bus, line = via[bus]
        path.append(line)
    return path


@functools.lru_cache(maxsize=None)
def _pandapower_net_cached(name: str):
    return _BUILDERS[name]()


def _check_name(name) -> str:
    if name not in _BUILDERS:
        raise ValueError(f"network: expected one of {list(KNOWN_NETWORKS)}, got {name!r}")
    return name


def pandapower_net(name: str = "ieee33"):
    """A fresh (deep-copied) pandapower model of the named feeder."""
    return copy.deepcopy(_pandapower_net_cached(_check_name(name)))


@functools.lru_cache(maxsize=None)
def _build(name: str) -> Network:
    net = _pandapower_net_cached(name)
    if not (net.trafo.empty and net.gen.empty and net.sgen.empty and net.shunt.empty and net.switch.empty):
        raise ValueError(f"network: {name!r} has elements other than lines and loads, not supported yet")
    if len(net.ext_grid) != 1 or len(set(net.bus.vn_kv)) != 1:
        raise ValueError(f"network: {name!r} must have one slack and one voltage level")
    ieee = {int(idx): i + 1 for i, idx in enumerate(net.bus.index)}  # pandapower index -> IEEE number
    lines = net.line[net.line.in_service]
    ties = net.line[~net.line.in_service]
    tie_length = ties.length_km / ties.parallel
    if ((net.line.c_nf_per_km != 0) | (net.line.g_us_per_km != 0)).any():
        raise ValueError(f"network: {name!r} has line shunt admittances, not supported yet")
    length = lines.length_km / lines.parallel
    slack_bus = ieee[int(net.ext_grid.bus.iloc[0])]
    load_buses = tuple(b for b in ieee.values() if b != slack_bus)
    p = np.zeros(len(load_buses))
    q = np.zeros(len(load_buses))
    pos = {b: i for i, b in enumerate(load_buses)}
    loads = net.load[net.load.in_service]
    for bus, p_mw, q_mvar, scaling in zip(loads.bus, loads.p_mw, loads.q_mvar, loads.scaling):
        p[pos[ieee[int(bus)]]] += p_mw * scaling
        q[pos[ieee[int(bus)]]] += q_mvar * scaling
    return Network(
        name=name,
        vn_kv=float(net.bus.vn_kv.iloc[0]),
        sn_mva=float(net.sn_mva),
        slack_bus=slack_bus,
        slack_vm_pu=float(net.ext_grid.vm_pu.iloc[0]),
        slack_va_degree=float(net.ext_grid.va_degree.iloc[0]),
        bus_numbers=tuple(ieee.values()),
        load_buses=load_buses,
        base_p_mw=_frozen(p),
        base_q_mvar=_frozen(q),
        from_bus=_frozen([ieee[int(b)] for b in lines.from_bus], np.int64),
        to_bus=_frozen([ieee[int(b)] for b in lines.to_bus], np.int64),
        r_ohm=_frozen(lines.r_ohm_per_km * length),
        x_ohm=_frozen(lines.x_ohm_per_km * length),
        tie_from_bus=_frozen([ieee[int(b)] for b in ties.from_bus], np.int64),
        tie_to_bus=_frozen([ieee[int(b)] for b in ties.to_bus], np.int64),
        tie_r_ohm=_frozen(ties.r_ohm_per_km * tie_length),
        tie_x_ohm=_frozen(ties.x_ohm_per_km * tie_length),
    )


def network(name: str = "ieee33") -> Network:
    """The named feeder (cached). Known: 'ieee33' (pandapower case33bw)."""
    return _build(_check_name(name))
