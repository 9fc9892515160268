"""How often a script that reads a Parquet answer with pyarrow dies at interpreter exit, by the source it hands the
reader: a Python file object (`io.BytesIO`, as the client did) against a native buffer (`pa.BufferReader`, as it
does now). Each run is a fresh interpreter that reads a 100-row x 194-column answer (the README's batch result's
shape) and exits; an abort ("terminate called without an active exception", SIGABRT) is a pyarrow I/O thread taking
the GIL during finalisation (apache/arrow#34314). Runs alternate between the two sources, so load affects both alike.

    .venv/bin/python bench/pyarrow_exit_abort.py [--runs 150]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

READER = """
import io, sys
import pyarrow as pa, pyarrow.parquet as pq
data = open(sys.argv[1], "rb").read()
source = io.BytesIO(data) if sys.argv[2] == "python-file" else pa.BufferReader(data)
assert pq.read_table(source).to_pandas().shape == (100, 194)
"""
SOURCES = ("python-file", "native-buffer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=150, help="interpreters per source")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        answer = Path(scratch) / "answer.parquet"
        rng = np.random.default_rng(0)
        pq.write_table(pa.table({f"c{i}": rng.random(100) for i in range(194)}), answer)
        aborts = dict.fromkeys(SOURCES, 0)
        other = dict.fromkeys(SOURCES, 0)
        for _ in range(args.runs):
            for source in SOURCES:
                code = subprocess.run(
                    [sys.executable, "-c", READER, str(answer), source], capture_output=True
                ).returncode
                aborts[source] += code == -6
                other[source] += code not in (0, -6)
    for source in SOURCES:
        print(f"{source:>13}: {aborts[source]} of {args.runs} runs aborted at exit ({other[source]} failed otherwise)")


if __name__ == "__main__":
    main()
