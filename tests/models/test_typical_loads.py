"""models.typical_loads: unmetered loads' typical values from the loads a context meters, per customer class."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import gridsim
from models import typical_loads


def _classed(rng: np.random.Generator, loads: int = 40) -> SimpleNamespace:
    """A network of `loads` load buses (P then Q inputs): households and shops consume, some buses have PV too."""
    d = 2 * loads
    kind = rng.integers(0, 2, loads)
    size = rng.uniform(0.5, 2.0, loads)
    consumption = np.zeros((2, d))
    consumption[kind, np.arange(loads)] = size
    consumption[kind, loads + np.arange(loads)] = 0.3 * size
    pv = np.zeros((1, d))
    pv[0, :loads] = np.where(rng.random(loads) < 0.5, rng.uniform(1.0, 3.0, loads), 0.0)
    base_c, base_g = consumption.sum(axis=0), pv.sum(axis=0)
    return SimpleNamespace(
        base_x=base_c - base_g,
        base_consumption=base_c,
        base_generation=base_g,
        class_consumption=consumption,
        class_generation=pv,
    )


def _year(net: SimpleNamespace, rng: np.random.Generator, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Rows where households run at 0.25 of their base on average, shops at 0.6, PV at 0.15; and each input's mean."""
    use = np.column_stack(
        [rng.uniform(0.05, 0.45, n), rng.uniform(0.3, 0.9, n), np.clip(rng.normal(0.15, 0.2, n), 0.0, 1.0)]
    )
    parts = np.vstack([net.class_consumption, -net.class_generation])  # (3, d)
    x = use @ parts + rng.normal(0.0, 0.01, (n, parts.shape[1]))
    return x, x.mean(axis=0)


def _half_unmetered(seed: int) -> tuple[SimpleNamespace, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A classed network, a context of it (x), x with about half its load buses never metered, those buses' columns
    and the context's means."""
    rng = np.random.default_rng(seed)
    net = _classed(rng)
    x, mean = _year(net, rng)
    loads = x.shape[1] // 2
    never = np.flatnonzero(rng.random(loads) < 0.5)
    unmetered = np.r_[never, loads + never]
    sparse = x.copy()
    sparse[:, unmetered] = np.nan
    return net, x, sparse, unmetered, mean


def test_unmetered_loads_take_their_class_utilisation_not_their_rating() -> None:
    """Half the buses never metered: their typical values from the metered ones' per class and direction within a few
    per cent of their real means, where the ratings (the base loads) are 2-4x off and one utilisation for every class
    10 % or more."""
    net, x, sparse, unmetered, mean = _half_unmetered(0)
    guessed = typical_loads.estimated(sparse, net)
    scale = np.abs(mean[unmetered]).sum()
    error = np.abs(guessed - mean)[unmetered].sum() / scale
    rating = np.abs(net.base_x - mean)[unmetered].sum() / scale
    pooled = SimpleNamespace(**{**vars(net), "class_consumption": np.zeros((0, x.shape[1]))})
    pooled.class_generation = np.zeros((0, x.shape[1]))
    pooled_error = np.abs(typical_loads.estimated(sparse, pooled) - mean)[unmetered].sum() / scale
    assert error < 0.03 and rating > 1.0 and pooled_error > 0.1, (error, rating, pooled_error)


def test_a_feeder_without_classes_or_metered_loads() -> None:
    """IEEE 33 (no classes): loads at 0.8 of their base in every metered row put the unmetered ones at 0.8 of theirs;
    a context that meters no load in 10 rows keeps the base loads, and so does a direction no metered load shows."""
    net = gridsim.network("ieee33")
    base = np.asarray(net.base_x, dtype=np.float64)
    rng = np.random.default_rng(1)
    x = base * rng.uniform(0.7, 0.9, (200, 1))
    sparse = x.copy()
    sparse[:, :10] = np.nan
    sparse[:, 32:42] = np.nan
    guessed = typical_loads.estimated(sparse, net)
    np.testing.assert_allclose(guessed[:10], base[:10] * x[:, 10:32].sum() / (200 * base[10:32].sum()), rtol=1e-7)
    barely = np.full_like(x, np.nan)
    barely[:9] = x[:9]
    np.testing.assert_array_equal(typical_loads.estimated(barely, net), base)


def test_a_misrated_load_or_a_wild_meter_counts_for_nothing() -> None:
    """A user trial: one metered load rated a twentieth of its size in the network model (a GIS error), or one meter
    reading 50x, set every unmetered load's typical value (network-fit then erred 0.045 p.u.). The fit is robust: the
    unmetered loads' typical values are as if that load were not metered, within a per cent of their scale."""
    net, x, sparse, unmetered, mean = _half_unmetered(2)
    loads = x.shape[1] // 2
    bad = int(next(b for b in np.setdiff1d(np.arange(loads), unmetered) if net.base_generation[b] == 0.0))  # no PV
    without = sparse.copy()
    without[:, [bad, loads + bad]] = np.nan
    honest = typical_loads.estimated(without, net)
    misrated = SimpleNamespace(**vars(net))
    for name in ("base_x", "base_consumption", "base_generation"):
        setattr(misrated, name, getattr(net, name).copy())
    misrated.class_consumption, misrated.class_generation = net.class_consumption.copy(), net.class_generation.copy()
    for table in (misrated.class_consumption, misrated.class_generation):
        table[:, [bad, loads + bad]] /= 20.0
    misrated.base_consumption[[bad, loads + bad]] /= 20.0
    misrated.base_generation[[bad, loads + bad]] /= 20.0
    misrated.base_x = misrated.base_consumption - misrated.base_generation
    wild = sparse.copy()
    wild[:, [bad, loads + bad]] *= 50.0
    scale = np.abs(mean[unmetered]).sum()
    for guessed in (typical_loads.estimated(sparse, misrated), typical_loads.estimated(wild, net)):
        assert np.abs(guessed - honest)[unmetered].sum() / scale < 0.01


def test_metered_loads_keep_their_own_mean_and_sizeless_meters_say_nothing() -> None:
    """A load metered in 10 rows or more keeps its own mean for the rows that did not read it; where no metered load
    has a size in the network model (rated 0), or fewer than 3 are metered, the unmetered ones keep their base loads
    (user trials: taken at 0; one meter at 50x set them all)."""
    net = gridsim.network("ieee33")
    base = np.asarray(net.base_x, dtype=np.float64)
    rng = np.random.default_rng(3)
    x = base * rng.uniform(0.5, 1.5, (100, base.size))
    sparse = x.copy()
    sparse[20:, 5] = np.nan  # read in 20 rows
    sparse[:, 6] = np.nan  # never
    guessed = typical_loads.estimated(sparse, net)
    np.testing.assert_allclose(
        guessed[[5, *range(7, 32)]], np.nanmean(sparse[:, [5, *range(7, 32)]], axis=0), rtol=1e-12
    )
    zero_rated = SimpleNamespace(
        base_x=np.where(np.arange(base.size) % 2 == 0, 0.0, base),
        base_consumption=np.where(np.arange(base.size) % 2 == 0, 0.0, base),
        base_generation=np.zeros(base.size),
        class_consumption=np.zeros((0, base.size)),
        class_generation=np.zeros((0, base.size)),
    )
    metered_zero = x.copy()
    metered_zero[:, 1::2] = np.nan  # the loads with a rating are the unmetered ones
    np.testing.assert_array_equal(typical_loads.estimated(metered_zero, zero_rated)[1::2], zero_rated.base_x[1::2])
    alone = x.copy()
    alone[:, 1:32] = np.nan  # one load's P metered (at 50x, a user trial): too few to say what the others run at
    alone[:, 0] *= 50.0
    np.testing.assert_array_equal(typical_loads.estimated(alone, net)[1:32], base[1:32])


def test_each_row_takes_what_its_own_meters_show() -> None:
    """Customers of a class follow one profile: a row's unmetered loads from that row's metered ones of their class
    come within a few per cent of their real values, where one typical value per load misses each row's level (tens
    of per cent); a row that meters too few inputs keeps the typical values."""
    net, x, sparse, unmetered, _ = _half_unmetered(5)
    typical = typical_loads.estimated(sparse, net)
    rows = typical_loads.per_row(sparse, net, typical)
    scale = np.abs(x[:, unmetered]).sum()
    row_error = np.abs(rows - x)[:, unmetered].sum() / scale
    constant_error = np.abs(typical[None, :] - x)[:, unmetered].sum() / scale
    assert row_error < 0.05 and constant_error > 0.2, (row_error, constant_error)
    np.testing.assert_array_equal(rows[~np.isnan(sparse)], x[~np.isnan(sparse)])
    blind = sparse.copy()
    blind[0, :] = np.nan  # a row that meters nothing
    np.testing.assert_array_equal(typical_loads.per_row(blind, net, typical)[0], typical)


@pytest.mark.parametrize(("shared_std", "own_std", "expected"), [(0.0, 0.06, 0.0), (0.05, 0.1, 0.8), (0.2, 0.0, 1.0)])
def test_a_row_fit_counts_as_far_as_the_loads_share_their_rows_level(shared_std, own_std, expected) -> None:
    """IEEE 33 (one class), half its load buses never metered, loads at a level shared by the row (std `shared_std`
    of their base) and their own (`own_std`): `profile_shares` is the share of the row fit's departure an unmetered
    load shares, sigma_c^2 / (sigma_c^2 + sigma_e^2 / m) for the m = 16 metered inputs of a half (0.8 for the middle
    case); where each load varies on its own, the unmetered guesses stay at their typical values instead of taking
    the metered loads' chance level of the row."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(7)
    n, loads = 400, net.n_load
    level = rng.normal(0.0, shared_std, (n, 1))
    x = net.base_x * (0.9 + level + rng.normal(0.0, own_std, (n, 2 * loads)))
    never = np.zeros(loads, dtype=bool)
    never[rng.permutation(loads)[: loads // 2]] = True
    sparse = x.copy()
    sparse[:, np.r_[never, never]] = np.nan
    shares = typical_loads.profile_shares(sparse, net)
    np.testing.assert_allclose(shares, expected, atol=0.12)
    typical = typical_loads.estimated(sparse, net)
    rows = typical_loads.per_row(sparse, net, typical)[:, np.r_[never, never]]
    moved = np.abs(rows - typical[np.r_[never, never]]).mean() / np.abs(net.base_x[np.r_[never, never]]).mean()
    if expected == 0.0:  # the row fit's own departures are ~1.5 % of the base here (0.06 / sqrt(16))
        assert moved < 0.005, moved
    else:
        assert moved > 0.5 * shared_std, moved


def test_a_class_no_meter_shows_is_an_error_the_spread_holds() -> None:
    """A class whose every customer is unmetered takes its direction's utilisation: its column of `class_errors` moves
    exactly its unmetered inputs (by their base in the class) by about how far the shown classes differ; a class many
    metered customers show errs by a small share of that."""
    net, x, sparse, unmetered, _ = _half_unmetered(6)
    loads = x.shape[1] // 2
    shops = np.flatnonzero(net.class_consumption[1, :loads] > 0)
    hidden = x.copy()
    hidden[:, np.r_[shops, loads + shops]] = np.nan  # no shop metered
    errors = typical_loads.class_errors(hidden, net)
    shop_column = errors[:, int(np.argmax(np.abs(errors[shops]).sum(axis=0)))]
    moved = np.flatnonzero(shop_column != 0.0)
    assert set(moved) == set(shops)  # the P half's column (the Q half has its own)
    std = np.abs(shop_column[shops]) / net.class_consumption[1, shops]  # the class utilisation's error std
    assert np.all(std >= typical_loads.UNSHOWN_FLOOR - 1e-12)
    shown = typical_loads.class_errors(sparse, net)  # every class has metered customers
    assert np.abs(shown).max() < 0.1 * np.abs(shop_column).max()


def test_an_upload_naming_a_class_per_load_is_fitted_with_few() -> None:
    """An upload names a class per load at will; the fit's cost grows with the cube of the classes per row. Beyond
    MAX_CLASSES per direction the smallest are folded into one: every load keeps its whole rating, each direction's."""
    loads = 120
    d = 2 * loads
    rng = np.random.default_rng(8)
    consumption = np.zeros((loads, d))
    consumption[np.arange(loads), np.arange(loads)] = rng.uniform(0.5, 2.0, loads)
    generation = np.zeros((loads, d))
    generation[np.arange(loads), np.arange(loads)] = rng.uniform(0.0, 1.0, loads)
    net = SimpleNamespace(class_consumption=consumption, class_generation=generation)
    net.base_consumption, net.base_generation = consumption.sum(axis=0), generation.sum(axis=0)
    parts, consuming = typical_loads._classes(net)
    assert parts.shape[1] == 2 * typical_loads.MAX_CLASSES and consuming.sum() == typical_loads.MAX_CLASSES
    np.testing.assert_allclose(parts[:, consuming].sum(axis=1), net.base_consumption)
    np.testing.assert_allclose(-parts[:, ~consuming].sum(axis=1), net.base_generation)


def test_each_unmetered_customer_errs_as_far_as_metered_ones_depart_from_their_class() -> None:
    """`customer_errors`: a column per unmetered input, moving it alone by its size times how far metered inputs
    depart from their row's class fit: loads that each vary on their own (IEEE 33, +-10 %) about their spread (a
    uniform's 0.058 of the size), customers that follow their class's profile little (at the floor's order), a
    context metering nothing UNSHOWN_DEFAULT."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(8)
    x = np.asarray(net.base_x) * rng.uniform(0.9, 1.1, (300, net.n_features))
    partly = x.copy()
    partly[:, [3, 4, 3 + net.n_load]] = np.nan
    errors = typical_loads.customer_errors(partly, net)
    size = typical_loads.sizes_of(net)
    assert errors.shape == (net.n_features, 3)
    for column, j in zip(errors.T, (3, 4, 3 + net.n_load)):
        assert set(np.flatnonzero(column)) == {j}
        assert 0.04 < column[j] / size[j] < 0.1
    classed, cx, sparse_x, unmetered, _ = _half_unmetered(9)
    relative = (
        typical_loads.customer_errors(sparse_x, classed).max(axis=1)[unmetered]
        / typical_loads.sizes_of(classed)[unmetered]
    )
    assert relative.max() < 0.05
    blind = np.full_like(x, np.nan)
    assert typical_loads.customer_errors(blind, net).max(axis=1) / size == pytest.approx(typical_loads.UNSHOWN_DEFAULT)


def test_class_rows_run_as_the_guesses_of_their_class_do() -> None:
    """`class_rows`: where loads follow their class's profile (share 1), each `class_errors` column's rows run as the
    row's guesses of a customer wholly of its class do (a reactive load: one class), at a root mean square of 1 over
    the rows that guess, 0 in a row that meters every load of the half; where each load varies on its own (share 0),
    1 in every row."""
    net, _, sparse, unmetered, _ = _half_unmetered(7)
    loads = sparse.shape[1] // 2
    sparse = sparse.copy()
    sparse[0] = np.where(np.isnan(sparse[0]), 0.5, sparse[0])  # row 0 meters every load
    following = np.ones(2)
    rows = typical_loads.class_rows(sparse, net, following)
    columns = list(typical_loads._erring_classes(sparse, net))
    assert rows.shape == (sparse.shape[0], len(columns)) and typical_loads.class_errors(sparse, net).shape[1] == len(
        columns
    )
    guesses = typical_loads.per_row(sparse, net, typical_loads.estimated(sparse, net), following)
    checked = 0
    for j, (half, _, column) in enumerate(columns):
        assert rows[0, j] == 0.0
        np.testing.assert_allclose(np.sqrt(np.mean(np.square(rows[1:, j]))), 1.0)
        if half == 1:  # Q: each input is one class's consumption
            i = int(np.flatnonzero(column)[0])
            assert i >= loads and i in unmetered
            np.testing.assert_allclose(rows[1:, j] / guesses[1:, i], rows[1, j] / guesses[1, i], rtol=1e-9)
            checked += 1
    assert checked >= 2
    np.testing.assert_array_equal(typical_loads.class_rows(sparse, net, np.zeros(2)), np.ones_like(rows))
