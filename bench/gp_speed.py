"""Exact-GP speed and accuracy on IEEE 33-bus power flow: all 32 buses, 500 context points, 4500 queries.

Target: fit + predict <= 30 s on the 2-core CPU (scikit-learn needs ~5 min per bus). Also prints the
max-over-buses MAE next to ordinary least squares, the baseline any surrogate has to beat here, and
the 95 % interval coverage. OMP_WAIT_POLICY=PASSIVE is set before torch loads: with spinning OpenMP
threads on a shared, oversubscribed machine every batched LAPACK call gets several times slower.
Run: .venv/bin/python bench/gp_speed.py [--deltas 0.05 0.5] [--linear-term off|on|both] [--full]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import logging  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from models.gp import ExactGP  # noqa: E402

N_CONTEXT, N_QUERY = 500, 4500


def _pandapower_standin(n: int, delta: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Loads uniformly within +-delta of base, one AC power flow per sample (if gridsim is missing)."""
    import pandapower as pp
    import pandapower.networks as pn

    net = pn.case33bw()
    load = net.load.sort_values("bus")
    base_p, base_q = load.p_mw.to_numpy(), load.q_mvar.to_numpy()
    rng = np.random.default_rng(seed)
    x, vm = np.empty((n, 64)), np.empty((n, 32))
    for i in range(n):
        p = base_p * rng.uniform(1 - delta, 1 + delta, 32)
        q = base_q * rng.uniform(1 - delta, 1 + delta, 32)
        net.load.loc[load.index, "p_mw"], net.load.loc[load.index, "q_mvar"] = p, q
        pp.runpp(net, init="results" if i else "auto", numba=False)
        x[i], vm[i] = np.concatenate([p, q]), net.res_bus.vm_pu.to_numpy()[1:33]
    return x, vm


def load_data(n: int, delta: float, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(x, vm_pu, source): gridsim.simulate when available, converged rows only."""
    try:
        from gridsim import simulate
    except ImportError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("pandapower").setLevel(logging.ERROR)
            x, vm = _pandapower_standin(n, delta, seed)
        return x, vm, "pandapower stand-in (gridsim.simulate not available)"
    data = simulate(n, delta, seed)
    ok = np.asarray(data.converged, dtype=bool)
    source = f"gridsim.simulate ({int((~ok).sum())} non-converged rows dropped)"
    return np.asarray(data.x)[ok], np.asarray(data.vm_pu)[ok], source


def ols_predict(cx: np.ndarray, cy: np.ndarray, qx: np.ndarray) -> np.ndarray:
    design = np.hstack([cx, np.ones((len(cx), 1))])
    coef, *_ = np.linalg.lstsq(design, cy, rcond=None)
    return np.hstack([qx, np.ones((len(qx), 1))]) @ coef


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=float, nargs="+", default=[0.05, 0.5])
    parser.add_argument("--linear-term", choices=["off", "on", "both"], default="both")
    parser.add_argument(
        "--full",
        action="store_true",
        help="also optimise on all 500 points (opt_points=None, max_iter 100): slow, for reference",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = [
        (f"linear_term={lin}", {"linear_term": lin})
        for lin in {"off": [False], "on": [True], "both": [False, True]}[args.linear_term]
    ]
    if args.full:
        configs.append(("full-data optimisation", {"opt_points": None, "max_iter": 100}))
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY="
        f"{os.environ.get('OMP_WAIT_POLICY')}, load average {os.getloadavg()[0]:.1f}; "
        f"context {N_CONTEXT}, queries {N_QUERY}, 64 inputs, 32 outputs; target fit+predict <= 30 s"
    )
    for delta in args.deltas:
        t0 = time.perf_counter()
        x, vm, source = load_data(N_CONTEXT + N_QUERY, delta, args.seed)
        print(f"\ndelta={delta}: data from {source} in {time.perf_counter() - t0:.1f} s")
        cx, cy, qx, qy = x[:N_CONTEXT], vm[:N_CONTEXT], x[N_CONTEXT:], vm[N_CONTEXT:]
        ols_mae = np.abs(ols_predict(cx, cy, qx) - qy).mean(0).max()
        print(f"  {'OLS (with intercept)':24s} max-bus MAE {ols_mae:.3e}")
        for label, options in configs:
            gp = ExactGP(**options)
            t1 = time.perf_counter()
            fitted = gp.fit(cx, cy)
            t2 = time.perf_counter()
            pred = gp.predict(fitted, qx)
            t3 = time.perf_counter()
            mae = np.abs(pred.mean - qy).mean(0).max()
            low, high = pred.interval(0.95)
            cover = ((qy >= low) & (qy <= high)).mean()
            print(
                f"  {'GP ' + label:24s} max-bus MAE {mae:.3e} ({mae / ols_mae:.2f}x OLS)  fit {t2 - t1:6.1f} s  "
                f"predict {t3 - t2:5.1f} s  total {t3 - t1:6.1f} s  L-BFGS iters {fitted.n_iter:3d} "
                f"(converged {fitted.converged})  95% coverage {cover:.3f}  "
                f"mean LML(std) {fitted.log_marginal_likelihood_standardized.mean():.1f}"
            )


if __name__ == "__main__":
    main()
