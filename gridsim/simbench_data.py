"""A year of SimBench load and PV profiles as (load vector -> per-bus |V|) data.

SimBench (the `simbench` package) ships LV and MV grids with a year (2016, 35,136 15-minute steps)
of load, PV (sgen) and storage profiles. This module turns one grid into a gridsim `Network`
(`gridsim.feeders.snapshot`) and a year of it into the arrays the models see:

- `simbench_network(code)`: the grid as a `Network` (cached per process);
- `simbench_year(code, steps, solver)`: `steps` time steps evenly spaced over the year (stride
  35136 // steps, in time order), the net load per load bus in the Network's feature layout
  (P of every load bus, then Q) and the solved |V| of every output bus, with the timestamps.
  Solved arrays are cached on disk (`cache_dir()`, outside the repository);
- `add_meter_noise(y, std, rng)` / `add_load_noise(x, rel, rng)`: reading noise for contexts.

Net load per bus: the sum of the bus's loads' P and Q (profile values, times `scaling`, as
pandapower applies it) minus its static generators' P (profile values, times `scaling`) and
minus their Q (the net's own constant `q_mvar`: SimBench profiles give no sgen Q and ship 0);
storage, where a grid has any (the `--1-`/`--2-` scenarios), counts as load (positive =
charging, Q the net's constant `q_mvar`). A bus with PV and no load is a load bus of the Network
(`snapshot` takes every bus with a load or sgen), so its injection is a feature like any other.
Elements at the slack bus change no voltage and are left out, as `snapshot` leaves them out.

Development grids (`DEV_GRIDS`) are for tuning; every other SimBench grid is held out as the
fair test (`HELDOUT_EXAMPLES` names a few), never used for training or tuning.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

import numpy as np

from gridsim.network import Network

__all__ = [
    "DEV_GRIDS",
    "HELDOUT_EXAMPLES",
    "YEAR_STEPS",
    "add_load_noise",
    "add_meter_noise",
    "cache_dir",
    "simbench_net",
    "simbench_pandapower_json",
    "simbench_network",
    "simbench_profiles",
    "simbench_year",
    "step_indices",
]

log = logging.getLogger(__name__)

DEV_GRIDS: tuple[str, ...] = ("1-LV-rural1--0-sw", "1-LV-semiurb4--0-sw", "1-MV-rural--0-sw")
# held out: never used for training or tuning (the fair test); any SimBench grid not in DEV_GRIDS is
HELDOUT_EXAMPLES: tuple[str, ...] = ("1-LV-urban6--0-sw", "1-MV-semiurb--0-sw", "1-LV-rural2--0-sw")
YEAR_STEPS = 35136  # 366 days x 96 quarter hours (2016)
_CACHE_VERSION = 1


def cache_dir() -> Path:
    """Where solved years are cached: $GRIDPFN_CACHE/simbench, else ~/.cache/gridpfn/simbench."""
    root = os.environ.get("GRIDPFN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gridpfn"
    )
    return Path(root) / "simbench"


@functools.lru_cache(maxsize=8)
def _raw_net(code: str):
    import simbench

    return simbench.get_simbench_net(code)


def simbench_net(code: str):
    """A fresh copy of the SimBench pandapower net `code` (with its profiles)."""
    import copy

    return copy.deepcopy(_raw_net(code))


def _storage_as_load(net):
    """A copy of the net whose in-service storage units are loads (snapshot refuses storage)."""
    import copy

    import pandapower as pp

    storage = net.storage[net.storage.in_service.astype(bool)] if "storage" in net else None
    if storage is None or storage.empty:
        return net
    net = copy.deepcopy(net)
    for idx, row in storage.iterrows():
        pp.create_load(
            net,
            bus=int(row.bus),
            p_mw=float(row.p_mw),
            q_mvar=float(row.q_mvar),
            scaling=float(row.scaling),
            name=f"storage {idx}",
        )
    net.storage = net.storage.iloc[0:0]
    return net


@functools.lru_cache(maxsize=8)
def simbench_network(code: str) -> Network:
    """The SimBench grid `code` as a gridsim `Network` (name = code; buses = pandapower indices)."""
    from gridsim.feeders import snapshot

    return snapshot(_storage_as_load(_raw_net(code)), name=code)


def simbench_pandapower_json(code: str) -> str:
    """The grid as pandapower JSON that `POST /v1/networks` accepts (the same Network as
    `simbench_network(code)`): `pandapower.to_json` of the net as SimBench builds it, less its year of
    profiles (megabytes, over the upload limit; they are the contexts' data, not the grid's), storage
    as loads (as `simbench_year` counts it)."""
    import pandapower as pp

    net = _storage_as_load(simbench_net(code))
    net["profiles"] = {}
    return pp.to_json(net)


def step_indices(steps: int) -> np.ndarray:
    """`steps` indices into the year, evenly spaced (stride YEAR_STEPS // steps), in time order."""
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or not 1 <= steps <= YEAR_STEPS:
        raise ValueError(f"steps: expected an integer in [1, {YEAR_STEPS}], got {steps!r}")
    return np.arange(int(steps)) * (YEAR_STEPS // int(steps))


@functools.lru_cache(maxsize=8)
def _absolute_values(code: str):
    import simbench

    return simbench.get_absolute_values(_raw_net(code), profiles_instead_of_study_cases=True)


def simbench_profiles(code: str, index=None) -> dict[tuple[str, str], np.ndarray]:
    """Absolute element values per step: {('load', 'p_mw'): (n_steps, n_load), ('load', 'q_mvar'),
    ('sgen', 'p_mw'), ('storage', 'p_mw')}, columns in the order of the net's element tables,
    rows `index` (default: the whole year). Values as the profiles give them (scaling not applied)."""
    net = _raw_net(code)
    values = _absolute_values(code)
    rows = np.arange(YEAR_STEPS) if index is None else np.asarray(index)
    out = {}
    for table, column in (("load", "p_mw"), ("load", "q_mvar"), ("sgen", "p_mw"), ("storage", "p_mw")):
        elements = net[table] if table in net else None
        if elements is None or elements.empty:
            out[(table, column)] = np.zeros((len(rows), 0))
            continue
        frame = values.get((table, column))
        if frame is None or frame.shape[1] == 0:  # no profile: the element's own value every step
            out[(table, column)] = np.tile(elements[column].to_numpy(dtype=np.float64), (len(rows), 1))
        else:
            out[(table, column)] = frame.loc[:, elements.index].to_numpy(dtype=np.float64)[rows]
    return out


def _normal_bus(normal, table: str, idx, bus: int) -> int:
    """The bus of element `idx` of `table` in the normalised net (storage: the load standing for it)."""
    if table == "storage":
        match = normal.load.index[normal.load.name == f"storage {idx}"]
        return int(normal.load.bus.at[match[0]]) if len(match) else bus
    return int(normal[table].bus.at[idx]) if idx in normal[table].index else bus


def _feature_matrix(code: str, network: Network, index: np.ndarray) -> np.ndarray:
    """(len(index), 2 n_load) net load in the Network's feature layout."""
    consumption, generation = consumption_and_generation(code, network, index)
    return consumption - generation


def consumption_and_generation(code: str, network: Network, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(len(index), 2 n_load) each: what the loads (and storage, as `simbench_year` counts it) consume and
    what the sgens produce at each step, in the Network's feature layout (MW / MVAr)."""
    from gridsim.feeders import normalise

    net = _raw_net(code)
    # bus of every element after the snapshot's own normalisation (fused bus-bus switches move elements)
    normal = normalise(_storage_as_load(net))
    position = {network.pandapower_bus(b): i for i, b in enumerate(network.load_buses)}
    slack = int(normal.ext_grid[normal.ext_grid.in_service.astype(bool)].bus.iloc[0])
    prof = simbench_profiles(code, index)
    n = network.n_load
    consumption, generation = np.zeros((len(index), 2 * n)), np.zeros((len(index), 2 * n))

    def add(table, p, q, x):
        elements = net[table]
        for j, idx in enumerate(elements.index):
            if not bool(elements.in_service.at[idx]):
                continue
            bus = _normal_bus(normal, table, idx, int(elements.bus.at[idx]))
            if bus == slack:
                continue
            if bus not in position:
                raise ValueError(f"{code}: {table} {idx} on bus {bus}, which is not a load bus of the network")
            scaling = float(elements.scaling.at[idx])
            x[:, position[bus]] += scaling * p[:, j]
            x[:, n + position[bus]] += scaling * q[:, j]

    add("load", prof[("load", "p_mw")], prof[("load", "q_mvar")], consumption)
    sgen_q = np.broadcast_to(net.sgen.q_mvar.to_numpy(dtype=np.float64), prof[("sgen", "p_mw")].shape)
    add("sgen", prof[("sgen", "p_mw")], sgen_q, generation)
    if "storage" in net and not net.storage.empty:
        storage_p = prof[("storage", "p_mw")]
        storage_q = np.broadcast_to(net.storage.q_mvar.to_numpy(dtype=np.float64), storage_p.shape)
        add("storage", storage_p, storage_q, consumption)
    return consumption, generation


def _timestamps(code: str, index: np.ndarray) -> np.ndarray:
    import pandas as pd

    times = _raw_net(code).profiles["load"]["time"].to_numpy()[index]
    return pd.to_datetime(pd.Series(times), format="%d.%m.%Y %H:%M").to_numpy().astype("datetime64[m]")


def simbench_year(code: str, steps: int = 3000, solver: str = "batched", cache: bool = True):
    """(x, vm_pu, timestamps) for `steps` time steps of the year of SimBench grid `code`.

    x (steps, 2 n_load): net load per load bus (`Network.feature_names` order: P MW then Q MVAr);
    vm_pu (steps, n_outputs): |V| of every output bus (`Network.output_names`), NaN where the power
    flow does not converge; timestamps (steps,) datetime64[m], in time order (the profiles' own
    local wall-clock labels: two gaps are off by the daylight-saving hour). The step indices are
    `step_indices(steps)`. Cached on disk under `cache_dir()` (keyed by code, steps, solver, and
    checked against the Network's features/outputs, so a changed snapshot recomputes).
    """
    import gridsim

    index = step_indices(steps)
    network = simbench_network(code)
    path = cache_dir() / f"{code}-{int(steps)}-{solver}.npz"
    if cache and path.exists():
        try:
            with np.load(path, allow_pickle=False) as data:
                if (
                    int(data["version"]) == _CACHE_VERSION
                    and tuple(data["feature_names"].tolist()) == network.feature_names
                    and tuple(data["output_names"].tolist()) == network.output_names
                    and np.array_equal(data["index"], index)
                ):
                    return data["x"].copy(), data["vm_pu"].copy(), data["timestamps"].astype("datetime64[m]")
        except (OSError, ValueError, KeyError) as exc:
            log.warning("ignoring unreadable cache %s: %s", path, exc)
    x = _feature_matrix(code, network, index)
    result = gridsim.solve(x, network=network, solver=solver)
    vm = result.vm_pu
    stamps = _timestamps(code, index)
    if result.n_failed:
        log.warning("%s: %d of %d steps did not converge (NaN voltages)", code, result.n_failed, len(x))
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez_compressed(
            tmp,
            version=_CACHE_VERSION,
            x=x,
            vm_pu=vm,
            timestamps=stamps.astype(np.int64),
            index=index,
            feature_names=np.array(network.feature_names),
            output_names=np.array(network.output_names),
        )
        os.replace(tmp, path)
    return x, vm, stamps


def add_meter_noise(y, std: float, rng: np.random.Generator) -> np.ndarray:
    """Voltage readings: y + N(0, std^2) per reading (p.u.); std 0 returns a copy."""
    y = np.asarray(y, dtype=np.float64)
    if not std >= 0:
        raise ValueError(f"std: expected >= 0, got {std!r}")
    return y + std * rng.standard_normal(y.shape) if std > 0 else y.copy()


def add_load_noise(x, rel: float, rng: np.random.Generator) -> np.ndarray:
    """Load readings with relative error: x * (1 + rel N(0, 1)) per entry; rel 0 returns a copy."""
    x = np.asarray(x, dtype=np.float64)
    if not rel >= 0:
        raise ValueError(f"rel: expected >= 0, got {rel!r}")
    return x * (1.0 + rel * rng.standard_normal(x.shape)) if rel > 0 else x.copy()
