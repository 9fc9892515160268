"""The same feeder numbers its buses the same way built in or uploaded (or its description says why not)."""

from __future__ import annotations

import pandapower as pp
import pandapower.networks as pn

import gridsim
from gridsim.feeders import built_in_twins, from_pandapower_json, numbering, snapshot, twin_key


def test_the_twins_are_the_built_ins_own_nets_as_uploaded():
    """built_in_twins: ieee33, known by the id its pandapower net gets numbered by index, taking offset 1."""
    ((uploaded, (name, offset, built_in)),) = built_in_twins().items()
    assert name == "ieee33" and offset == 1
    assert twin_key(snapshot(pn.case33bw())) == uploaded
    assert twin_key(gridsim.network("ieee33")) == built_in


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
