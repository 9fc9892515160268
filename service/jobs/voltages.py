"""network-fit's and physics-fit's power flow solved once per row of a batch job, not twice.

Every network-fit and physics-fit answer reads the network model's voltages at its rows, and the power-flow
check before the job's first chunk (service.jobs.chunks) must solve the same rows to refuse those without a
solution: the check keeps what it solved, a file per chunk, and the chunk answers from it (the second solve was
15-20 % of a network-fit job). A file, not memory: the check passes over the whole input before the first chunk, and a job may
hold GRIDPFN_JOB_MAX_ROWS rows (8 bytes per row and bus). It lies in the job's directory (JobFiles.voltages:
removed with the parts when the job ends, and by the chunk once its part is written), .npz of float64 arrays
read without pickle.

Bit for bit the answers of before: a block of rows solved together converges together (the solver iterates
until every row of the block is within tolerance), so the check solves the very blocks the chunk answers, one
array per block in the file; a process that cuts the chunk otherwise (another GRIDPFN_WORKER_THREADS, a Dask
worker) finds other block sizes and solves its rows itself, as does a chunk whose file is gone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from service.jobs.results import JobFiles, write_whole


class BlockVoltages:
    """The network model's voltages at one block of rows, for a method that asks them of its `voltage_model`:
    as given (`v`: the check's, replayed in the chunk) or kept as first solved (recorded by the check), for the
    whole block (network-fit) or consecutive runs of its rows in the order asked (physics-fit's guard: blocks of
    GUARD_BLOCK); any other rows are solved."""

    def __init__(self, model: Callable[[np.ndarray], np.ndarray], rows: np.ndarray, v: np.ndarray | None = None):
        self.model, self.rows = model, rows
        self.solved = None if v is None else np.asarray(v, dtype=np.float64)
        self.filled = np.full(len(rows), v is not None)
        self.cursor = 0  # where the next run is looked for first: the rows are asked in order

    @property
    def v(self) -> np.ndarray | None:
        """The voltages at every row of the block, or None if some row was never asked."""
        return self.solved if self.filled.all() else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        start = self._run(x)
        if start is None:
            return self.model(x)
        end = start + len(x)
        self.cursor = end
        if not self.filled[start:end].all():
            solved = np.asarray(self.model(x), dtype=np.float64)
            if self.solved is None:
                self.solved = np.empty((len(self.rows), solved.shape[1]))
            self.solved[start:end], self.filled[start:end] = solved, True
        assert self.solved is not None
        return self.solved[start:end].copy()

    def _run(self, x: np.ndarray) -> int | None:
        """Where rows x lie in the block as a consecutive run (None: they do not)."""
        if x.ndim != 2 or not len(x) or x.shape[1] != self.rows.shape[1] or len(x) > len(self.rows):
            return None
        candidates = [self.cursor] + np.flatnonzero((self.rows == x[0]).all(axis=1)).tolist()
        for start in candidates:
            if start + len(x) <= len(self.rows) and np.array_equal(self.rows[start : start + len(x)], x):
                return int(start)
        return None


def solving_once(method: Any, rows: np.ndarray, v: np.ndarray | None = None) -> tuple[Any, BlockVoltages | None]:
    """`method` answering `rows` through a BlockVoltages (a copy: the job's method is shared by its blocks'
    threads), and that; (`method`, None) for a method that asks no power flow of its own (a checkpoint's guard
    asks only at far rows, which it is left to solve)."""
    from models.network_fit import NetworkFitMethod
    from models.off_context import OffContextGuard

    if not isinstance(method, NetworkFitMethod) and not (isinstance(method, OffContextGuard) and method.within_reach):
        return method, None
    voltages = BlockVoltages(method.voltage_model, rows, v)
    at_rows = copy.copy(method)
    at_rows.voltage_model = voltages
    return at_rows, voltages


def save(files: JobFiles, index: int, blocks: list[np.ndarray | None]) -> None:
    """Chunk `index`'s voltages, one array per block, whole or not at all; nothing unless every block has them
    (a method other than network-fit records none)."""
    kept = [v for v in blocks if v is not None]
    if not kept or len(kept) < len(blocks):
        return

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:  # a path would get ".npz" appended
            np.savez(handle, *kept)

    write_whole(files.voltages(index), write)


def load(files: JobFiles, index: int, blocks: list[np.ndarray]) -> list[np.ndarray | None]:
    """Chunk `index`'s voltages per block where the check left them for these very blocks, else None each."""
    try:
        with np.load(files.voltages(index), allow_pickle=False) as saved:
            kept = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    except FileNotFoundError:
        return [None] * len(blocks)
    if [len(v) for v in kept] != [len(b) for b in blocks]:
        return [None] * len(blocks)
    return list(kept)


def discard(files: JobFiles, index: int) -> None:
    """Chunk `index` is written: its voltages will not be read again (a chunk run twice solves them itself)."""
    files.voltages(index).unlink(missing_ok=True)
