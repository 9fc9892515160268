"""`gridpfn simulate` through the real entry point: Parquet and CSV written, read back."""

import numpy as np
import pandas as pd
import pytest

import gridsim
from service.commands.cli import main


@pytest.mark.parametrize("suffix, reader", [(".parquet", pd.read_parquet), (".csv", pd.read_csv)])
def test_simulate_writes_file_matching_the_api(tmp_path, suffix, reader, capsys):
    out = tmp_path / f"scenarios{suffix}"
    assert main(["simulate", "--network", "ieee33", "--delta", "0.1", "-n", "300", "--seed", "0", "-o", str(out)]) == 0
    assert "wrote 300 scenarios (0 not converged)" in capsys.readouterr().out
    frame = reader(out)
    expected = gridsim.simulate(300, 0.1, 0).to_frame()
    assert list(frame.columns) == list(expected.columns)
    assert frame["converged"].all()
    assert np.allclose(
        frame.drop(columns="converged").to_numpy(), expected.drop(columns="converged").to_numpy(), rtol=0, atol=1e-15
    )
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temp file left behind


def test_simulate_options_and_failures_are_written_not_dropped(tmp_path):
    out = tmp_path / "s.parquet"
    args = [
        "simulate",
        "-n",
        "40",
        "--delta",
        "0.2",
        "--seed",
        "1",
        "-o",
        str(out),
        "--angles",
        "--load-level",
        "6",
        "--dg-bus",
        "18",
        "--dg-mw",
        "0.1",
        "--correlation",
        "0.3",
        "--pf-spread",
        "0.1",
    ]
    assert main(args) == 0
    frame = pd.read_parquet(out)
    assert len(frame) == 40 and not frame["converged"].any()
    assert frame.filter(like="vm_pu_").isna().all().all() and "va_degree_bus2" in frame.columns
    expected = gridsim.simulate(40, 0.2, 1, load_level=6, dg_buses=(18,), dg_mw=0.1, correlation=0.3, pf_spread=0.1)
    assert np.array_equal(frame[list(gridsim.network().feature_names)].to_numpy(), expected.x)


@pytest.mark.parametrize(
    "args, message",
    [
        (["-o", "{tmp}/s.txt"], "output: expected a path ending in .parquet or .csv"),
        (["-o", "{tmp}/missing/s.csv"], "output: directory"),
        (["-o", "{tmp}/s.csv", "--delta", "1.5"], "delta: expected"),
        (["-o", "{tmp}/s.csv", "--network", "x"], "network: expected one of"),
        (["-o", "{tmp}/s.csv", "--dg-bus", "5"], "dg_bus, dg_mw"),
    ],
)
def test_simulate_bad_arguments_exit_2_with_message(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "-n", "3"] + [a.format(tmp=tmp_path) for a in args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_simulate_with_pandapower_solver_matches_batched(tmp_path):
    out_pp, out_b = tmp_path / "pp.csv", tmp_path / "b.csv"
    assert (
        main(["simulate", "-n", "3", "--delta", "0.5", "--seed", "4", "--solver", "pandapower", "-o", str(out_pp)]) == 0
    )
    assert main(["simulate", "-n", "3", "--delta", "0.5", "--seed", "4", "-o", str(out_b)]) == 0
    vm_pp, vm_b = pd.read_csv(out_pp).filter(like="vm_pu_"), pd.read_csv(out_b).filter(like="vm_pu_")
    assert vm_pp.shape == (3, 32) and np.abs(vm_pp.to_numpy() - vm_b.to_numpy()).max() <= 1e-9
