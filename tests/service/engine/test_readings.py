"""A context's readings held to its network model's power flow (service.engine.readings), on the real batched
solver: what is refused, how it is named, what is kept, and that a context is checked once."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

import gridsim
from gridsim.api import VoltageModel
from models.limits import READING_TOLERANCE_PU
from service.engine import readings
from service.engine.context_sets import ContextSet
from service.engine.readings import Readings, ReadingsRefused, UnsolvedRows, check_readings

NET = gridsim.network("ieee33")


@pytest.fixture
def context(scenarios):
    """40 rows of real power flow (copies: each test changes its own)."""
    return scenarios[0][:40].copy(), scenarios[1][:40].copy()


def _check(x, y, typical=None):
    check_readings(VoltageModel(NET), ContextSet.build(x, y, typical_loads=typical), NET.base_x, "body")


def test_a_reading_far_from_the_network_model_is_named_with_the_range_it_should_lie_in(context):
    x, y = context
    y[7, 0] = 0.5  # bus 2, the substation's neighbour: the model says ~0.997
    y[9, 3], y[9, 20] = 1.3, 1.4  # two in one row: the row's first is named, both counted
    with pytest.raises(ReadingsRefused) as caught:
        _check(x, y)
    exc = caught.value
    assert [(c.row, c.bus) for c in exc.far] == [(7, 0), (9, 3)] and (exc.rows, exc.readings) == (2, 3)
    entry = exc.entries[0]
    model = exc.far[0].model
    assert entry["field"] == "body.y[7][0]" and entry["message"].startswith("is 0.5, ")
    assert abs(model - 0.997) < 0.003
    low, high = model - READING_TOLERANCE_PU, model + READING_TOLERANCE_PU
    assert f"[{low:.4f}, {high:.4f}] p.u." in entry["expected"], entry
    assert (
        exc.detail.startswith("body.y: 3 reading(s) in 2 row(s) lie farther than 0.2 p.u.") and "[7, 9]" in exc.detail
    )


def test_readings_drawn_at_random_in_the_accepted_range_are_refused(context):
    x, _ = context
    noise = np.random.default_rng(0).uniform(0.5, 1.5, (len(x), NET.n_outputs))
    with pytest.raises(ReadingsRefused) as caught:
        _check(x, noise)
    assert caught.value.rows == len(x) and len(caught.value.entries) == 10  # the first 10 rows listed
    assert f"({len(x)} rows in all)" in caught.value.detail


def test_the_worst_legitimate_context_measured_is_kept():
    """bench/reading_tolerance.py's largest miss: every line 1.3x the model's, loads grown 1.6x, meter noise
    2e-3 p.u., loads reported with 2 % noise (0.06 p.u. at most: the threshold's third)."""
    rng = np.random.default_rng(1)
    x = NET.base_x * 1.6 * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (60, NET.n_features)))
    longer = dataclasses.replace(NET, r_ohm=NET.r_ohm * 1.3, x_ohm=NET.x_ohm * 1.3)
    y = gridsim.solve(x, network=longer).vm_pu + rng.normal(0.0, 2e-3, (60, NET.n_outputs))
    reported = x * (1.0 + 0.02 * rng.standard_normal(x.shape))
    assert np.abs(y - VoltageModel(NET)(reported)).max() > 0.05  # the case is the hard one
    _check(reported, y)


def test_unmetered_loads_take_their_typical_values_and_unread_buses_are_not_compared(context):
    x, y = context
    x[:, 3], y[:, 5] = np.nan, np.nan  # a load never metered, a bus never read
    _check(x, y, typical=NET.base_x)
    y[2, 6] = 0.6
    with pytest.raises(ReadingsRefused, match=r"body\.y\[2\]\[6\]") as caught:
        _check(x, y, typical=NET.base_x)
    assert "unmetered loads are taken at their typical values" in caught.value.far[0].message  # the likely cause
    x[:, 3] = NET.base_x[3]  # metered: the same miss is no longer put down to typical values
    with pytest.raises(ReadingsRefused) as caught:
        _check(x, y, typical=NET.base_x)
    assert "typical" not in caught.value.far[0].message


def test_rows_the_network_model_cannot_solve_are_refused_by_row(context):
    x, y = context
    x[[4, 11]] *= 30.0  # far beyond what the feeder carries
    with pytest.raises(UnsolvedRows) as caught:
        _check(x, y)
    assert caught.value.rows == [4, 11] and caught.value.entries[0]["field"] == "body.x"
    assert "rows [4, 11]: the network model's power flow does not converge" in caught.value.detail


def test_the_check_stops_at_the_first_block_holding_an_unsolvable_row(context, monkeypatch):
    """Such a row iterates to the solver's limit (a context of 10,000 of them on a 500-bus upload held a worker
    for 45-73 s): the rows after the first block holding one are not solved, and the refusal says so."""
    monkeypatch.setattr(readings, "CHECK_BLOCK", 16)
    x, y = context
    x[[20, 21, 37]] *= 30.0  # block [16, 32) holds two, block [32, 40) one more
    solved_rows = []

    def counting(rows):
        solved_rows.append(len(rows))
        return VoltageModel(NET)(rows)

    with pytest.raises(UnsolvedRows) as caught:
        check_readings(counting, ContextSet.build(x, y), NET.base_x, "body")
    assert caught.value.rows == [20, 21] and solved_rows == [16, 16]
    assert "rows from 32 on not solved" in caught.value.detail


def test_a_context_is_checked_once_per_process(context):
    x, y = context
    runs = []

    async def run(fn, *args):
        runs.append(fn)
        return fn(*args)

    readings = Readings(run)
    ctx = ContextSet.build(x, y)

    async def twice():
        for _ in range(2):
            assert await readings.checked(ctx, NET, "context") is ctx

    asyncio.run(twice())
    assert len(runs) == 1
    bad = y.copy()
    bad[0, 0] = 0.7
    with pytest.raises(ReadingsRefused, match=r"context\.y\[0\]\[0\]"):
        asyncio.run(readings.checked(ContextSet.build(x, bad), NET, "context"))
