"""Bounds on uploaded values (gridsim.upload_limits), the same for both readers: what a MATPOWER upload passes,
the rebuild of its stored pandapower JSON passes; bus numbers are bounded before pandapower sizes a lookup by them.

Before: a MATPOWER line with a negative r, x or b was accepted and every later use of the network failed (its
rebuild refused the line); a bus numbered 2^25 cost every power flow half a GiB; x = 1e300 ohm/km reached the
power flow and came back as a FloatingPointError."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandapower as pp
import pytest

from gridsim import feeders
from gridsim.feeders import NetworkError
from gridsim.upload_limits import MAX_BUS_INDEX
from tests.gridsim.feeder_cases import CASE3_M, CASE4_M, small_feeder

REPO = Path(__file__).resolve().parents[2]
BRANCH_1 = "1\t2\t0.0575\t0.0293\t0\t0\t0\t0\t0\t0\t1\t-360\t360;"
BRANCH_2 = "2\t3\t0.3076\t0.1567\t0\t0\t0\t0\t0\t0\t1\t-360\t360;"


def _branch(row: str, column: int, value: str) -> str:
    """CASE3_M with one cell of a branch row (`column` from 1, as MATPOWER numbers them) replaced."""
    cells = row.rstrip(";").split("\t")
    cells[column - 1] = value
    return CASE3_M.replace(row, "\t".join(cells) + ";")


def _renumbered(old: str, new: int) -> str:
    """CASE3_M with bus 3 numbered `new` (its bus row and the branch to it)."""
    return CASE3_M.replace(f"\t{old}\t1\t0.09", f"\t{new}\t1\t0.09").replace(f"2\t{old}\t0.3076", f"2\t{new}\t0.3076")


@pytest.mark.parametrize(
    "number, name, column, value", [(1, "BR_R", 3, "-0.01"), (2, "BR_X", 4, "-0.02"), (1, "BR_B", 5, "-0.001")]
)
def test_a_negative_line_constant_is_refused_naming_its_branch_row_and_column(number, name, column, value):
    with pytest.raises(NetworkError) as info:
        feeders.from_matpower(_branch((BRANCH_1, BRANCH_2)[number - 1], column, value))
    refused = info.value
    assert refused.field == "mpc.branch"
    assert refused.problem.startswith(f"row {number}, column {column} ({name}): {value} ")
    assert "a negative number" in refused.problem and "from 0 to" in refused.expected


def test_an_absurd_line_constant_is_refused_with_its_range():
    with pytest.raises(NetworkError) as info:
        feeders.from_matpower(_branch(BRANCH_1, 4, "1e300"))
    assert info.value.field == "mpc.branch" and "row 1, column 4 (BR_X): 1e+300" in info.value.problem
    assert "over the limit of 1e+06 ohm/km" in info.value.problem
    net = small_feeder()  # the pandapower JSON reader: the same bound, named by table and column
    net.line.loc[0, "x_ohm_per_km"] = 1e300
    with pytest.raises(NetworkError) as info:
        feeders.from_pandapower_json(pp.to_json(net))
    assert info.value.field == "line.x_ohm_per_km" and info.value.expected == "a number from 0 to 1e+06 ohm/km"


@pytest.mark.parametrize("case", [CASE3_M, CASE4_M, _renumbered("3", MAX_BUS_INDEX)], ids=["case3", "case4", "max"])
def test_what_the_matpower_reader_accepts_its_stored_form_rebuilds_to(case):
    """The rebuild a server runs on every later use (service.engine.networks._rebuild) accepts it: the same buses,
    loads and lines, numbered as the upload is (the case's own numbers, with the offset the service keeps for a
    MATPOWER upload; the JSON read alone is numbered from pandapower's index)."""
    network = feeders.from_matpower(case)
    assert feeders.number_offset(network) == feeders.MATPOWER_OFFSET == 1
    again = feeders.from_pandapower_json(network.source_json, name=network.name, number_offset=1)
    assert again.bus_numbers == network.bus_numbers and again.feature_names == network.feature_names
    assert again.output_names == network.output_names and again.slack_bus == network.slack_bus
    by_index = feeders.from_pandapower_json(network.source_json, name=network.name)
    assert [b + 1 for b in by_index.bus_numbers] == list(network.bus_numbers)
    np.testing.assert_array_equal(again.base_x, network.base_x)
    np.testing.assert_allclose(again.r_ohm, network.r_ohm, rtol=1e-12)


@pytest.mark.parametrize("number", [MAX_BUS_INDEX + 1, 10**9, 2**31 - 1, 0])
def test_a_bus_number_beyond_the_bound_is_refused_naming_its_row(number):
    with pytest.raises(NetworkError) as info:
        feeders.from_matpower(_renumbered("3", number))
    assert info.value.field == "mpc.bus"
    assert info.value.problem == f"row 3, column 1: {number} is not a bus number from 1 to {MAX_BUS_INDEX}"


def test_the_largest_bus_number_is_served_as_numbered():
    network = feeders.from_matpower(_renumbered("3", MAX_BUS_INDEX))
    assert network.bus_numbers == (1, 2, MAX_BUS_INDEX)
    assert network.feature_names[:2] == ("p_mw_bus2", f"p_mw_bus{MAX_BUS_INDEX}")


def test_repeated_and_unknown_bus_numbers_are_refused_by_row():
    with pytest.raises(NetworkError, match="bus number 2 is in rows 2 and 3") as info:
        feeders.from_matpower(CASE3_M.replace("\t3\t1\t0.09", "\t2\t1\t0.09"))
    assert info.value.field == "mpc.bus"
    with pytest.raises(NetworkError, match="row 2, column 2: 7 is not a bus number of mpc.bus") as info:
        feeders.from_matpower(CASE3_M.replace("2\t3\t0.3076", "2\t7\t0.3076"))
    assert info.value.field == "mpc.branch"


def _with_bus_index(index: int, reference_only: bool = False) -> str:
    """small_feeder's bus 6 (a leaf) given pandapower index `index` in its JSON, as an attacker edits it; with
    `reference_only` only the line to it points there."""
    document = json.loads(pp.to_json(small_feeder()))
    bus, line = (json.loads(document["_object"][name]["_object"]) for name in ("bus", "line"))
    if not reference_only:
        bus["index"][bus["index"].index(6)] = index
    line["data"][-1][line["columns"].index("to_bus")] = index
    for name, split in (("bus", bus), ("line", line)):
        document["_object"][name]["_object"] = json.dumps(split)
    return json.dumps(document)


def test_a_pandapower_bus_index_beyond_the_bound_is_refused_before_any_lookup():
    """t19's upload: bus 2^25 - 1 (half a GiB in every power flow) is refused by the reader, naming the index."""
    with pytest.raises(NetworkError) as info:
        feeders.from_pandapower_json(_with_bus_index(2**25 - 1))
    assert info.value.field == "bus.index" and "(got 33554431)" in info.value.problem
    assert info.value.expected == f"a bus index in [0, {MAX_BUS_INDEX})"
    with pytest.raises(NetworkError) as info:
        feeders.from_pandapower_json(_with_bus_index(MAX_BUS_INDEX, reference_only=True))
    assert info.value.field == "line.to_bus"
    network = feeders.from_pandapower_json(_with_bus_index(MAX_BUS_INDEX - 1))  # the largest: served as numbered
    assert network.bus_numbers[-1] == MAX_BUS_INDEX - 1


def test_running_out_of_memory_in_the_power_flow_is_not_a_networks_fault():
    """A MemoryError inside pandapower's power flow propagates (the upload sandbox answers it 413 naming
    GRIDPFN_UPLOAD_MEMORY_MB) instead of a 422 quoting the allocation. The net is built in Python, past the
    readers' bound, and the power flow runs under an address-space cap, as in the sandbox."""
    code = textwrap.dedent("""
        import resource
        import pandapower as pp
        from gridsim import feeders
        net = pp.create_empty_network()
        a, b = pp.create_bus(net, 20.0), pp.create_bus(net, 20.0, index=2**28)  # lookups of 2^28 entries
        pp.create_ext_grid(net, a)
        pp.create_line_from_parameters(net, a, b, 1.0, 0.3, 0.35, 250.0, 0.4)
        pp.create_load(net, b, 0.1, 0.05)
        with open("/proc/self/status") as status:
            size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + 512 * 2**20,) * 2)
        try:
            feeders.snapshot(net)
            print("accepted")
        except MemoryError:
            print("MemoryError")
        except feeders.NetworkError as exc:
            print("NetworkError", exc)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.stdout.strip().splitlines()[-1:] == ["MemoryError"], done
