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
    """`at(errors, steps)`: the voltage model of the network whose branch into output bus j has resistance
    R_j (1 - errors[j]) and reactance X_j (1 - errors[k + j]) (the branch stage's relative errors, theta), and a
    tap of ratio t_j = sqrt(1 + 2 steps[j]) at its head where steps[j] is not 0 (the branch stage's taps: a line
    becomes a regulator of its impedance, a transformer's ratio moves)."""

    def __init__(self, network: Any, below: np.ndarray):
        self.network = network
        self.line_fed, self.trafo_fed = incoming_branch(network, below)
        self.output = {int(bus): i for i, bus in enumerate(network.output_buses)}
        self.k = below.shape[0]

    def at(self, errors: np.ndarray, steps: np.ndarray | None = None) -> Any:
        """The voltage model (gridsim.api.VoltageModel) of `network_at(errors, steps)`."""
        from gridsim.api import VoltageModel

        return VoltageModel(self.network_at(errors, steps))

    def undone(self, errors: np.ndarray, steps: np.ndarray | None = None) -> np.ndarray:
        """(3k + 1,) the relative errors and tap steps (the branch stage's theta: R, X, taps' (t^2 - 1) / 2, offset 0)
        that take `network_at(errors, steps)` back to this network, in that network's own terms: a branch scaled by
        f is 1 / f of it, a tap t is undone by 1 / t."""
        k = self.k
        factor = np.clip(1.0 - np.asarray(errors[: 2 * k], dtype=np.float64), IMPEDANCE_RANGE, 1.0 / IMPEDANCE_RANGE)
        back = np.zeros(3 * k + 1)
        back[: 2 * k] = 1.0 - 1.0 / factor
        if steps is not None:
            halves = np.asarray(steps, dtype=np.float64)
            ratio = np.maximum(1.0 + 2.0 * halves, 0.25)  # t^2, bounded as `network_at` bounds it
            back[2 * k : 3 * k] = np.where(halves != 0.0, (1.0 / ratio - 1.0) / 2.0, 0.0)
        return back

    def network_at(self, errors: np.ndarray, steps: np.ndarray | None = None) -> Any:
        """The network (gridsim Network) with these relative errors (theta) and taps' steps applied."""
        from gridsim.departures import with_steps

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
        if steps is not None and np.any(steps):
            ratio = np.sqrt(np.maximum(1.0 + 2.0 * np.asarray(steps, dtype=np.float64), 0.25))
            stepped = np.flatnonzero(np.asarray(steps) != 0.0)
            if len(self.trafo_fed):  # a transformer's tap sits on its side toward the substation
                toward = np.array(
                    [self.output.get(int(b), -1) != fed for b, fed in zip(net.trafo_hv_bus, self.trafo_fed)]
                )
                moved = np.where(toward, 1.0 / ratio[self.trafo_fed], ratio[self.trafo_fed])
                changed = dataclasses.replace(changed, trafo_ratio=changed.trafo_ratio * moved)
            lines = [i for i, fed in enumerate(self.line_fed) if fed in stepped]
            upstream = [
                int(net.from_bus[i])
                if self.output.get(int(net.to_bus[i]), -1) == self.line_fed[i]
                else int(net.to_bus[i])
                for i in lines
            ]
            changed = with_steps(changed, lines, upstream, ratio[self.line_fed[lines]])
        return changed
