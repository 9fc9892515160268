"""The readings' meter noise, row by row: what a spread calibrated on the context leaves out of its held-out errors.

A method calibrates its spread on held-out errors at the context rows, reading minus held-out prediction. With
noisy readings that error is the meter's noise plus the method's own error, and only the second one is what an
answer about the true voltage at a query is off by: at noise 1e-4-1e-3 p.u. on SimBench's development grids the
first is 3-10x the second, and intervals calibrated on the sum held the truth at 0.997-1.000 at 3-8x the covering
width. Their difference alone cannot be taken (both are estimated from the same 500 rows; the difference of two
near-equal mean squares swung 0.02-5x the true error per bus). Row by row it can: network-fit (few parameters
per branch shared by every bus below it) answers the context rows with their noise averaged out, so a reading
less network-fit's answer there is that reading's noise, and the held-out error less it the method's own error
at that row plus network-fit's, which is small beside it (where network-fit's model of the feeder is wrong, its
miss adds to the estimate: the intervals then widen, they do not narrow).

Meter noise is independent from bus to bus. What moves every bus of a row together (the substation's voltage
drifting, no input of the service) is no meter's noise but the feeder's state: `meter_noise` keeps the part of
each row's mean departure beyond what independent noise explains in the readings.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

# Meter noise is independent from bus to bus: the largest eigenvalue of its correlation matrix over k buses and n
# rows is about (1 + sqrt(k / n))^2 (Marchenko-Pastur), 1.6 of 32 on IEEE 33 with 500 rows, 5 % of the total.
# What network-fit leaves of exact readings where the feeder departs from its model (lines off, a regulator) is
# one smooth error shared by the buses below it: the largest eigenvalue held 50-83 % there. Readings whose
# departure from network-fit holds more than this many times the bound are not taken for noise.
INDEPENDENCE_SLACK = 1.5
# A swing no load explains that a few buses share (a lateral's: three buses of 32 moving together by 1e-3 p.u.
# beside meter noise of 1e-3, an attacker pass) hardly moves the largest eigenvalue but shows as a pair of buses
# far more correlated than independent noise leaves them: Fisher's z of any pair beyond the level at which all
# k (k - 1) / 2 pairs of independent noise stay below it with this probability is no noise either.
PAIRS_FALSE_ALARM = 0.01
# Fewer buses than this cannot show whether a departure is shared.
MIN_BUSES = 3
# Readings' noise (per bus, std, as models.off_context.reading_noise infers it) below this share of the
# method's own held-out rms is not taken out: the spread would narrow by under 1 - sqrt(1 - share^2), 4.5 %,
# for the price of a network-fit per context.
METER_NOISE_SHARE = 0.3


def worth_taking_out(noise_std: np.ndarray, heldout_rms: np.ndarray) -> bool:
    """Whether the readings' noise (k,) is a large enough share of a method's held-out rms (k,) at some bus."""
    noise_std, heldout_rms = np.asarray(noise_std, dtype=np.float64), np.asarray(heldout_rms, dtype=np.float64)
    ok = np.isfinite(noise_std) & np.isfinite(heldout_rms) & (heldout_rms > 0.0)
    return bool(np.any(noise_std[ok] > METER_NOISE_SHARE * heldout_rms[ok]))


def independent_across_buses(noise: np.ndarray) -> bool:
    """Whether departures (n, k) look like meter noise: no direction across the buses holds much more than
    independent noise would (INDEPENDENCE_SLACK times the Marchenko-Pastur bound) and no pair of buses is more
    correlated than independent noise leaves any pair (PAIRS_FALSE_ALARM). Buses that never depart are left out;
    under MIN_BUSES of them, False."""
    noise = np.asarray(noise, dtype=np.float64)
    moving = noise[:, noise.std(axis=0) > 0.0]
    n, k = moving.shape
    if k < MIN_BUSES or n <= k + 3:
        return False
    correlation = np.corrcoef(moving, rowvar=False)
    if np.linalg.eigvalsh(correlation)[-1] > INDEPENDENCE_SLACK * (1.0 + np.sqrt(k / n)) ** 2:
        return False
    pairs = k * (k - 1) / 2
    limit = float(norm.isf(PAIRS_FALSE_ALARM / (2.0 * pairs)))  # two-sided, every pair at once (Bonferroni)
    strongest = float(np.max(np.abs(correlation[np.triu_indices(k, 1)])))
    return bool(np.arctanh(min(strongest, 1.0 - 1e-15)) * np.sqrt(n - 3) <= limit)


def meter_noise(readings: np.ndarray, denoised: np.ndarray) -> np.ndarray:
    """(n, k) each reading's meter noise: the reading less the denoised answer there (network-fit's), less
    the part of each row's mean departure that independent noise does not explain (kept as the feeder's own).
    0 where either is not finite."""
    y, d = np.asarray(readings, dtype=np.float64), np.asarray(denoised, dtype=np.float64)
    valid = np.isfinite(y) & np.isfinite(d)
    departure = np.where(valid, y - d, 0.0)
    n, k = departure.shape
    if n < 2:
        return np.zeros_like(departure)
    common = departure.mean(axis=1, keepdims=True)  # (n, 1)
    # independent noise of per-bus variance s_j^2 gives the row mean a variance of mean_j(s_j^2) / k; s_j^2 from
    # the departures less their row means (which hold (k - 1) / k of it), so a shared drift does not count
    if k < 2:
        return departure
    independent = float(np.mean((departure - common).var(axis=0))) * k / (k - 1)
    expected = independent / k
    observed = float(common.var())
    kept = 0.0 if observed <= 0.0 else max(0.0, 1.0 - expected / observed)
    noise: np.ndarray = np.where(valid, departure - kept * common, 0.0)
    return noise
