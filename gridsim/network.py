"""Feeder descriptions: bus numbering, base loads, line data and the reduced Z-bus.

A `Network` is a frozen, pandapower-free snapshot of a feeder, so the batched solver and the
priors can use it without touching pandapower; `pandapower_net(name)` gives the reference
model the snapshot was built from. `gridsim.feeders.snapshot` builds one from any radially
operated pandapower net (lines with charging, two-winding transformers, shunts, switches, sgens;
parallel branches merged into one); the built-in names are in `KNOWN_NETWORKS`.

Buses, features and outputs: the buses are numbered by the net's own pandapower index (IEEE
numbers 1..33 for 'ieee33'); features are P then Q of every bus carrying a load or sgen
(`load_buses`), outputs the voltage of every non-slack bus (`output_buses`). On IEEE 33 every
non-slack bus has a load, so the two coincide.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["Network", "network", "pandapower_net", "KNOWN_NETWORKS"]


def _case33bw():
    import pandapower.networks as pn

    return pn.case33bw()


def _kerber_landnetz_kabel_1():
    import pandapower.networks as pn

    return pn.create_kerber_landnetz_kabel_1()


def _mv_oberrhein_sub0():
    import pandapower.networks as pn

    return pn.mv_oberrhein(separation_by_sub=True)[0]


# name -> (pandapower constructor, bus numbering: pandapower index + offset)
_BUILDERS: dict[str, tuple[Callable, int]] = {
    "ieee33": (_case33bw, 1),  # IEEE numbers 1..33 (pandapower index + 1)
    # Kerber's rural LV cable network: 10/0.4 kV transformer (magnetising branch, 150 deg shift),
    # cables with charging capacitance, loads at every second bus (18 buses, 8 loads)
    "kerber_landnetz_kabel_1": (_kerber_landnetz_kabel_1, 0),
    # the real-world MV Oberrhein grid's first substation: 110/20 kV transformer at tap -2, the
    # feeders radially operated by line switches (one open), loads and PV (70 buses, geodata)
    "mv_oberrhein_sub0": (_mv_oberrhein_sub0, 0),
}
KNOWN_NETWORKS: tuple[str, ...] = tuple(_BUILDERS)


def _frozen(array, dtype=np.float64) -> np.ndarray:
    out = np.array(array, dtype=dtype)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Network:
    """A radial distribution feeder (IEEE 33: IEEE bus numbers, bus 1 = slack; others: pandapower
    bus indices). Build one for any pandapower net with `gridsim.feeders.snapshot`."""

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
    # --- general feeders; the defaults describe IEEE 33 (one voltage level, nothing but lines)
    output_buses: tuple[int, ...] = ()  # non-slack buses, output order; () = load_buses
    bus_vn_kv: np.ndarray = field(default_factory=lambda: _frozen([]))  # (n_bus,); empty = vn_kv
    line_g_pu: np.ndarray = field(default_factory=lambda: _frozen([]))  # total charging per line,
    line_b_pu: np.ndarray = field(default_factory=lambda: _frozen([]))  # half at each end; empty = 0
    tie_g_pu: np.ndarray = field(default_factory=lambda: _frozen([]))
    tie_b_pu: np.ndarray = field(default_factory=lambda: _frozen([]))
    # (n_ties,) complex admittance to ground (p.u.) at a tie's from/to bus while the tie is open: the
    # line hanging from that end behind an open switch, as pandapower models it; empty = none
    tie_from_y_pu: np.ndarray = field(default_factory=lambda: _frozen([], np.complex128))
    tie_to_y_pu: np.ndarray = field(default_factory=lambda: _frozen([], np.complex128))
    # two-winding transformers as MATPOWER branches (pandapower's own conversion: series
    # impedance, magnetising branch as pi shunt, off-nominal ratio with the tap position, shift)
    trafo_hv_bus: np.ndarray = field(default_factory=lambda: _frozen([], np.int64))
    trafo_lv_bus: np.ndarray = field(default_factory=lambda: _frozen([], np.int64))
    trafo_r_pu: np.ndarray = field(default_factory=lambda: _frozen([]))
    trafo_x_pu: np.ndarray = field(default_factory=lambda: _frozen([]))
    trafo_g_pu: np.ndarray = field(default_factory=lambda: _frozen([]))
    trafo_b_pu: np.ndarray = field(default_factory=lambda: _frozen([]))
    trafo_ratio: np.ndarray = field(default_factory=lambda: _frozen([]))
    trafo_shift_degree: np.ndarray = field(default_factory=lambda: _frozen([]))
    shunt_bus: np.ndarray = field(default_factory=lambda: _frozen([], np.int64))  # bus shunts
    shunt_y_pu: np.ndarray = field(default_factory=lambda: _frozen([], np.complex128))
    bus_names: tuple[str, ...] = ()  # the net's own bus names, bus order
    bus_xy: np.ndarray = field(default_factory=lambda: _frozen(np.zeros((0, 2))))  # geodata or empty
    pandapower_index: tuple[int, ...] = ()  # pandapower bus index per bus; () = number - 1
    source_json: str = field(default="", repr=False)  # pandapower JSON of a user network
    title: str = ""  # what the net calls itself (pandapower's net.name) or its uploader named it; not in the id
    # generation (sgens) per load bus, MW / MVAr produced; base_p_mw / base_q_mvar are consumption minus it.
    # Empty = no generation. Kept apart so a study scales consumption and generation separately.
    base_gen_p_mw: np.ndarray = field(default_factory=lambda: _frozen([]))
    base_gen_q_mvar: np.ndarray = field(default_factory=lambda: _frozen([]))
    # customer classes (a load's or sgen's `profile`, else its `type`; gridsim.feeders): per class, what its
    # loads consume and its sgens produce at each load bus, (n_classes, 2 n_load) in feature order. Empty = none.
    # Kept so a study scales a class, or gives it a profile, apart from the rest.
    class_names: tuple[str, ...] = ()
    class_consumption: np.ndarray = field(default_factory=lambda: _frozen(np.zeros((0, 0))))
    class_generation: np.ndarray = field(default_factory=lambda: _frozen(np.zeros((0, 0))))

    def __post_init__(self):
        if not self.output_buses:
            object.__setattr__(self, "output_buses", tuple(self.load_buses))

    @property
    def n_lines(self) -> int:
        return len(self.r_ohm)

    @property
    def n_outputs(self) -> int:
        return len(self.output_buses)

    @property
    def load_positions(self) -> np.ndarray:
        """Index of each load bus among the output buses (where its load enters the solver)."""
        pos = {b: i for i, b in enumerate(self.output_buses)}
        return np.array([pos[b] for b in self.load_buses], dtype=np.int64)

    def pandapower_bus(self, number: int) -> int:
        """The pandapower bus index of bus `number`."""
        if not self.pandapower_index:
            return int(number) - 1
        return self.pandapower_index[self.bus_numbers.index(int(number))]

    @property
    def n_load(self) -> int:
        return len(self.load_buses)

    @property
    def n_features(self) -> int:
        return 2 * self.n_load

    @property
    def z_base_ohm(self) -> float:
        return self.vn_kv**2 / self.sn_mva

    @functools.cached_property  # the names (every answer carries them) are built once per network
    def feature_names(self) -> tuple[str, ...]:
        return tuple(f"p_mw_bus{b}" for b in self.load_buses) + tuple(f"q_mvar_bus{b}" for b in self.load_buses)

    @functools.cached_property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f"vm_pu_bus{b}" for b in self.output_buses)

    @functools.cached_property
    def angle_names(self) -> tuple[str, ...]:
        return tuple(f"va_degree_bus{b}" for b in self.output_buses)

    @property
    def base_x(self) -> np.ndarray:
        """Base load vector in feature order (P then Q)."""
        return np.concatenate([self.base_p_mw, self.base_q_mvar])

    def bus_name(self, number: int) -> str:
        """Bus `number`'s own name, else its number as text."""
        names = self.bus_names or tuple(str(b) for b in self.bus_numbers)
        return str(names[self.bus_numbers.index(int(number))])

    @property
    def base_generation(self) -> np.ndarray:
        """(2 n_load,) generation in feature order (P then Q), MW / MVAr produced; zeros without sgens."""
        if not len(self.base_gen_p_mw):
            return np.zeros(self.n_features)
        return np.concatenate([self.base_gen_p_mw, self.base_gen_q_mvar])

    @property
    def base_consumption(self) -> np.ndarray:
        """(2 n_load,) consumption in feature order: base_x plus the generation netted into it."""
        return self.base_x + self.base_generation

    def zbus(self, line_scale=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reduced impedance matrix z (p.u.) of the non-slack buses and no-load voltages w.

        With the slack fixed, V = w + z @ I for bus current injections I, which is what the
        batched solver iterates. `line_scale` (..., n_lines) multiplies each line's impedance and
        gives batched (..., n, n) matrices (for priors over feeder parameters).
        """
        z_line = torch.as_tensor((self.r_ohm + 1j * self.x_ohm) / self._z_base(self.from_bus), dtype=torch.complex128)
        charging = self._charging(self.line_g_pu, self.line_b_pu, self.n_lines) if self._has_charging else None
        hanging = self._hanging(torch.ones(len(self.tie_r_ohm), dtype=torch.bool))
        return self._reduced(
            self.from_bus, self.to_bus, 1.0 / (z_line * self._scale(line_scale, self.n_lines)), charging, hanging
        )

    def zbus_switched(self, closed, line_scale=None) -> tuple[torch.Tensor, torch.Tensor]:
        """`zbus` of reconfigured feeders: `closed` (..., n_lines + n_ties) says which of the lines
        and then the tie lines conduct (see `radial_configurations`); `line_scale` covers both."""
        closed = torch.as_tensor(closed, dtype=torch.bool)
        n_all = self.n_lines + len(self.tie_r_ohm)
        if closed.ndim == 0 or closed.shape[-1] != n_all:
            raise ValueError(f"closed: expected shape (..., {n_all}), got {tuple(closed.shape)}")
        r = np.concatenate([self.r_ohm, self.tie_r_ohm])
        x = np.concatenate([self.x_ohm, self.tie_x_ohm])
        from_bus = np.concatenate([self.from_bus, self.tie_from_bus])
        z_line = torch.as_tensor((r + 1j * x) / self._z_base(from_bus), dtype=torch.complex128) * self._scale(
            line_scale, n_all
        )
        zero = torch.zeros((), dtype=torch.complex128)
        y_line = torch.where(closed, 1.0 / z_line, zero)
        charging = None
        if self._has_charging:
            y_sh = torch.cat(
                [
                    self._charging(self.line_g_pu, self.line_b_pu, self.n_lines),
                    self._charging(self.tie_g_pu, self.tie_b_pu, len(self.tie_r_ohm)),
                ]
            )
            charging = torch.where(closed, y_sh, zero)
        hanging = self._hanging(~closed[..., self.n_lines :])
        return self._reduced(from_bus, np.concatenate([self.to_bus, self.tie_to_bus]), y_line, charging, hanging)

    def radial_configurations(self, batch: int, exchanges: int, rng: np.random.Generator) -> np.ndarray:
        """(batch, n_lines + n_ties) closed masks of radial feeders, each `exchanges` branch exchanges
        away from the normal one: close an open tie, open a random line of the loop it makes."""
        n_all = self.n_lines + len(self.tie_r_ohm)
        ends = list(
            zip(
                np.concatenate([self.from_bus, self.tie_from_bus]).tolist(),
                np.concatenate([self.to_bus, self.tie_to_bus]).tolist(),
            )
        )
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

    def _z_base(self, from_bus: np.ndarray):
        """Impedance base (ohm) of lines starting at `from_bus`: one number on one voltage level."""
        if not len(self.bus_vn_kv):
            return self.z_base_ohm
        index = {bus: i for i, bus in enumerate(self.bus_numbers)}
        return self.bus_vn_kv[[index[int(b)] for b in from_bus]] ** 2 / self.sn_mva

    @staticmethod
    def _charging(g_pu: np.ndarray, b_pu: np.ndarray, n: int) -> torch.Tensor:
        """(n,) total shunt admittance of n lines (zeros where the arrays are empty)."""
        y = np.zeros(n, dtype=np.complex128)
        if len(g_pu):
            y += g_pu
        if len(b_pu):
            y += 1j * b_pu
        return torch.as_tensor(y)

    @property
    def _has_charging(self) -> bool:
        return bool(len(self.line_g_pu) or len(self.line_b_pu) or len(self.tie_g_pu) or len(self.tie_b_pu))

    def _hanging(self, open_ties: torch.Tensor) -> torch.Tensor | None:
        """(..., n_bus) admittance to ground of the lines hanging from the ends of the open ties
        (`open_ties` (..., n_ties)); None when no tie has one."""
        if not len(self.tie_from_y_pu):
            return None
        index = {bus: i for i, bus in enumerate(self.bus_numbers)}
        zero = torch.zeros((), dtype=torch.complex128)
        out = torch.zeros(*open_ties.shape[:-1], len(self.bus_numbers), dtype=torch.complex128)
        for ends, y in ((self.tie_from_bus, self.tie_from_y_pu), (self.tie_to_bus, self.tie_to_y_pu)):
            place = torch.zeros(len(ends), len(self.bus_numbers), dtype=torch.complex128)
            place[torch.arange(len(ends)), [index[int(b)] for b in ends]] = 1.0
            out = out + torch.where(open_ties, torch.tensor(y), zero) @ place
        return out

    def _fixed_admittance(self, index: dict[int, int]) -> torch.Tensor | None:
        """Y-bus part of transformers and bus shunts (MATPOWER's branch model, as pandapower's makeYbus)."""
        if not len(self.trafo_r_pu) and not len(self.shunt_y_pu):
            return None
        n_bus = len(self.bus_numbers)
        y = np.zeros((n_bus, n_bus), dtype=np.complex128)
        for k in range(len(self.trafo_r_pu)):
            f, t = index[int(self.trafo_hv_bus[k])], index[int(self.trafo_lv_bus[k])]
            ys = 1.0 / (self.trafo_r_pu[k] + 1j * self.trafo_x_pu[k])
            ysh = self.trafo_g_pu[k] + 1j * self.trafo_b_pu[k]
            tap = self.trafo_ratio[k] * np.exp(1j * np.pi / 180 * self.trafo_shift_degree[k])
            y[f, f] += (ys + ysh / 2) / (tap * np.conj(tap))
            y[f, t] += -ys / np.conj(tap)
            y[t, f] += -ys / tap
            y[t, t] += ys + ysh / 2
        for bus, y_sh in zip(self.shunt_bus, self.shunt_y_pu):
            y[index[int(bus)], index[int(bus)]] += y_sh
        return torch.as_tensor(y)

    def _reduced(
        self,
        from_bus,
        to_bus,
        y_line: torch.Tensor,
        charging: torch.Tensor | None = None,
        hanging: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reduced Z-bus and no-load voltages from line ends, (..., lines) series admittances and
        (..., lines) total line charging (None: none), plus transformers, bus shunts and the (..., n_bus)
        admittances to ground of lines hanging from open switches (None: none)."""
        index = {bus: i for i, bus in enumerate(self.bus_numbers)}
        n_bus, n_lines = len(self.bus_numbers), len(from_bus)
        incidence = torch.zeros(n_lines, n_bus, dtype=torch.complex128)
        rows = torch.arange(n_lines)
        incidence[rows, [index[int(b)] for b in from_bus]] = 1.0
        incidence[rows, [index[int(b)] for b in to_bus]] = -1.0
        ybus = incidence.T @ (y_line.unsqueeze(-1) * incidence)  # (..., n_bus, n_bus)
        if charging is not None:  # half of each line's charging at each end
            ybus = ybus + torch.diag_embed((charging / 2) @ incidence.abs().to(torch.complex128))
        fixed = self._fixed_admittance(index)
        if fixed is not None:
            ybus = ybus + fixed
        if hanging is not None:
            ybus = ybus + torch.diag_embed(hanging)
        slack = index[self.slack_bus]
        keep = [index[b] for b in self.output_buses]
        y_red = ybus[..., keep, :][..., :, keep]
        y_slack = ybus[..., keep, slack]
        z = torch.linalg.inv(y_red)
        v_slack = self.slack_vm_pu * np.exp(1j * np.deg2rad(self.slack_va_degree))
        w = -(z @ y_slack.unsqueeze(-1)).squeeze(-1) * v_slack
        return z, w

    def loads_to_pu(self, x) -> torch.Tensor:
        """(..., 2*n_load) MW/MVAr load vectors -> complex per-unit load power at the output buses
        (..., n_outputs), the solver's unknowns (zero at buses without load)."""
        t = torch.as_tensor(x)
        if t.ndim == 0 or t.shape[-1] != self.n_features:
            raise ValueError(f"x: expected shape (..., {self.n_features}) [P then Q in MW/MVAr], got {tuple(t.shape)}")
        t = t.to(torch.float64)
        n = self.n_load
        s = torch.complex(t[..., :n], t[..., n:]) / self.sn_mva
        if self.output_buses == self.load_buses:
            return s
        out = torch.zeros(*s.shape[:-1], self.n_outputs, dtype=s.dtype, device=s.device)
        out[..., torch.as_tensor(self.load_positions, device=s.device)] = s
        return out


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


@functools.cache
def _pandapower_net_cached(name: str):
    """The built-in net, normalised (`gridsim.feeders.normalise`: what the snapshot describes)."""
    from gridsim.feeders import normalise

    return normalise(_builder(name)[0]())


def _check_name(name) -> str:
    from gridsim.random_feeder import parse_name

    if name not in _BUILDERS and (not isinstance(name, str) or parse_name(name) is None):
        raise ValueError(f"network: expected one of {list(KNOWN_NETWORKS)} or random-<buses>-<seed>, got {name!r}")
    return name


def _builder(name: str) -> tuple[Callable, int]:
    """A built-in's (constructor, numbering offset), or a random feeder's (gridsim.random_feeder)."""
    from gridsim.random_feeder import parse_name, random_feeder

    if name in _BUILDERS:
        return _BUILDERS[name]
    buses, seed = parse_name(name)
    return (lambda: random_feeder(buses, seed)), 0


def pandapower_net(name: str | Network = "ieee33"):
    """A fresh (deep-copied) pandapower model of the named feeder, or of a `Network` snapshot
    (a built-in's constructor, or the pandapower JSON a user network was built from)."""
    if isinstance(name, Network):
        if name.source_json:  # read as data, never with pandapower's object decoder (see gridsim.pandapower_json)
            from gridsim.pandapower_json import read_pandapower_json

            return read_pandapower_json(name.source_json)
        name = name.name
    return copy.deepcopy(_pandapower_net_cached(_check_name(name)))


@functools.cache
def _build(name: str) -> Network:
    from gridsim.feeders import snapshot

    _, offset = _builder(name)
    return snapshot(_pandapower_net_cached(name), name=name, number_offset=offset, keep_source=False)


def network(name: str | Network = "ieee33") -> Network:
    """The named built-in feeder (cached; see KNOWN_NETWORKS), or `name` itself when it is a Network."""
    if isinstance(name, Network):
        return name
    return _build(_check_name(name))
