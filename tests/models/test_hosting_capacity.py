"""Hosting capacity from a method (models.hosting_capacity) against the network's own power flow."""

from __future__ import annotations

import numpy as np
import pytest

import gridsim
from gridsim.api import VoltageModel
from models.hosting_capacity import HostingCapacityStudy, hosting_capacity
from models.network_fit import method_for


@pytest.fixture(scope="module")
def fitted():
    net = gridsim.network("ieee33")
    scenarios = gridsim.simulate(300, 0.3, 5)
    method = method_for(net)
    return net, method, method.fit(scenarios.x, scenarios.vm_pu)


def _study(net, candidates, **options) -> HostingCapacityStudy:
    base = np.concatenate([net.base_p_mw, net.base_q_mvar])
    loads = np.stack([base * s for s in (0.3, 0.6, 1.0)])
    defaults = {"loads": loads, "profile": np.ones(3), "candidates": np.asarray(candidates), "max_mw": 8.0}
    return HostingCapacityStudy(**{**defaults, "tolerance_mw": 8.0 / 4096, **options})


def _exact(net, study: HostingCapacityStudy, position: int) -> float:
    """The largest PV with no bus above the limit on any row: bisection on the network's power flow."""
    truth = VoltageModel(net)
    lo, hi = 0.0, study.max_mw
    while hi - lo > study.tolerance_mw:
        mid = 0.5 * (lo + hi)
        rows = study.loads.copy()
        rows[:, position] -= mid * study.profile
        lo, hi = (lo, mid) if np.nanmax(truth(rows)) > study.upper_pu else (mid, hi)
    return lo


def test_capacity_matches_the_power_flows_own_and_the_curve_crosses_alpha_there(fitted):
    net, method, fit = fitted
    study = _study(net, [5, 12, 24, 31])
    answer = hosting_capacity(method, fit, study)
    exact = np.array([_exact(net, study, p) for p in study.candidates])
    assert np.all(exact > 0.1) and not answer.at_max.any()
    np.testing.assert_allclose(answer.capacity_mw, exact, rtol=0.05)
    assert np.all(answer.capacity_mw <= exact + study.tolerance_mw)  # errs on the safe side
    assert np.all(np.diff(answer.curve_risk, axis=1) >= -1e-9)  # the risk rises with the size
    below = answer.curve_mw <= answer.capacity_mw[:, None]
    assert np.all(answer.curve_risk[below] <= study.alpha + 1e-9)
    assert np.all(answer.curve_risk[answer.curve_mw > 1.2 * answer.capacity_mw[:, None]] > study.alpha)
    assert answer.rows_asked > 0


def test_a_feeder_already_outside_the_limit_hosts_nothing_and_dark_rows_do_not_count_pv(fitted):
    net, method, fit = fitted
    exporting = -np.concatenate([net.base_p_mw, net.base_q_mvar])[None]  # every bus feeding in: above 1.0 p.u.
    over = hosting_capacity(method, fit, _study(net, [17], loads=exporting, profile=np.ones(1), upper_pu=1.0 + 1e-6))
    assert over.capacity_mw[0] == 0.0 and over.base_risk[0] > 0.05 and not over.at_max[0]
    dark = _study(net, [17], profile=np.zeros(3))  # PV never producing: any size is hosted
    answer = hosting_capacity(method, fit, dark)
    assert answer.at_max[0] and answer.capacity_mw[0] == dark.max_mw


def test_a_row_the_feeder_cannot_carry_without_pv_is_refused_not_counted_as_over_the_limit(fitted):
    """User trial: one row without a power flow (4x the base load, voltage collapse) set every capacity to 0 and
    the risk without PV to 1. pandapower has no solution there either; with PV >= ~1.4 MW at bus 18 it solves, so
    "more PV than the feeder can carry" was the wrong reading: the row is refused, named by its index."""
    import copy

    import pandapower as pp
    import pandapower.networks as pn

    from models.errors import RowsRefused

    net, method, fit = fitted
    heavy = copy.deepcopy(pn.case33bw())
    heavy.load[["p_mw", "q_mvar"]] *= 4.0
    with pytest.raises(pp.powerflow.LoadflowNotConverged):
        pp.runpp(heavy, numba=False)
    base = np.concatenate([net.base_p_mw, net.base_q_mvar])
    study = _study(net, [17], loads=np.stack([base * 0.6, base * 4.0, base * 0.3, base * 4.0]), profile=np.ones(4))
    with pytest.raises(RowsRefused) as refused:
        hosting_capacity(method, fit, study)
    assert refused.value.field == "loads" and refused.value.rows == [1, 3]
    assert "even without new PV" in str(refused.value)
    night = _study(net, [17], loads=np.stack([base * 0.6, base * 4.0]), profile=np.array([1.0, 0.0]))
    with pytest.raises(RowsRefused):  # a dark row (PV at 0) is a row without new PV all the same
        hosting_capacity(method, fit, night)
