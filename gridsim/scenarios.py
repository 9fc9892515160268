"""Scenarios in a planner's terms, expanded into the load rows a model answers.

A network keeps consumption and generation apart (`Network.base_consumption`, `base_generation`), so
scaling one leaves the other, and splits both by customer class (`Network.class_names`: a load's or
sgen's `profile`, else its `type`; or classes a request defines as lists of load buses, `Classes.of_buses`).
Each row of a scenario, in the network's feature order (P then Q), is

    x = sum over classes k of consumption_k * class_scale_k * profile_k,t   (the rest: x 1)
          * load_scale * (1 + growth_rate)^year * bus_scale * load_t
        - sum over classes k of generation_k * class_scale_k * profile_k,t   (the rest: x 1)
          * generation_scale * pv_t
        - added DER (kW, kvar) * (its profile_t, or 1) * pv_t

where consumption keeps each bus's power factor (Q scales with P) unless a class's profile gives Q its
own factor (SimBench's `<class>_qload`), `load_t` / `pv_t` are a time series' consumption factor and PV
output share at step t (one per step, or one per step and load bus) and `profile_k,t` a class's own
profile (all 1 without a time series). A scenario with several `years` gives one row per year; with a
time series, one row per year and step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gridsim.errors import NetworkError
from gridsim.network import Network

# Suffixes of a SimBench load profile's P and Q factor columns (`H0-A_pload`, `H0-A_qload`).
P_SUFFIX, Q_SUFFIX = "_pload", "_qload"


@dataclass(frozen=True)
class DER:
    """Generation added at a load bus: kW (and kvar) produced at full output; `profile` names the time
    series' profile its output follows (a generation class's, e.g. SimBench's PV5; None: full output)."""

    bus: int
    kw: float
    kvar: float = 0.0
    profile: str | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    load_scale: float = 1.0
    bus_load_scale: Mapping[int, float] = field(default_factory=dict)
    generation_scale: float = 1.0
    der: tuple[DER, ...] = ()
    growth_rate: float = 0.0
    years: tuple[int, ...] = (0,)
    class_scaling: Mapping[str, float] = field(default_factory=dict)  # per customer class: its loads and sgens x this


@dataclass(frozen=True)
class Classes:
    """Customer classes: per class, what its loads consume and its sgens produce per load bus, (k, 2 n_load)."""

    names: tuple[str, ...]
    consumption: np.ndarray
    generation: np.ndarray

    @staticmethod
    def of(net: Network) -> Classes:
        """The network's own classes (none: an empty split)."""
        empty = np.zeros((0, net.n_features))
        if not net.class_names:
            return Classes((), empty, empty)
        return Classes(tuple(net.class_names), np.asarray(net.class_consumption), np.asarray(net.class_generation))

    @staticmethod
    def of_buses(net: Network, buses: Mapping[str, Sequence[int]], field_name: str = "classes") -> Classes:
        """Classes a request defines as lists of load buses: a bus's whole consumption and generation is its
        class's; a bus in two classes, or not a load bus, is refused naming it."""
        names = tuple(buses)
        consumption, generation = np.zeros((len(names), net.n_features)), np.zeros((len(names), net.n_features))
        owner: dict[int, str] = {}
        for k, name in enumerate(names):
            for bus in buses[name]:
                at = _position(net, int(bus), f"{field_name}.{name}")
                if int(bus) in owner:
                    raise NetworkError(
                        f"{field_name}.{name}",
                        f"bus {bus} is also in class {owner[int(bus)]!r}",
                        "each load bus in at most one class",
                    )
                owner[int(bus)] = name
                for column in (at, net.n_load + at):
                    consumption[k, column] = net.base_consumption[column]
                    generation[k, column] = net.base_generation[column]
        return Classes(names, consumption, generation)

    def moves(self, j: int, part: str = "all") -> bool:
        """Whether class j has anything a factor would move: `part` "all" (consumption or generation), "p" or "q"
        (its consumption's P or Q). A class of loads and sgens all at 0 MW (pandapower's mv_oberrhein gives its
        PV sgens scaling 0) moves nothing: scaling it or its profile would silently change nothing."""
        half = self.consumption.shape[1] // 2
        if part == "p":
            return bool(np.any(self.consumption[j, :half]))
        if part == "q":
            return bool(np.any(self.consumption[j, half:]))
        return bool(np.any(self.consumption[j]) or np.any(self.generation[j]))


@dataclass(frozen=True)
class TimeSeries:
    """Steps with their consumption factor and their generation's output share (PV: the network's own
    generation and the added DER), each (steps,) or (steps, n_load) per load bus, and profiles by name
    (steps,): a class's (its consumption's P and Q, and its generation), `<class>_pload` / `<class>_qload`
    for a load class's P and Q apart (SimBench), or one a DER names."""

    timestamps: tuple[str, ...]
    load: np.ndarray
    pv: np.ndarray
    step_hours: float = 0.25
    profiles: Mapping[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Block:
    """One scenario-year of a study: its (steps, 2 n_load) rows and what each row is."""

    rows: np.ndarray
    scenario: str
    year: int
    timestamps: tuple[str, ...] | None  # the time series' steps, one per row; None without a time series


@dataclass(frozen=True)
class Expanded:
    """The query rows and, per row, its scenario, year and time step (None without a time series); the
    profiles no class or DER took (a name that matched nothing is reported, not silently dropped)."""

    rows: np.ndarray  # (m, 2 n_load)
    scenario: tuple[str, ...]
    year: tuple[int, ...]
    timestamp: tuple[str, ...] | None
    unused_profiles: tuple[str, ...] = ()


def _position(net: Network, bus: int, field_name: str) -> int:
    if bus not in net.load_buses:
        raise NetworkError(field_name, f"bus {bus} is not a load bus of {net.name}", f"one of {list(net.load_buses)}")
    return net.load_buses.index(bus)


def _per_bus(factor: np.ndarray, n: int) -> np.ndarray:
    """(steps, n) from a factor per step (steps,) or per step and load bus (steps, n)."""
    return np.broadcast_to(factor.reshape(len(factor), -1), (len(factor), n))


@dataclass(frozen=True)
class _ClassProfiles:
    """(steps, k) factors per class: its consumption's P and Q, its generation; the profile names used."""

    p: np.ndarray
    q: np.ndarray
    gen: np.ndarray
    used: frozenset[str]


def _class_profiles(classes: Classes, series: TimeSeries | None, steps: int) -> _ClassProfiles:
    k = len(classes.names)
    p, q, gen = np.ones((steps, k)), np.ones((steps, k)), np.ones((steps, k))
    used: set[str] = set()
    if series is None:
        return _ClassProfiles(p, q, gen, frozenset())
    given = series.profiles
    for j, name in enumerate(classes.names):
        # a profile counts as used where it moves something: one of a class at 0 MW is reported unused
        both = given.get(name)
        if both is not None:
            p[:, j] = q[:, j] = gen[:, j] = both
            if classes.moves(j):
                used.add(name)
        if name + P_SUFFIX in given:  # SimBench's load profile: P, and Q apart (Q follows P when only P is given)
            p[:, j] = given[name + P_SUFFIX]
            q[:, j] = given.get(name + Q_SUFFIX, given[name + P_SUFFIX])
            if classes.moves(j, "p") or (name + Q_SUFFIX not in given and classes.moves(j, "q")):
                used.add(name + P_SUFFIX)
        if name + Q_SUFFIX in given:
            q[:, j] = given[name + Q_SUFFIX]
            if classes.moves(j, "q"):
                used.add(name + Q_SUFFIX)
    return _ClassProfiles(p, q, gen, frozenset(used))


def _class_factors(net: Network, classes: Classes, scenario: Scenario, where: str) -> np.ndarray:
    """(k,) the scenario's factor per class; a class it names that the study does not have, or one at 0 MW
    scaled (it would change nothing, silently), is refused."""
    factors = np.ones(len(classes.names))
    for name, factor in scenario.class_scaling.items():
        if name not in classes.names:
            known = list(classes.names) or "none: define them as lists of load buses (classes)"
            raise NetworkError(f"{where}.class_scaling", f"no customer class {name!r}", f"one of {known}")
        j = classes.names.index(name)
        if factor != 1.0 and not classes.moves(j):
            moving = [c for k, c in enumerate(classes.names) if classes.moves(k)]
            raise NetworkError(
                f"{where}.class_scaling",
                f"class {name!r} has no consumption or generation on {net.name} (its loads and sgens are at 0 MW): "
                f"scaling it by {factor:g} would change nothing",
                f"a class with loads or generation, one of {moving}; added generation as `der`",
            )
        factors[j] = factor
    return factors


def _one(
    net: Network, scenario: Scenario, index: int, series: TimeSeries | None, classes: Classes, shaped: _ClassProfiles
) -> Iterator[tuple[int, np.ndarray]]:
    """(year, (steps, 2 n_load) rows) of one scenario, a year at a time; its checks before the first."""
    n = net.n_load
    where = f"scenarios[{index}]"
    steps = 1 if series is None else len(series.timestamps)
    bus_scale = np.ones(n)
    for bus, factor in scenario.bus_load_scale.items():
        bus_scale[_position(net, int(bus), f"{where}.bus_load_scale")] *= factor
    scale = _class_factors(net, classes, scenario, where)
    if scenario.generation_scale != 1.0 and not np.any(net.base_generation):
        raise NetworkError(
            f"{where}.generation_scale",
            f"{net.name} has no generation of its own (0 MW): scaling it by {scenario.generation_scale:g} would "
            "change nothing",
            "1 (the default); added generation as `der`",
        )
    # consumption and generation per step (steps, 2n): the classes' with their factors and profiles, the rest x 1
    rest_c = net.base_consumption - classes.consumption.sum(axis=0)
    rest_g = net.base_generation - classes.generation.sum(axis=0)
    c, g = classes.consumption * scale[:, None], classes.generation * scale[:, None]
    consumption = rest_c[None] + np.concatenate([shaped.p @ c[:, :n], shaped.q @ c[:, n:]], axis=1)
    generation = (rest_g[None] + shaped.gen @ g) * scenario.generation_scale
    for k, der in enumerate(scenario.der):
        at = _position(net, der.bus, f"{where}.der[{k}].bus")
        output = np.ones(steps)
        if der.profile is not None and series is None:  # no time series: a profile would be dropped silently
            raise NetworkError(
                f"{where}.der[{k}].profile",
                f"profile {der.profile!r} given, but the study has no time series to take it from",
                "a time_series with that profile, or no profile (full output)",
            )
        if der.profile is not None and series is not None:
            if der.profile not in series.profiles:
                raise NetworkError(
                    f"{where}.der[{k}].profile",
                    f"no profile {der.profile!r} in the time series",
                    f"one of {sorted(series.profiles)[:20]}",
                )
            output = series.profiles[der.profile]
        generation[:, at] += der.kw / 1e3 * output
        generation[:, n + at] += der.kvar / 1e3 * output
    load_t, pv_t = (
        (np.ones((1, n)), np.ones((1, n))) if series is None else (_per_bus(series.load, n), _per_bus(series.pv, n))
    )
    consumption = consumption * np.tile(bus_scale, 2) * np.tile(load_t, 2)
    generation = generation * np.tile(pv_t, 2)
    for year in scenario.years:
        level = scenario.load_scale * (1.0 + scenario.growth_rate) ** year
        yield year, consumption * level - generation


def _check_series(net: Network, series: TimeSeries) -> None:
    steps = len(series.timestamps)
    for name, factor in (("load", series.load), ("pv", series.pv)):
        if factor.shape not in ((steps,), (steps, net.n_load)):
            raise NetworkError(
                f"time_series.{name}",
                f"shape {factor.shape} for {steps} steps",
                f"({steps},) or ({steps}, {net.n_load})",
            )
    for name, profile in series.profiles.items():
        if np.shape(profile) != (steps,):
            raise NetworkError(
                f"time_series.profiles.{name}", f"{np.size(profile)} values for {steps} steps", f"{steps} values"
            )


@dataclass(frozen=True)
class Expansion:
    """A study (its scenarios, time series and classes) checked and its classes' profiles resolved once: its
    rows a block at a time (`blocks`) or all at once (`expanded`), and the profiles nothing takes
    (`unused_profiles`), all from that one preparation. `of` checks the time series' shapes; a scenario's own
    checks come with its first rows."""

    net: Network
    scenarios: tuple[Scenario, ...]
    series: TimeSeries | None
    classes: Classes
    shaped: _ClassProfiles

    @classmethod
    def of(
        cls,
        net: Network,
        scenarios: Sequence[Scenario],
        series: TimeSeries | None = None,
        classes: Classes | None = None,
    ) -> Expansion:
        """`classes`: the network's own (`Classes.of`) unless given."""
        classes = Classes.of(net) if classes is None else classes
        if series is not None:
            _check_series(net, series)
        shaped = _class_profiles(classes, series, 1 if series is None else len(series.timestamps))
        return cls(net, tuple(scenarios), series, classes, shaped)

    def blocks(self) -> Iterator[Block]:
        """Every scenario's rows a year at a time, in `expanded`'s order: a study too large to hold at once (a
        batch job's) is written block by block."""
        stamps = None if self.series is None else tuple(self.series.timestamps)
        for i, scenario in enumerate(self.scenarios):
            for year, rows in _one(self.net, scenario, i, self.series, self.classes, self.shaped):
                yield Block(rows, scenario.name, year, stamps)

    def expanded(self) -> Expanded:
        """Every scenario's rows, in order: scenario, then year, then time step."""
        blocks = list(self.blocks())
        steps = len(blocks[0].rows)
        names = tuple(b.scenario for b in blocks for _ in range(steps))
        years = tuple(b.year for b in blocks for _ in range(steps))
        stamps = None if self.series is None else tuple(t for b in blocks for t in b.timestamps or ())
        return Expanded(np.concatenate([b.rows for b in blocks]), names, years, stamps, self.unused_profiles())

    def unused_profiles(self) -> tuple[str, ...]:
        """The time series' profiles no class or DER of the study takes (reported, not silently dropped)."""
        if self.series is None:
            return ()
        named = {d.profile for s in self.scenarios for d in s.der}
        return tuple(name for name in self.series.profiles if name not in self.shaped.used and name not in named)


def expand_blocks(
    net: Network, scenarios: Sequence[Scenario], series: TimeSeries | None = None, classes: Classes | None = None
) -> Iterator[Block]:
    """`Expansion.blocks` of the study; `classes`: the network's own (`Classes.of`) unless given."""
    yield from Expansion.of(net, scenarios, series, classes).blocks()


def expand(
    net: Network, scenarios: Sequence[Scenario], series: TimeSeries | None = None, classes: Classes | None = None
) -> Expanded:
    """`Expansion.expanded` of the study: every scenario's rows, in order: scenario, then year, then time step.
    `classes`: the network's own (`Classes.of`) unless given."""
    return Expansion.of(net, scenarios, series, classes).expanded()


def unused_profiles(
    net: Network, scenarios: Sequence[Scenario], series: TimeSeries | None, classes: Classes | None = None
) -> tuple[str, ...]:
    """`Expansion.unused_profiles` of the study (`expand` reports them in `Expanded.unused_profiles`)."""
    return Expansion.of(net, scenarios, series, classes).unused_profiles()
