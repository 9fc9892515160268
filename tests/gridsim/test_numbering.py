"""The same feeder numbers its buses the same way built in or uploaded (or its description says why not)."""

from __future__ import annotations

import pandapower as pp
import pandapower.networks as pn

import gridsim
from gridsim.feeders import BUILT_IN_TWINS, from_pandapower_json, network_id, numbering, snapshot


def test_the_twin_ids_are_what_the_nets_compute_now():
    """BUILT_IN_TWINS pins two content ids per built-in; they must be today's (a changed snapshot moves them)."""
    (uploaded, (name, offset, built_in)), *_ = BUILT_IN_TWINS.items()
    assert name == "ieee33" and offset == 1
    assert network_id(snapshot(pn.case33bw())) == uploaded
    assert network_id(gridsim.network("ieee33")) == built_in


def test_an_uploaded_case33bw_is_numbered_as_the_built_in_ieee33():
    ieee33 = gridsim.network("ieee33")
    upload = from_pandapower_json(pp.to_json(pn.case33bw()))
    assert upload.feature_names == ieee33.feature_names and upload.output_names == ieee33.output_names
    assert upload.slack_bus == 1 and upload.bus_name(18) == ieee33.bus_name(18)
    assert from_pandapower_json(upload.source_json, name="again").feature_names == ieee33.feature_names  # rebuilt
    assert numbering(upload, uploaded=True).startswith("as the built-in ieee33")


def test_a_changed_case33bw_keeps_pandapower_numbers_and_says_why():
    net = pn.case33bw()
    net.load.loc[0, "p_mw"] *= 1.5
    upload = from_pandapower_json(pp.to_json(net))
    assert upload.slack_bus == 0 and upload.feature_names[0] == "p_mw_bus1"
    why = numbering(upload, uploaded=True)
    assert "pandapower bus index" in why and "only when it is that built-in unchanged" in why
