"""`gridpfn simulate`: sample and solve scenarios, write them to Parquet or CSV.

The file is written to a temporary name in the target directory and renamed into place, so a
crashed or interrupted run never leaves a half-written file behind under the final name.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

FORMATS = {".parquet": "parquet", ".csv": "csv"}


def output_format(path: str | os.PathLike) -> str:
    """'parquet' or 'csv' from the file extension; anything else is a ValueError."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"output: expected a path ending in {' or '.join(FORMATS)}, got {str(path)!r}")
    return FORMATS[suffix]


def write_frame_atomic(frame, path: str | os.PathLike) -> None:
    """Write a DataFrame as Parquet/CSV (by extension) via temp file + rename."""
    kind = output_format(path)
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ValueError(f"output: directory {str(directory)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        if kind == "parquet":
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file ordinary permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import gridsim

    output_format(args.output)  # fail before the work, not after
    options = dict(load_level=args.load_level, pf_spread=args.pf_spread, correlation=args.correlation)
    dg_mw = args.dg_mw or []
    if bool(args.dg_bus) != bool(dg_mw):
        raise ValueError("dg_bus, dg_mw: expected both --dg-bus and --dg-mw, or neither")
    if args.dg_bus:
        options.update(dg_buses=tuple(args.dg_bus), dg_mw=tuple(dg_mw) if len(dg_mw) > 1 else dg_mw[0])
    with tqdm(total=args.n, unit="scen", desc="simulate", disable=None if not args.progress else False) as bar:
        result = gridsim.simulate(
            args.n,
            args.delta,
            args.seed,
            network=args.network,
            solver=args.solver,
            device=args.device,
            progress=bar.update,
            **options,
        )
    write_frame_atomic(result.to_frame(angles=args.angles), args.output)
    print(f"wrote {result.n} scenarios ({result.n_failed} not converged) to {args.output}")
    return 0


def register(subparsers) -> None:
    """Add the `simulate` sub-command to the `gridpfn` parser."""
    p = subparsers.add_parser(
        "simulate",
        help="sample load scenarios and solve AC power flow",
        description="Sample load scenarios around the feeder's base load and solve them; "
        "writes features, vm_pu per bus and a `converged` column.",
    )
    p.add_argument("--network", default="ieee33", help="feeder name (default ieee33)")
    p.add_argument("--delta", type=float, default=0.1, help="relative load perturbation, 0 <= delta < 1 (default 0.1)")
    p.add_argument("-n", type=int, default=5000, help="number of scenarios (default 5000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("-o", "--output", required=True, help="output file, .parquet or .csv")
    p.add_argument("--solver", default="batched", help="batched (default) or pandapower")
    p.add_argument("--device", default="cpu", help="torch device for the batched solver (default cpu)")
    p.add_argument("--load-level", type=float, default=1.0, help="global load multiplier (default 1)")
    p.add_argument("--pf-spread", type=float, default=0.0, help="extra independent Q factor in [1-s, 1+s] (default 0)")
    p.add_argument("--correlation", type=float, default=0.0, help="common-factor share of the perturbation, 0..1")
    p.add_argument("--dg-bus", type=int, action="append", default=[], help="IEEE bus with generation (repeatable)")
    p.add_argument(
        "--dg-mw",
        type=float,
        action="append",
        default=None,
        help="generation in MW: once for all --dg-bus, or once per --dg-bus",
    )
    p.add_argument("--angles", action="store_true", help="also write va_degree_bus* columns")
    p.add_argument("--progress", action="store_true", help="always show the progress bar (default: only on a terminal)")
    p.set_defaults(func=_run)
