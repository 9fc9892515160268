"""Feeders as built, unlike their models: a substation set point and regulators' steps.

An operator's network model records lines and loads; the feeder in the field also has a substation set
point other than the model's (1.0 p.u. is the usual default, real ones sit at 1.0-1.05) and voltage
regulators or off-load taps that step every bus below them. Benches and tests solve such feeders for the
truth while the service is told the plain model; network-fit's impedance probe (models.corrected_network)
solves the feeder with the steps it fitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from gridsim.errors import NetworkError
from gridsim.network import Network


def with_set_point(network: Network, vm_pu: float) -> Network:
    """The feeder with its substation (slack) at `vm_pu`."""
    return dataclasses.replace(network, slack_vm_pu=float(vm_pu))


def with_regulator(network: Network, from_bus: int, to_bus: int, step: float) -> Network:
    """The feeder with the line from_bus - to_bus (IEEE numbers, from_bus the substation's side) replaced by a
    regulator of the same impedance whose fixed tap raises the voltage below it by `step` (0.0125: +1.25 %)."""
    ends = {int(from_bus), int(to_bus)}
    found = [i for i in range(len(network.r_ohm)) if {int(network.from_bus[i]), int(network.to_bus[i])} == ends]
    if not found:
        raise NetworkError("line", f"no line between buses {from_bus} and {to_bus}")
    return with_steps(network, found[:1], [int(from_bus)], [1.0 + float(step)])


def with_steps(network: Network, lines: Sequence[int], upstream: Sequence[int], ratios: Sequence[float]) -> Network:
    """The feeder with each of `lines` (indices) a regulator of the line's impedance and charging that multiplies
    the voltage on its far side from `upstream` (its bus number on the substation's side) by `ratios`."""
    lines = [int(i) for i in lines]
    if not lines:
        return network
    keep = np.setdiff1d(np.arange(len(network.r_ohm)), lines)
    index = {int(bus): i for i, bus in enumerate(network.bus_numbers)}
    hv = np.asarray(upstream, dtype=np.int64)
    lv = np.asarray(
        [
            int(network.to_bus[i]) if int(network.from_bus[i]) == int(u) else int(network.from_bus[i])
            for i, u in zip(lines, hv, strict=True)
        ],
        dtype=np.int64,
    )
    kv = np.array([float(network.bus_vn_kv[index[int(u)]]) if len(network.bus_vn_kv) else network.vn_kv for u in hv])
    z_base = np.square(kv) / network.sn_mva
    charged = len(network.line_g_pu) > 0

    def cut(values: np.ndarray) -> np.ndarray:
        return values[keep] if len(values) else values

    def added(values: np.ndarray, more: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(values, dtype=more.dtype), more])

    # MATPOWER's tap: the from side's voltage over the ratio is the to side's, so a ratio below 1 raises it
    return dataclasses.replace(
        network,
        from_bus=network.from_bus[keep],
        to_bus=network.to_bus[keep],
        r_ohm=network.r_ohm[keep],
        x_ohm=network.x_ohm[keep],
        line_g_pu=cut(network.line_g_pu),
        line_b_pu=cut(network.line_b_pu),
        trafo_hv_bus=added(network.trafo_hv_bus, hv),
        trafo_lv_bus=added(network.trafo_lv_bus, lv),
        trafo_r_pu=added(network.trafo_r_pu, network.r_ohm[lines] / z_base),
        trafo_x_pu=added(network.trafo_x_pu, network.x_ohm[lines] / z_base),
        trafo_g_pu=added(network.trafo_g_pu, network.line_g_pu[lines] if charged else np.zeros(len(lines))),
        trafo_b_pu=added(network.trafo_b_pu, network.line_b_pu[lines] if charged else np.zeros(len(lines))),
        trafo_ratio=added(network.trafo_ratio, 1.0 / np.asarray(ratios, dtype=np.float64)),
        trafo_shift_degree=added(network.trafo_shift_degree, np.zeros(len(lines))),
    )
