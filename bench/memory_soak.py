"""Resident memory over many mixed requests, with freed memory kept for reuse (models.memory) and without.

Each mode runs in its own process (the allocator setting is process-wide) on the same seeded stream
of requests: context sizes 16-2,000 rows, 1-10,000 queries, transformer-dva and transformer-dva-fast
in turn, two in three answered as the service does (`summarize`: mean, std, quantiles, band) and one
in three as full predictive distributions (`predict`). Prints the resident set every `--every`
requests, the peak and the wall time of each mode side by side.

    .venv/bin/python bench/memory_soak.py [--requests 720] [--every 40]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402

MODELS = ("transformer-dva", "transformer-dva-fast")


def _resident_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def soak(retain: bool, requests: int, every: int) -> dict:
    """One mode, in this process: the resident set every `every` requests, the peak, the seconds."""
    from models.registry import load_registry

    registry = load_registry(network="ieee33", retain_memory=retain)
    methods = [registry.models[name].method for name in MODELS]
    rng = np.random.default_rng(0)
    x = rng.uniform(0.7, 1.3, size=(12_000, 64))
    w = rng.normal(size=(64, 32)) * 1e-3
    y = 1.0 - 0.1 * x @ np.abs(w) + 1e-5 * (x @ w) ** 2  # smooth, mildly nonlinear voltages
    resident, started = [], time.perf_counter()
    for i in range(requests):
        method = methods[i % len(methods)]
        n, m = int(rng.integers(16, 2_000)), int(rng.integers(1, 10_000))
        fitted = method.fit(x[:n], y[:n])
        queries = x[2_000 : 2_000 + m]
        if i % 3 == 0:
            method.predict(fitted, queries).mean  # noqa: B018: the full distribution, its mean computed
        else:
            method.summarize(fitted, queries, levels=(0.05, 0.5, 0.95), band=(0.95, 1.05))
        if (i + 1) % every == 0:
            resident.append(round(_resident_mib()))
    return {"resident_mib": resident, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=720)
    parser.add_argument("--every", type=int, default=40)
    parser.add_argument("--mode", choices=["retain", "default"], help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(soak(args.mode == "retain", args.requests, args.every)))
        return
    results = {}
    for mode in ("default", "retain"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--requests", str(args.requests),
                              "--every", str(args.every)], capture_output=True, text=True, check=True)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print(report.provenance("bench/memory_soak.py"))
    print(f"resident set (MiB) after every {args.every} of {args.requests} requests:")
    for mode, label in (("default", "glibc default"), ("retain", "freed memory kept (GRIDPFN_RETAIN_FREED_MEMORY)")):
        r = results[mode]
        print(f"  {label:48s} {r['resident_mib']}  peak {r['peak_mib']} MiB, {r['seconds']} s")
    d, k = results["default"], results["retain"]
    print(f"kept / default: peak {k['peak_mib'] / d['peak_mib']:.2f}x, final {k['resident_mib'][-1] / d['resident_mib'][-1]:.2f}x, "
          f"time {k['seconds'] / d['seconds']:.2f}x")


if __name__ == "__main__":
    main()
