"""The per-bus risk summary a planner reads, accumulated block by block: the one kernel behind
POST /v1/studies' `summary` and a batch job's GET /v1/batch-jobs/{id}/summary.

Per output bus: the largest and the mean P(|V| outside the band) over the rows and the row where it is
largest (among rows of equal P, say 1 on an overloaded feeder, the one whose quantiles lie farthest from 1
p.u.; then the first), the expected hours outside the band (the sum of P(outside) x the hours a row stands for, per
group of rows: a study's scenario and year; the largest group's, with its std were the rows' outcomes
independent), and the lowest low quantile and highest high quantile of |V|.

Why blocks: a batch result has millions of rows and is read a row group at a time, never whole; a study
hands its rows in one block. Fed its rows in one `add`, the accumulator does the same float operations a
one-shot numpy computation does (sum, max and argmax over axis 0, then the divisions), so a study's answer
does not move by a bit; over several blocks the sums are added block by block (the last bits may differ
from a one-shot sum) and full ties keep the first row, as argmax does.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BusSummary:
    """Per output bus (k,) arrays; the P(outside) ones None when no band was asked, the quantile extremes
    None when no quantile was."""

    rows: int
    max_p_outside: np.ndarray | None
    mean_p_outside: np.ndarray | None
    worst_row: np.ndarray | None  # (k,) int: a row where P(outside) is largest (ties: farthest from nominal)
    hours_outside: np.ndarray | None  # the largest expected hours over the groups; None without hours per row
    hours_outside_std: np.ndarray | None  # its std if the rows' outcomes were independent (a lower bound)
    lowest: np.ndarray | None  # the lowest quantile's smallest value
    highest: np.ndarray | None  # the highest quantile's largest value


@dataclass
class _Group:
    """A group's running sums of P(outside) and of its Bernoulli variance P(1 - P)."""

    expected: np.ndarray
    variance: np.ndarray


class BusSummaryAccumulator:
    """`add` blocks of rows in order, then `result`. `hours_per_row`: the hours each row stands for (a time
    series' step); None leaves the hours out."""

    def __init__(self, hours_per_row: float | None = None) -> None:
        self.hours_per_row = hours_per_row
        self.rows = 0
        self._max: np.ndarray | None = None
        self._worst: np.ndarray | None = None
        self._far: np.ndarray | None = None  # the worst row's distance from nominal
        self._sum: np.ndarray | None = None
        self._groups: dict[Hashable, _Group] = {}  # first-seen order: ties between groups go to the first
        self._lowest: np.ndarray | None = None
        self._highest: np.ndarray | None = None

    def add(
        self,
        p_outside: np.ndarray | None,
        low: np.ndarray | None,
        high: np.ndarray | None,
        groups: Sequence[Hashable] | None = None,
    ) -> None:
        """One block of (rows, k) arrays: P(outside the band), the lowest and the highest quantile asked
        (None: not in the answer). `groups`: each row's group for the hours (None: all rows are one)."""
        n = next((len(a) for a in (p_outside, low, high) if a is not None), 0)
        if n == 0:
            return
        if p_outside is not None:
            # a row's distance from nominal (its quantiles' farthest), to choose among rows of equal P(outside)
            far = None if low is None or high is None else np.maximum(1.0 - low, high - 1.0)
            self._add_p(np.asarray(p_outside, dtype=np.float64), far, groups)
        if low is not None and high is not None:
            block_low, block_high = low.min(axis=0), high.max(axis=0)
            if self._lowest is None or self._highest is None:
                self._lowest, self._highest = block_low, block_high
            else:
                self._lowest, self._highest = np.minimum(self._lowest, block_low), np.maximum(self._highest, block_high)
        self.rows += n

    def _add_p(self, p: np.ndarray, far: np.ndarray | None, groups: Sequence[Hashable] | None) -> None:
        block_max, block_sum = p.max(axis=0), p.sum(axis=0)
        far = np.zeros_like(p) if far is None else np.asarray(far, dtype=np.float64)
        tied = np.where(p == block_max, far, -np.inf)  # among the rows at the largest P(outside), the farthest
        at = tied.argmax(axis=0)  # first of equals, as argmax
        buses = np.arange(p.shape[1])
        block_worst, block_far = at + self.rows, far[at, buses]
        if self._max is None or self._worst is None or self._sum is None or self._far is None:
            self._max, self._worst, self._sum, self._far = block_max, block_worst, block_sum, block_far
        else:  # strictly larger, or as large and farther: a full tie keeps the earlier row
            later = (block_max > self._max) | ((block_max == self._max) & (block_far > self._far))
            self._max = np.where(later, block_max, self._max)
            self._worst = np.where(later, block_worst, self._worst)
            self._far = np.where(later, block_far, self._far)
            self._sum = self._sum + block_sum
        if self.hours_per_row is None:
            return
        members: dict[Hashable, list[int]] = {}
        for i, key in enumerate(groups if groups is not None else [None] * len(p)):
            members.setdefault(key, []).append(i)
        for key, rows in members.items():
            part = p[rows]
            expected, variance = part.sum(axis=0), (part * (1.0 - part)).sum(axis=0)
            group = self._groups.get(key)
            if group is None:
                self._groups[key] = _Group(expected, variance)
            else:
                group.expected, group.variance = group.expected + expected, group.variance + variance

    def result(self) -> BusSummary:
        """The summary of every row added so far."""
        mean = None if self._sum is None else self._sum / self.rows
        hours = spread = None
        if self.hours_per_row is not None and self._groups:
            step = self.hours_per_row
            expected = np.stack([g.expected * step for g in self._groups.values()])  # (groups, k)
            variance = np.stack([g.variance * step**2 for g in self._groups.values()])
            worst = expected.argmax(axis=0)
            buses = np.arange(expected.shape[1])
            hours, spread = expected[worst, buses], np.sqrt(variance[worst, buses])
        return BusSummary(self.rows, self._max, mean, self._worst, hours, spread, self._lowest, self._highest)
