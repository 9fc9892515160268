"""Resident memory and the cold path, with freed memory kept for reuse (models.memory) and without.

Each mode runs in its own process (the allocator setting is process-wide), twice, interleaved:
1. the cold path, repeated: transformer-dva on a new 500-row IEEE 33 context (delta 30 %, batched
   solver) with 4500 queries, fit + predict (the full distributions) and fit + summarize (what the
   service answers: mean, std, quantiles, band), `--rounds` times; the median of each;
2. the same seeded stream of mixed requests: context sizes 16-2,000 rows, 1-10,000 queries,
   transformer-dva and transformer-dva-fast in turn, two in three by `summarize`, one in three by
   `predict`; the resident set every `--every` requests, the peak and the wall time.

    .venv/bin/python bench/memory_soak.py [--requests 720] [--every 40] [--rounds 15]
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


def cold_path(method, rounds: int) -> dict:
    """Median seconds of fit + predict and of fit + summarize on a new 500-row context, 4500 queries."""
    from bench.accuracy import _dataset, _split

    cx, cy, qx, _ = _split(*_dataset(0.3, 0, "batched"))
    times = {"predict": [], "summarize": []}
    for _ in range(rounds):
        for how in times:
            started = time.perf_counter()
            fitted = method.fit(cx, cy)
            if how == "predict":
                method.predict(fitted, qx)
            else:
                method.summarize(fitted, qx, levels=(0.05, 0.5, 0.95), band=(0.95, 1.05))
            times[how].append(time.perf_counter() - started)
    return {how: round(float(np.median(t)), 4) for how, t in times.items()}


def soak(retain: bool, requests: int, every: int, rounds: int) -> dict:
    """One mode, in this process: the cold path's medians, then the resident set every `every`
    requests, the peak and the seconds."""
    from models.registry import load_registry

    registry = load_registry(network="ieee33", retain_memory=retain)
    methods = [registry.models[name].method for name in MODELS]
    cold = cold_path(methods[0], rounds)
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
            _ = method.predict(fitted, queries).mean  # the full distribution, its mean computed
        else:
            method.summarize(fitted, queries, levels=(0.05, 0.5, 0.95), band=(0.95, 1.05))
        if (i + 1) % every == 0:
            resident.append(round(_resident_mib()))
    return {
        "cold_path_s": cold,
        "resident_mib": resident,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=720)
    parser.add_argument("--every", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=15, help="cold-path rounds per process")
    parser.add_argument("--mode", choices=["retain", "default"], help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    for name in ("requests", "every", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected a positive integer, got {getattr(args, name)}")
    if args.every > args.requests:
        parser.error(f"--every: expected at most --requests ({args.requests}), got {args.every}")
    if args.mode:
        print(json.dumps(soak(args.mode == "retain", args.requests, args.every, args.rounds)))
        return
    runs = {"default": [], "retain": []}
    for mode in ("default", "retain") * 2:  # interleaved: host drift hits both
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--mode",
                mode,
                "--requests",
                str(args.requests),
                "--every",
                str(args.every),
                "--rounds",
                str(args.rounds),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    labels = (("default", "glibc default"), ("retain", "freed memory kept (GRIDPFN_RETAIN_FREED_MEMORY)"))
    print(report.provenance("bench/memory_soak.py"))
    print(
        f"cold path, transformer-dva, new 500-row context + 4500 queries, median of {args.rounds} rounds per process (s):"
    )
    for mode, label in labels:
        print(
            f"  {label:48s} fit + predict {[r['cold_path_s']['predict'] for r in runs[mode]]}, "
            f"fit + summarize {[r['cold_path_s']['summarize'] for r in runs[mode]]}"
        )
    print(f"resident set (MiB) after every {args.every} of {args.requests} requests:")
    for mode, label in labels:
        for r in runs[mode]:
            print(f"  {label:48s} {r['resident_mib']}  peak {r['peak_mib']} MiB, {r['seconds']} s")
    d, k = runs["default"][-1], runs["retain"][-1]
    print(
        f"kept / default: peak {k['peak_mib'] / d['peak_mib']:.2f}x, final {k['resident_mib'][-1] / d['resident_mib'][-1]:.2f}x, "
        f"time {k['seconds'] / d['seconds']:.2f}x"
    )


if __name__ == "__main__":
    main()
