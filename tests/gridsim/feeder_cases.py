"""Small user feeders for the network tests (gridsim and service)."""

import pandapower as pp

# a 3-bus radial MATPOWER case (version 2), as a user would upload it
CASE3_M = """function mpc = case3r
mpc.version = '2';
mpc.baseMVA = 10;
mpc.bus = [
	1	3	0	0	0	0	1	1	0	12.66	1	1.1	0.9;
	2	1	0.1	0.06	0	0	1	1	0	12.66	1	1.1	0.9;
	3	1	0.09	0.04	0	0	1	1	0	12.66	1	1.1	0.9;
];
mpc.gen = [
	1	0	0	10	-10	1	100	1	10	0;
];
mpc.branch = [
	1	2	0.0575	0.0293	0	0	0	0	0	0	1	-360	360;
	2	3	0.3076	0.1567	0	0	0	0	0	0	1	-360	360;
];
"""
# the same with a fourth bus, without load, hanging off bus 2
CASE4_M = (
    CASE3_M.replace("case3r", "case4r")
    .replace("0.9;\n];\nmpc.gen", "0.9;\n\t4\t1\t0\t0\t0\t0\t1\t1\t0\t12.66\t1\t1.1\t0.9;\n];\nmpc.gen", 1)
    .replace("360;\n];\n", "360;\n\t2\t4\t0.2\t0.1\t0\t0\t0\t0\t0\t0\t1\t-360\t360;\n];\n", 1)
)


def small_feeder():
    """20 kV feeder: a bus without load, two loads on one bus, an sgen, a shunt, cable charging,
    a closed bus-bus switch (fused), an open line switch (a tie line) and an open bus-bus switch."""
    net = pp.create_empty_network(sn_mva=1.0)
    b = [pp.create_bus(net, vn_kv=20.0, name=f"n{i}") for i in range(7)]
    pp.create_ext_grid(net, b[0], vm_pu=1.02)
    kw = dict(r_ohm_per_km=0.3, x_ohm_per_km=0.35, c_nf_per_km=250.0, max_i_ka=0.4)
    pp.create_line_from_parameters(net, b[0], b[1], 2.0, **kw)
    pp.create_line_from_parameters(net, b[1], b[2], 1.5, **kw)
    pp.create_line_from_parameters(net, b[1], b[3], 3.0, **kw)
    tie = pp.create_line_from_parameters(net, b[2], b[3], 1.0, **kw)
    pp.create_switch(net, b[3], tie, et="l", closed=False)
    pp.create_switch(net, b[3], b[4], et="b", closed=True)  # bus 4 fuses into bus 3
    pp.create_switch(net, b[2], b[5], et="b", closed=False)  # bus 5: dead, no load
    pp.create_load(net, b[2], p_mw=0.4, q_mvar=0.1)
    pp.create_load(net, b[3], p_mw=0.3, q_mvar=0.1)
    pp.create_load(net, b[4], p_mw=0.2, q_mvar=0.05, scaling=0.5)  # summed into bus 3
    pp.create_sgen(net, b[2], p_mw=0.15)
    pp.create_shunt(net, b[3], q_mvar=-0.05, p_mw=0.0)
    pp.create_line_from_parameters(net, b[3], b[6], 0.5, **kw)  # bus 6: no load
    return net
