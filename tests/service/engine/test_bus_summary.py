"""The one per-bus summary kernel (studies and batch jobs): rows given in blocks give the summary of the
rows given at once; among rows of equal P(outside) the one farthest from nominal is the worst (a full tie keeps
the first); groups that span blocks add up; what was not given is None."""

from __future__ import annotations

import numpy as np

from service.engine.bus_summary import BusSummaryAccumulator


def _rows(seed: int = 0, n: int = 50, k: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    p = rng.random((n, k)).astype(np.float32)
    p[[7, 30, 40], 1] = 1.0  # a tie in P at bus 1: row 30 lies farthest from nominal
    p[[5, 25], 2] = 1.0  # a full tie at bus 2 (the same quantiles): row 5, the first
    low = 0.95 + 0.01 * rng.standard_normal((n, k))
    low[[7, 30, 40], 1] = 0.90, 0.85, 0.88
    low[25, 2] = low[5, 2]
    groups = ["a"] * 20 + ["b"] * 15 + ["a"] * 15  # group a comes back after b
    return p, low, low + 0.02, groups


def test_blocks_give_the_summary_of_the_rows_at_once():
    p, low, high, groups = _rows()
    whole = BusSummaryAccumulator(0.25)
    whole.add(p, low, high, groups)
    blocks = BusSummaryAccumulator(0.25)
    for start, stop in ((0, 3), (3, 21), (21, 22), (22, 50)):
        blocks.add(p[start:stop], low[start:stop], high[start:stop], groups[start:stop])
    a, b = whole.result(), blocks.result()
    assert a.rows == b.rows == 50 and a.worst_row is not None and a.worst_row[1] == 30 and a.worst_row[2] == 5
    for name in ("max_p_outside", "worst_row", "lowest", "highest"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("mean_p_outside", "hours_outside", "hours_outside_std"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, err_msg=name)
    q = p.astype(np.float64)
    in_a = np.array(groups) == "a"
    expected = np.stack([q[in_a].sum(axis=0), q[~in_a].sum(axis=0)]) * 0.25
    np.testing.assert_allclose(a.hours_outside, expected.max(axis=0), rtol=1e-12)
    np.testing.assert_allclose(a.mean_p_outside, q.mean(axis=0), rtol=1e-12)


def test_without_hours_a_band_or_quantiles_those_fields_are_none():
    p, low, high, _ = _rows()
    plain = BusSummaryAccumulator()
    plain.add(p, None, None)
    s = plain.result()
    assert s.hours_outside is None and s.hours_outside_std is None and s.lowest is None and s.highest is None
    extremes = BusSummaryAccumulator(1.0)
    extremes.add(None, low, high)
    t = extremes.result()
    assert t.rows == 50 and t.max_p_outside is None and t.worst_row is None and t.hours_outside is None
    np.testing.assert_array_equal(t.lowest, low.min(axis=0))


def test_without_quantiles_a_tie_keeps_the_first_row():
    p, _, _, _ = _rows()
    plain = BusSummaryAccumulator()
    for start, stop in ((0, 20), (20, 50)):
        plain.add(p[start:stop], None, None)
    assert plain.result().worst_row[1] == 7
