"""The feeder's tree as the fits need it: which output buses lie below which.

On a radial feeder each non-slack bus c has one branch feeding it, and that branch carries the
loads of every bus below c. `downstream(net)[c, j]` is True when bus j is c itself or lies below
it (outputs in `net.output_buses` order), so the branch into c carries j's load, and bus j's path
from the substation runs through every c with downstream[c, j].
"""

from __future__ import annotations

from collections import deque

import numpy as np

from gridsim.network import Network


def downstream(net: Network) -> np.ndarray:
    """(k, k) bool over the output buses: [c, j] = j is c or below c (breadth-first from the slack)."""
    ends = list(zip(np.asarray(net.from_bus).tolist(), np.asarray(net.to_bus).tolist())) + list(
        zip(np.asarray(net.trafo_hv_bus).tolist(), np.asarray(net.trafo_lv_bus).tolist())
    )
    links: dict[int, list[int]] = {}
    for a, b in ends:
        links.setdefault(int(a), []).append(int(b))
        links.setdefault(int(b), []).append(int(a))
    parent: dict[int, int | None] = {int(net.slack_bus): None}
    todo = deque([int(net.slack_bus)])
    while todo:
        bus = todo.popleft()
        for nxt in links.get(bus, []):
            if nxt not in parent:
                parent[nxt] = bus
                todo.append(nxt)
    index = {bus: i for i, bus in enumerate(net.output_buses)}
    below = np.zeros((len(index), len(index)), dtype=bool)
    for bus, j in index.items():
        if bus not in parent:
            raise ValueError(f"bus {bus}: not connected to the slack bus {net.slack_bus}")
        at: int | None = bus
        while at is not None and at in index:
            below[index[at], j] = True
            at = parent[at]
    return below
