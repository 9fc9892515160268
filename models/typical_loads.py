"""Typical values of loads a context never metered, estimated from the loads it did meter.

network-fit solves every context row with each unmetered load at a typical value (a pseudo-measurement), and the
extrapolation measure places a query's unmetered loads about it. A network model's base loads are a poor default
where they are ratings rather than an operating point: SimBench's are about a load's peak and its generators' full
output (1-LV-semiurb4's households average a tenth of their base). With half or a quarter of the load buses of the
SimBench development grids metered and the rest at their base values, network-fit erred 5e-3-7e-2 p.u. through the API,
the worst bus held on 0-80 % of queries in 5 of 12 contexts (bench/results/partial-metering.md).

The loads the context did meter show how far each kind of customer runs below its rating: every load input is its
network's base consumption and generation split by customer class (`Network.class_consumption`, `class_generation`;
what no class names is one more class of each), and its mean over the context is taken as sum_c base_c * u_c with
one utilisation u_c per class and direction (consumption, generation) and per half (P, Q), fitted on the metered
inputs' means, relative to each input's size, shrunk toward one utilisation for all consumption and one for all
generation where a class has few metered inputs, and those toward one for everything where the metered inputs show
a direction little (`SHRINKAGE`). The fit is robust (Tukey's biweight on the relative residuals): a load whose rating
is wrong in the network model (a GIS error: a user trial's one household rated a twentieth of its size set every
unmetered load's typical value, network-fit then erred 0.045 p.u.) or a meter reading 50x counts for nothing. A
load metered in enough rows (`MIN_ROWS`) keeps its own mean for the rows that did not read it.

Customers of a class follow one profile, so network-fit takes each row's unmetered loads from that row's metered ones
(`per_row`: the same fit on the row's values), the context-wide values (`estimated`) where a row meters too few. How
far they follow it is measured, not assumed (`profile_shares`): where each load varies on its own (IEEE 33's loads
drawn each within +-10 %), a row's metered loads say nothing of its unmetered ones, and their row fit put the metered
loads' chance level into every guess, a flow error that moves with the regressors: network-fit took a 27 % impedance
error on a trunk branch for 14 % and a tap, and erred 7e-4 p.u. at 1.3-1.5x load, its worst bus held on 0.03 of
queries (bench/partial_metering.py, lines 0.7-1.3 off, half the load buses never metered, seed 1).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# A class's utilisation is pulled toward its direction's, and a direction's toward the one for everything, as strongly
# as this many metered inputs wholly of the class (or direction) would pull it toward their own.
SHRINKAGE = 0.25
# Inputs metered in fewer context rows than this say too little of their mean (service.engine.sparse's threshold).
MIN_ROWS = 10
# A row whose half (P or Q) meters fewer inputs than this keeps the typical values there (`per_row`), and a context
# metering fewer keeps the base loads (`estimated`: one meter at 50x its load set every unmetered one in a user trial);
# `per_row` fits up to ROW_BLOCK rows at once (their normal equations side by side: ~40 x 40 each on 1-MV-rural), as
# many as keep a block's arrays within BLOCK_FLOATS numbers.
MIN_ROW_INPUTS, ROW_BLOCK, BLOCK_FLOATS = 3, 1024, 1 << 22
# Classes fitted apart per direction (consumption, generation); the smaller ones are folded into one (`_classes`).
MAX_CLASSES = 24
# Tukey's biweight: relative residuals beyond this many robust stds (1.4826 MAD, at least SPREAD_FLOOR: customers of a
# class differ by some tenths of their rating, which a near-exact fit's MAD would call outliers) get no weight.
BIWEIGHT_C, SPREAD_FLOOR, ROBUST_PASSES = 4.685, 0.1, 5
# A class's utilisation's prior std (`class_errors`): at least UNSHOWN_FLOOR, UNSHOWN_DEFAULT where its direction has
# fewer than two classes shown; a customer's own spread about its class, at least CUSTOMER_SPREAD of its rating.
UNSHOWN_FLOOR, UNSHOWN_DEFAULT, CUSTOMER_SPREAD = 0.05, 0.3, 0.01
# `customer_errors` measures the metered inputs' departures from their row's class fit on at most this many rows, and
# `profile_shares` how far the row fit predicts them on as many, each of PROFILE_FOLDS folds of the inputs left out in
# turn (two halves took the fit's worse prediction from half the inputs for unshared variation: 1-LV-semiurb4 with a
# quarter of its load buses metered erred 46 % more).
SPREAD_ROWS, PROFILE_FOLDS = 256, 8
# A share below this is taken as 0 (the typical value in every row): guesses that move by a small share of their row's
# level put a query's real loads far out in network-fit's per-bus stage, whose spread grew as 1 / share (IEEE 33, every
# other load never metered, noise 1e-3: std 3.8 p.u. at a share of 0.0004, 0.036 at 0.05, 0.004 at 0.5 and at 0).
PROFILE_SHARE_FLOOR = 0.25


def estimated(x: np.ndarray, network: object) -> np.ndarray:
    """(d,) typical loads for context loads x (n, d; NaN: not metered in that row): an input metered in MIN_ROWS
    rows at its own mean, any other at its base consumption and generation per class times the utilisations the
    metered inputs show (module docstring); the network's base loads in a half (P, Q) where fewer than MIN_ROW_INPUTS
    metered inputs have a size."""
    x = np.asarray(x, dtype=np.float64)
    base = np.asarray(network.base_x, dtype=np.float64)  # type: ignore[attr-defined]
    parts, consuming = _classes(network)
    metered, mean = _metered_means(x)
    out = base.copy()
    half = x.shape[1] // 2
    for columns in (np.arange(half), np.arange(half, x.shape[1])):  # P, then Q: their profiles differ
        utilisation, fitted = _utilisations(parts[columns], mean[columns][None, :], consuming, MIN_ROW_INPUTS)
        if fitted[0]:
            out[columns] = parts[columns] @ utilisation[0]
    out[metered] = mean[metered]
    return out


def per_row(x: np.ndarray, network: object, typical: np.ndarray, shares: np.ndarray | None = None) -> np.ndarray:
    """(n, d) loads for context loads x (n, d; NaN: not metered in that row): every unmetered value at what its row's
    metered loads show, their class utilisations in that row fitted as `estimated` fits the context's means (customers
    of a class follow one profile: the PV a row's meters show at noon is at noon in the unmetered ones too) as far as
    the metered ones share their row's (`profile_shares`; the rest at `typical`), the `typical` value (d,) where the
    row meters fewer than MIN_ROW_INPUTS inputs of its half (P, Q) with a size. `shares`: `profile_shares` of x, where
    the caller has them."""
    x = np.asarray(x, dtype=np.float64)
    parts, consuming = _classes(network)
    typical = np.asarray(typical, dtype=np.float64)
    out = np.where(np.isnan(x), typical[None, :], x)
    half = x.shape[1] // 2
    shares = profile_shares(x, network) if shares is None else shares
    for columns, share in zip((np.arange(half), np.arange(half, x.shape[1])), shares):
        rows = np.flatnonzero(np.isnan(x[:, columns]).any(axis=1))
        for block, utilisation, fitted in _row_utilisations(parts[columns], x[np.ix_(rows, columns)], consuming):
            block = rows[block]
            values = x[np.ix_(block, columns)]
            # (d_half, rows): the row fit as far as the loads share their row's level, the rest at the typical value
            guessed = share * (parts[columns] @ utilisation.T) + (1.0 - share) * typical[columns, None]
            keep = np.isnan(values) & fitted[:, None]
            out[np.ix_(block, columns)] = np.where(keep, guessed.T, out[np.ix_(block, columns)])
    return out


def _row_utilisations(
    parts: np.ndarray, values: np.ndarray, consuming: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """`_utilisations` of each row of `values` (r, k) on `parts` (k, m), in blocks of up to ROW_BLOCK rows (their
    normal equations side by side: (rows, m, m) at a time, within BLOCK_FLOATS numbers): (the block's row indices,
    its utilisations, which of its rows were fitted)."""
    step = max(1, min(ROW_BLOCK, BLOCK_FLOATS // max(parts.shape[1] * (parts.shape[1] + parts.shape[0]), 1)))
    for start in range(0, values.shape[0], step):
        block = np.arange(start, min(start + step, values.shape[0]))
        utilisation, fitted = _utilisations(parts, values[block], consuming, MIN_ROW_INPUTS)
        yield block, utilisation, fitted


def class_errors(x: np.ndarray, network: object) -> np.ndarray:
    """(d, c) how the unmetered loads' pseudo-measurements may err together: a column per class (and half) that some
    unmetered input has, its std-sized error moving each unmetered input by its base of that class times the share of
    rows it is unmetered. Its std is the class utilisation's posterior std: a prior as wide as the shown classes of its
    direction differ from each other (their utilisations' std, at least UNSHOWN_FLOOR; UNSHOWN_DEFAULT where fewer
    than two are shown: what a class no meter shows is off by, taking its direction's), narrowed by what the metered
    inputs show of it (the sum of their squared shares of it, over the customers' own spread about their class,
    CUSTOMER_SPREAD at least). On 1-LV-semiurb4 with half its load buses metered, a bus's whole error was an unshown
    class's (2.8e-4 p.u. against 1.1e-4 so predicted), which network-fit's spread did not hold (0.58)."""
    columns_out = [column for _, _, column in _erring_classes(x, network)]
    return np.stack(columns_out, axis=1) if columns_out else np.zeros((x.shape[1], 0))


def class_rows(x: np.ndarray, network: object, shares: np.ndarray | None = None) -> np.ndarray:
    """(n, c) how far each row's guesses of each `class_errors` column's class run, relative to their root mean square
    over the rows that guess some load of its half: the row's utilisation of the class as far as loads share their
    row's (`profile_shares`), the context-wide one for the rest, as `per_row` guesses; 0 in a row that meters every
    load of the half (it guesses none). A class whose unmetered customers run at another level than its metered ones
    (1.3x) puts an error of that level times its guesses into every row: where loads follow their class's profile it
    grows and shrinks with the profile, and is no constant. 1 in every row of a half whose share is 0 (its guesses are
    the typical values in every row)."""
    x = np.asarray(x, dtype=np.float64)
    parts, consuming = _classes(network)
    shares = profile_shares(x, network) if shares is None else shares
    erring = list(_erring_classes(x, network))
    out = np.ones((x.shape[0], len(erring)))
    half = x.shape[1] // 2
    _, mean = _metered_means(x)
    for i, columns in enumerate((np.arange(half), np.arange(half, x.shape[1]))):
        mine = [j for j, (h, _, _) in enumerate(erring) if h == i]
        if not mine or shares[i] == 0.0:
            continue
        classes = np.array([erring[j][1] for j in mine])
        typical = _utilisations(parts[columns], mean[columns][None, :], consuming, MIN_ROW_INPUTS)[0][0]
        guessing = np.isnan(x[:, columns]).any(axis=1)
        run = np.zeros((x.shape[0], classes.size))
        run[guessing] = typical[classes]  # rows too sparsely metered for a fit keep the typical values
        rows = np.flatnonzero(guessing)
        for block, utilisation, fitted in _row_utilisations(parts[columns], x[np.ix_(rows, columns)], consuming):
            own = shares[i] * utilisation[:, classes] + (1.0 - shares[i]) * typical[classes]
            run[rows[block[fitted]]] = own[fitted]
        rms = np.sqrt(np.mean(np.square(run[guessing]), axis=0)) if guessing.any() else np.zeros(classes.size)
        out[:, mine] = np.where(rms > 0.0, run / np.where(rms > 0.0, rms, 1.0), 0.0)
    return out


def _erring_classes(x: np.ndarray, network: object) -> Iterator[tuple[int, int, np.ndarray]]:
    """`class_errors`' columns in order: (the half, 0 for P or 1 for Q; the class, a column of `_classes`; the column)."""
    x = np.asarray(x, dtype=np.float64)
    parts, consuming = _classes(network)
    metered, mean = _metered_means(x)
    unmetered = np.isnan(x).mean(axis=0)
    size = np.abs(parts).sum(axis=1)
    half = x.shape[1] // 2
    for i, columns in enumerate((np.arange(half), np.arange(half, x.shape[1]))):
        has = np.abs(parts[columns]) > 0.0  # (d_half, m)
        used = metered[columns] & (size[columns] > 0.0)
        moved = (has & (unmetered[columns, None] > 0.0)).any(axis=0)
        if not moved.any() or used.sum() < MIN_ROW_INPUTS:
            continue
        share = parts[columns][used] / size[columns][used, None]  # (metered, m): each one's class composition
        utilisation = _utilisations(parts[columns], mean[columns][None, :], consuming, 1)[0][0]
        residual = mean[columns][used] / size[columns][used] - share @ utilisation
        customers = max(1.4826 * float(np.median(np.abs(residual))), CUSTOMER_SPREAD)
        shown = np.square(share).sum(axis=0) / customers**2  # (m,) the metered inputs' information on each class
        for direction in (consuming, ~consuming):
            seen = direction & (has & used[:, None]).any(axis=0)
            prior = max(float(np.std(utilisation[seen])) if seen.sum() > 1 else UNSHOWN_DEFAULT, UNSHOWN_FLOOR)
            for c in np.flatnonzero(direction & moved):
                column = np.zeros(x.shape[1])
                column[columns] = parts[columns, c] * unmetered[columns] / np.sqrt(prior**-2 + shown[c])
                yield i, int(c), column


def customer_errors(x: np.ndarray, network: object, shares: np.ndarray | None = None) -> np.ndarray:
    """(d, u) each unmetered input's own error, beside its class's (`class_errors`): a column per input some row
    leaves unmetered, moving it alone by its size times the share of rows it is unmetered times how far the metered
    inputs depart from their row's guess (`per_row`'s; relative to their size, robustly: 1.4826 MAD over up to
    SPREAD_ROWS rows, at least CUSTOMER_SPREAD; UNSHOWN_DEFAULT where no row meters MIN_ROW_INPUTS inputs of the half).
    On IEEE 33, whose loads vary each on its own, half of them unmetered and readings noise 1e-5, the worst bus held
    on 0.78-0.84 of in-range queries with the class errors alone (models.pseudo_errors widens both by the readings).
    `shares`: as `per_row`'s."""
    x = np.asarray(x, dtype=np.float64)
    parts, consuming = _classes(network)
    size = np.abs(parts).sum(axis=1)
    unmetered = np.isnan(x).mean(axis=0)
    rows = _spread_rows(x.shape[0])
    spread = np.full(x.shape[1], UNSHOWN_DEFAULT)
    typical = estimated(x, network)
    half = x.shape[1] // 2
    shares = profile_shares(x, network) if shares is None else shares
    for columns, share in zip((np.arange(half), np.arange(half, x.shape[1])), shares):
        values = x[np.ix_(rows, columns)]
        utilisation, fitted = _utilisations(parts[columns], values, consuming, MIN_ROW_INPUTS)
        guessed = share * (utilisation @ parts[columns].T) + (1.0 - share) * typical[columns]
        departure = (values - guessed)[fitted] / np.where(size[columns] > 0, size[columns], np.nan)
        departure = departure[np.isfinite(departure)]
        if departure.size:
            spread[columns] = max(1.4826 * float(np.median(np.abs(departure))), CUSTOMER_SPREAD)
    moved = np.flatnonzero((unmetered > 0.0) & (size > 0.0))
    out = np.zeros((x.shape[1], moved.size))
    out[moved, np.arange(moved.size)] = (spread * size * unmetered)[moved]
    return out


def profile_shares(x: np.ndarray, network: object) -> np.ndarray:
    """(2,) per half (P, Q) of context loads x (n, d; NaN: not read), how far a row's unmetered loads share the departure
    from their context-wide values that its metered loads' row fit shows: 1 where customers follow their class's
    profile, 0 where each load varies on its own (module docstring). The metered inputs read in every one of up to
    SPREAD_ROWS rows are split in PROFILE_FOLDS; the row fit without a fold predicts its departures, whose covariance
    with the prediction is the shared part's variance, and the prediction's own variance beyond it the fit's noise
    (an empirical-Bayes shrinkage of the row fit toward the context-wide value), 0 below PROFILE_SHARE_FLOOR. 1 (the
    row fit whole) where fewer than 2 MIN_ROW_INPUTS inputs of a half are so read, or nothing varies."""
    x = np.asarray(x, dtype=np.float64)
    parts, consuming = _classes(network)
    size = np.abs(parts).sum(axis=1)
    values = x[_spread_rows(x.shape[0])]
    half = x.shape[1] // 2
    shares = np.ones(2)
    for i, columns in enumerate((np.arange(half), np.arange(half, x.shape[1]))):
        read = columns[~np.isnan(values[:, columns]).any(axis=0) & (size[columns] > 0.0)]
        if read.size < 2 * MIN_ROW_INPUTS:
            continue
        folds = min(PROFILE_FOLDS, read.size)
        shared = predicted = 0.0
        for fold in range(folds):
            other = read[fold::folds]
            masked = values[:, columns].copy()
            masked[:, np.searchsorted(columns, other)] = np.nan
            utilisation, _ = _utilisations(parts[columns], masked, consuming, MIN_ROW_INPUTS)
            guess = (utilisation @ parts[columns].T)[:, np.searchsorted(columns, other)] / size[other]
            seen = values[:, other] / size[other]
            guess, seen = guess - guess.mean(axis=0), seen - seen.mean(axis=0)
            shared += float(np.sum(guess * seen))
            predicted += float(np.sum(np.square(guess)))
        if predicted <= 0.0:
            continue
        # a fit on every metered input has the noise of one on (folds - 1) / folds of them, times that share
        noise = max(predicted - shared, 0.0) * (folds - 1) / folds
        share = float(np.clip(shared / (shared + noise), 0.0, 1.0)) if shared > 0.0 else 0.0
        shares[i] = share if share >= PROFILE_SHARE_FLOOR else 0.0
    return shares


def _spread_rows(n: int) -> np.ndarray:
    """Up to SPREAD_ROWS of n rows, evenly spaced: where the metered loads' spread about their guess is measured."""
    return np.unique(np.linspace(0, n - 1, min(n, SPREAD_ROWS)).astype(int))


def sizes_of(network: object) -> np.ndarray:
    """(d,) each load input's size: the consumption plus the generation the network model places there (MW, Mvar)."""
    sizes: np.ndarray = np.abs(parts_of(network)).sum(axis=1)
    return sizes


def parts_of(network: object) -> np.ndarray:
    """(d, 2 C + 2): each input's base consumption of every class, the consumption no class names, then its base
    generation likewise, negated (it lowers the net load)."""
    consumption = np.asarray(network.base_consumption, dtype=np.float64)  # type: ignore[attr-defined]
    generation = np.asarray(network.base_generation, dtype=np.float64)  # type: ignore[attr-defined]
    by_class_c = np.asarray(network.class_consumption, dtype=np.float64).reshape(-1, consumption.size)  # type: ignore[attr-defined]
    by_class_g = np.asarray(network.class_generation, dtype=np.float64).reshape(-1, generation.size)  # type: ignore[attr-defined]
    rest_c = consumption - by_class_c.sum(axis=0)
    rest_g = generation - by_class_g.sum(axis=0)
    return np.column_stack([by_class_c.T, rest_c, -by_class_g.T, -rest_g])


def _metered_means(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(d,) which inputs context loads x meter in at least MIN_ROWS rows (or every row of a shorter context), and
    (d,) their means over the rows that read them (NaN for the others)."""
    read = (~np.isnan(x)).sum(axis=0)
    metered = read >= min(MIN_ROWS, x.shape[0])
    mean = np.where(metered, np.nanmean(np.where(read > 0, x, 0.0), axis=0), np.nan)
    return metered, mean


def _classes(network: object) -> tuple[np.ndarray, np.ndarray]:
    """`parts_of` the network as fitted, and (m,) bool: which of its columns are consumption. Only the classes some
    load has, at most MAX_CLASSES per direction: the largest by rating, the rest folded into one (an upload names a
    class per load at will: 200 loads of a class each took `per_row` 2.5 s on 100 rows, m^3 per row; 500 would have
    taken an hour and gigabytes on a 10,000-row context)."""
    parts = parts_of(network)
    classes = np.asarray(network.class_consumption).reshape(-1, parts.shape[0]).shape[0]  # type: ignore[attr-defined]
    consumption = np.arange(parts.shape[1]) < classes + 1
    rating = np.abs(parts).sum(axis=0)
    kept: list[np.ndarray] = []
    directions: list[bool] = []
    for is_consumption, direction in ((True, consumption), (False, ~consumption)):
        present = np.flatnonzero(direction & (rating > 0.0))
        order = present[np.argsort(-rating[present], kind="stable")]
        columns = [parts[:, c] for c in order[: MAX_CLASSES - 1]]
        if order.size >= MAX_CLASSES:
            columns.append(parts[:, order[MAX_CLASSES - 1 :]].sum(axis=1))
        columns = columns or [np.zeros(parts.shape[0])]  # a direction no load has: one empty column, as a class
        kept += columns
        directions += [is_consumption] * len(columns)
    consuming: np.ndarray = np.asarray(directions, dtype=bool)
    return np.column_stack(kept), consuming


def _utilisations(
    parts: np.ndarray, values: np.ndarray, consumption: np.ndarray, least: int
) -> tuple[np.ndarray, np.ndarray]:
    """(r, m) utilisations u per row of `values` (r, k; NaN: not read) with values ~ parts @ u over the inputs read
    (parts (k, m)), each input's residual relative to its size, robustly (BIWEIGHT_C); per class shrunk toward its
    direction's (`consumption`: (m,) bool, the consumption classes' columns), those toward one for both
    (SHRINKAGE); and (r,) whether a row read at least `least` inputs with a size (else its row of u is 0)."""
    size = np.abs(parts).sum(axis=1)
    sized = size > 0.0
    a = parts[sized] / size[sized, None]  # (k', m)
    b = values[:, sized] / size[sized]  # (r, k')
    read = ~np.isnan(b)
    fitted = read.sum(axis=1) >= max(least, 1)
    b = np.where(read, b, 0.0)
    directions = np.column_stack([a[:, consumption].sum(axis=1), a[:, ~consumption].sum(axis=1)])
    weight = read.astype(np.float64)
    u = np.zeros((values.shape[0], parts.shape[1]))
    for _ in range(ROBUST_PASSES):
        single = _ridge(directions.sum(axis=1, keepdims=True), b, weight, np.ones((len(b), 1)), 1e-9)
        pooled = _ridge(directions, b, weight, np.repeat(single, 2, axis=1), SHRINKAGE)
        u = _ridge(a, b, weight, np.where(consumption[None, :], pooled[:, :1], pooled[:, 1:]), SHRINKAGE)
        residual = np.where(read, b - u @ a.T, np.nan)
        scale = np.full(len(b), SPREAD_FLOOR)  # a row reading nothing: its weights stay 0
        some = read.any(axis=1)
        scale[some] = np.maximum(1.4826 * np.nanmedian(np.abs(residual[some]), axis=1), SPREAD_FLOOR)
        weight = np.where(read, np.square(np.clip(1.0 - np.square(residual / (BIWEIGHT_C * scale[:, None])), 0, 1)), 0)
    return np.where(fitted[:, None], u, 0.0), fitted


def _ridge(a: np.ndarray, b: np.ndarray, weight: np.ndarray, prior: np.ndarray, strength: float) -> np.ndarray:
    """(r, m): per row of b (r, k) and weight (r, k), argmin_u sum_i weight_i (a_i u - b_i)^2 + strength |u - prior|^2
    (prior (r, m); strength > 0 keeps a class no input shows at its prior)."""
    gram = (a.T[None, :, :] * weight[:, None, :]) @ a + strength * np.eye(a.shape[1])
    rhs = (weight * b) @ a + strength * prior
    out: np.ndarray = np.linalg.solve(gram, rhs[:, :, None])[:, :, 0]
    return out
