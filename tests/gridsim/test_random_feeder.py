"""gridsim.random_feeder: seeded radial feeders, usable by name like the built-ins."""

import numpy as np
import pandapower as pp
import pytest

import gridsim
from gridsim.random_feeder import parse_name, random_feeder


def test_same_seed_same_feeder_and_base_voltage_on_target():
    a, b = random_feeder(30, seed=5), random_feeder(30, seed=5)
    assert a.line[["from_bus", "to_bus", "length_km"]].equals(b.line[["from_bus", "to_bus", "length_km"]])
    assert not a.line.length_km.equals(random_feeder(30, seed=6).line.length_km)
    assert len(a.bus) == 30 and len(a.line) == 29  # a tree: one line per non-slack bus
    pp.runpp(a, numba=False)
    assert abs(a.res_bus.vm_pu.min() - 0.94) < 2e-3


def test_by_name_through_gridsim():
    net = gridsim.network("random-25-3")
    assert len(net.output_buses) == 24 and net.n_features == 2 * len(net.load_buses)
    sim = gridsim.simulate(20, 0.3, seed=0, network="random-25-3")
    assert sim.converged.all() and np.isfinite(sim.vm_pu).all()
    assert parse_name("random-25-3") == (25, 3) and parse_name("ieee33") is None
    with pytest.raises(ValueError, match="random-<buses>-<seed>"):
        gridsim.network("random-25")
    with pytest.raises(ValueError, match="n_buses"):
        random_feeder(1000, seed=0)
