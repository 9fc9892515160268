"""The network model with network-fit's fitted impedance errors: the feeder its probe solves exactly.

network-fit's branch stage corrects DistFlow to first order in each branch's relative impedance error
(models.branch_correction); what that first order misses off the context (the errors' squares, the losses
they move, the flows PV export reverses) no fit of the context can show. Solving the power flow of the
model with those errors applied gives a feeder like the user's whose voltages are known at every load,
so the method's own miss on it, fitted on the same context loads, measures that part at each query.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

# A branch keeps at least this share of its recorded impedance, and at most 1 / this: a fitted error past
# it (noise on a branch the readings barely see) would leave a feeder no power flow can solve.
IMPEDANCE_RANGE = 0.1


def incoming_branch(network: Any, below: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n_lines,), (n_trafos,): the output index of the bus each line and transformer feeds (its end farther
    from the slack), from `below` (gridsim.tree.downstream)."""
    index = {int(bus): i for i, bus in enumerate(network.output_buses)}
    depth = below.sum(axis=0)  # the output buses on each bus's path, itself included: 0 at the slack

    def fed(ends: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        out = []
        for a, b in zip(np.asarray(ends[0]).tolist(), np.asarray(ends[1]).tolist(), strict=True):
            da, db = (depth[index[int(e)]] if int(e) in index else 0 for e in (a, b))
            out.append(index[int(a)] if da > db else index[int(b)])
        return np.asarray(out, dtype=np.int64)

    return fed((network.from_bus, network.to_bus)), fed((network.trafo_hv_bus, network.trafo_lv_bus))


class CorrectedNetwork:
    """`at(errors)`: the voltage model of the network whose branch into output bus j has resistance
    R_j (1 - errors[j]) and reactance X_j (1 - errors[k + j]) (the branch stage's relative errors, theta)."""

    def __init__(self, network: Any, below: np.ndarray):
        self.network = network
        self.line_fed, self.trafo_fed = incoming_branch(network, below)
        self.k = below.shape[0]

    def at(self, errors: np.ndarray) -> Any:
        from gridsim.api import VoltageModel

        k = self.k
        factor = np.clip(1.0 - np.asarray(errors[: 2 * k], dtype=np.float64), IMPEDANCE_RANGE, 1.0 / IMPEDANCE_RANGE)
        r, x = factor[:k], factor[k:]
        net = self.network
        changed = dataclasses.replace(
            net,
            r_ohm=net.r_ohm * r[self.line_fed],
            x_ohm=net.x_ohm * x[self.line_fed],
            trafo_r_pu=net.trafo_r_pu * r[self.trafo_fed] if len(self.trafo_fed) else net.trafo_r_pu,
            trafo_x_pu=net.trafo_x_pu * x[self.trafo_fed] if len(self.trafo_fed) else net.trafo_x_pu,
        )
        return VoltageModel(changed)
