"""Hosting capacity: the largest PV a bus takes before the voltage band is at risk, from any method.

PV of s MW at a candidate bus b (unity power factor) lowers b's net active load by s * profile_t at each
of the study's load rows t (a load range or a time series). PV raises voltages, so what bounds it is the
band's upper limit: the risk of a size is

    risk_b(s) = max_t P(some bus above the limit | loads_t, PV s at b),

the worst row of the study, and P(some bus above) is bounded from above by the union over buses,
min(1, sum_k p_k): never below the true joint probability, so the capacity errs on the safe side (the
buses' voltages rise together, so the union is close to the largest p_k where one bus dominates).
The hosting capacity is the largest s in [0, max_mw] with risk_b(s) <= alpha. Since the risk rises with
s, it is found by bisection on every candidate bus at once: each step asks the method for one PV size per
unresolved bus at every row. Rows where the profile is 0 do not depend on s and are asked once.
Voltage limits only: line and transformer loading are not modelled.

A row whose power flow has no solution without new PV (voltage collapse: more load than the feeder carries)
is refused (RowsRefused naming it): no size is hosted or not there, and counting it as "over the limit"
answered 0 kW at every bus. A size whose power flow has no solution at a row that solves without it is
beyond what the feeder can carry with that PV: risk 1 (new PV only lowers the net load of a row that
solves, so the flow fails by export, the far side of the upper limit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.errors import RowsRefused
from models.predictive import Method

# The band's low limit as the method is asked it: far below any real voltage, so p_outside is P(above).
_NO_LOW_LIMIT = 1e-6
# Rows the method is asked at once (a candidate's rows times the buses still unresolved).
CHUNK_ROWS = 65_536
# Halvings of [0, max_mw] the search makes at most: its resolution is max_mw / 2**BISECTION_STEPS.
BISECTION_STEPS = 12
# Why a row without new PV is refused, and what would do instead.
NO_BASE_SOLUTION = (
    "the power flow has no solution at these loads even without new PV (voltage collapse: more load than the "
    "feeder can carry), so no PV size can be judged there"
)
BASE_EXPECTED = "load rows whose power flow solves without new PV (P in MW, Q in MVAr)"


@dataclass(frozen=True)
class HostingCapacityStudy:
    """What is asked: the rows, the PV profile, the candidates and the risk allowed."""

    loads: np.ndarray  # (m, d) the load rows in the network's feature order (P then Q per load bus), MW / MVAr
    profile: np.ndarray  # (m,) PV output per row as a share of its size, in [0, 1]
    candidates: np.ndarray  # (c,) feature positions of the candidate buses' P
    upper_pu: float = 1.05
    alpha: float = 0.05
    max_mw: float = 10.0
    tolerance_mw: float = 1e-3
    curve_points: int = 11


@dataclass(frozen=True)
class HostingCapacity:
    """Per candidate: the capacity (MW), whether max_mw still held, the risk with no PV, and the
    risk-vs-size curve (sizes from 0 to max(2 x capacity, a tenth of max_mw), capped at max_mw)."""

    capacity_mw: np.ndarray  # (c,)
    at_max: np.ndarray  # (c,) bool: the risk stayed <= alpha up to max_mw
    base_risk: np.ndarray  # (c,) risk with no PV at all (the same for every candidate)
    curve_mw: np.ndarray  # (c, curve_points)
    curve_risk: np.ndarray  # (c, curve_points)
    rows_asked: int  # query rows the method answered: the study's cost
    resolution_mw: float  # the search's step: the capacity is within this below the size where the risk passes alpha


class _Risk:
    """risk(sizes) for every candidate at once: the method asked in chunks, worst row per candidate."""

    def __init__(self, method: Method, fitted: object, study: HostingCapacityStudy):
        self.method, self.fitted, self.study = method, fitted, study
        lit = study.profile > 0
        self.lit_rows = study.loads[lit]
        self.lit_profile = study.profile[lit]
        self.rows_asked = 0
        base = self._row_risk(study.loads, refuse=True)  # every row without new PV: RowsRefused where none solves
        self.base_risk = float(base.max()) if len(base) else 0.0
        self.dark_risk = float(base[~lit].max()) if (~lit).any() else 0.0

    def _row_risk(self, rows: np.ndarray, refuse: bool = False) -> np.ndarray:
        """(n,) P(some bus above the limit) per row, union bound. A row whose power flow has no solution is
        risk 1 (with new PV: more than the feeder can carry), or with `refuse` (rows without new PV) RowsRefused
        naming every such row in `rows`' numbering."""
        out = np.ones(len(rows))
        refused: list[int] = []
        for start in range(0, len(rows), CHUNK_ROWS):
            block = np.arange(start, min(start + CHUNK_ROWS, len(rows)))
            while block.size:
                try:
                    summary = self.method.summarize(self.fitted, rows[block], (), (_NO_LOW_LIMIT, self.study.upper_pu))
                except RowsRefused as exc:
                    refused += block[exc.rows].tolist()
                    block = np.delete(block, exc.rows)  # those stay at 1; the rest are asked again
                    continue
                assert summary.p_outside is not None
                out[block] = np.minimum(summary.p_outside.sum(axis=1), 1.0)
                break
        self.rows_asked += len(rows)
        if refuse and refused:
            raise RowsRefused("loads", sorted(refused), NO_BASE_SOLUTION, BASE_EXPECTED)
        return out

    def __call__(self, candidates: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """(len(candidates),) the worst row's risk with PV sizes[i] MW at candidates[i]."""
        m = len(self.lit_rows)
        if m == 0:
            return np.full(len(candidates), self.dark_risk)
        rows = np.repeat(self.lit_rows[None], len(candidates), axis=0)  # (c, m, d)
        rows[np.arange(len(candidates)), :, candidates] -= sizes[:, None] * self.lit_profile[None, :]
        risk = self._row_risk(rows.reshape(-1, rows.shape[-1])).reshape(len(candidates), m).max(axis=1)
        out: np.ndarray = np.maximum(risk, self.dark_risk)
        return out


def passes(study: HostingCapacityStudy) -> int:
    """How many times the search asks the method for every candidate's rows, at most: the size check, the
    bisection, the curve. A study's cost in query rows is this x candidates x rows."""
    return 2 + BISECTION_STEPS + study.curve_points


def check_base_rows(method: Method, fitted: object, study: HostingCapacityStudy) -> float:
    """The risk without new PV (the worst row's), or RowsRefused naming (0-based) every row whose power flow
    has no solution without new PV: what `hosting_capacity` checks first, for a job to refuse before it runs."""
    return _Risk(method, fitted, study).base_risk


def hosting_capacity(method: Method, fitted: object, study: HostingCapacityStudy) -> HostingCapacity:
    """The study's answer (see the module docstring); RowsRefused (field `loads`, 0-based rows) where a row has
    no power flow without new PV."""
    risk = _Risk(method, fitted, study)
    c = len(study.candidates)
    base = risk.base_risk if c else 0.0
    lo, hi = np.zeros(c), np.full(c, float(study.max_mw))
    tolerance = max(study.tolerance_mw, study.max_mw / 2**BISECTION_STEPS)
    at_max = risk(study.candidates, hi) <= study.alpha if base <= study.alpha else np.zeros(c, dtype=bool)
    lo[at_max] = hi[at_max]
    open_ = np.flatnonzero(~at_max) if base <= study.alpha else np.zeros(0, dtype=int)
    while open_.size and float(np.max(hi[open_] - lo[open_])) > tolerance:
        mid = 0.5 * (lo[open_] + hi[open_])
        held = risk(study.candidates[open_], mid) <= study.alpha
        lo[open_[held]] = mid[held]
        hi[open_[~held]] = mid[~held]
        open_ = open_[hi[open_] - lo[open_] > tolerance]
    top = np.minimum(np.maximum(2.0 * lo, 0.1 * study.max_mw), study.max_mw)
    curve_mw = top[:, None] * np.linspace(0.0, 1.0, study.curve_points)[None, :]
    flat = risk(np.repeat(study.candidates, study.curve_points), curve_mw.ravel()) if c else np.zeros(0)
    return HostingCapacity(
        capacity_mw=lo,
        at_max=at_max,
        base_risk=np.full(c, base),
        curve_mw=curve_mw,
        curve_risk=flat.reshape(c, study.curve_points),
        rows_asked=risk.rows_asked,
        resolution_mw=tolerance,
    )
