"""models.pseudo_errors: the pseudo-measurements' errors widened as far as the context's readings show they erred."""

from __future__ import annotations

import numpy as np
import pytest

import gridsim
from gridsim.api import VoltageModel
from gridsim.sampling import sample_loads
from models import pseudo_errors, typical_loads
from models.network_fit import method_for
from service.engine import sparse


def _rows(rng: np.random.Generator, responses: list[np.ndarray], sizes: tuple[float, ...], n: int = 400) -> np.ndarray:
    """n rows of readings' residuals: each block's unit-std errors times its true size, plus noise 1e-5."""
    k = responses[0].shape[0]
    out = rng.normal(0.0, 1e-5, (n, k))
    for response, size in zip(responses, sizes):
        out += size * rng.normal(0.0, 1.0, (n, response.shape[1])) @ response.T
    return out


def test_the_readings_say_how_far_each_block_erred_and_never_narrow_it() -> None:
    """A block that erred 4x its stated size is widened about 4x, one that erred as stated stays; blocks that erred
    less than stated keep their size (a feeder unlike its model must not make the spread trust the guesses more)."""
    rng = np.random.default_rng(3)
    classes, customers = rng.normal(0.0, 1e-3, (30, 3)), np.diag(rng.uniform(2e-4, 5e-4, 30))[:, :12]
    found = pseudo_errors.scales(_rows(rng, [classes, customers], (4.0, 1.0)), [classes, customers])
    assert found[0] == pytest.approx(4.0, rel=0.2) and found[1] == pytest.approx(1.0, abs=0.2)
    assert np.all(pseudo_errors.scales(_rows(rng, [classes, customers], (0.2, 0.3)), [classes, customers]) == 1.0)
    # more columns than buses: the likelihood in the buses' space finds the same
    wide = rng.normal(0.0, 1e-4, (30, 40))
    assert pseudo_errors.scales(_rows(rng, [classes, wide], (3.0, 1.0)), [classes, wide])[0] == pytest.approx(
        3.0, rel=0.2
    )


def test_a_short_context_or_a_block_that_moves_nothing_keeps_the_stated_sizes() -> None:
    rng = np.random.default_rng(4)
    classes = rng.normal(0.0, 1e-3, (30, 3))
    few = _rows(rng, [classes], (5.0,), n=pseudo_errors.MIN_ROWS - 1)
    np.testing.assert_array_equal(pseudo_errors.scales(few, [classes]), [1.0])
    np.testing.assert_array_equal(pseudo_errors.scales(_rows(rng, [classes], (5.0,)), [np.zeros((30, 3))]), [1.0])


@pytest.mark.parametrize("seed", [0, 6])
def test_ieee33_half_unmetered_holds_every_bus_where_the_stated_class_errors_did_not(seed: int) -> None:
    """IEEE 33 (loads each varying on its own, +-10 %), half its load buses never metered, readings noise 1e-5: with
    the class errors alone, as stated, the worst bus held on 0.44-0.45 of in-range queries in these two of 8 contexts;
    with each customer's own error and both blocks widened by the readings, on all of them."""
    network = gridsim.network("ieee33")
    truth, method = VoltageModel(network), method_for(network)
    rng = np.random.default_rng(seed)
    x = sample_loads(network, 500, 0.1, rng)
    y = truth(x) + rng.normal(0.0, 1e-5, (500, network.n_outputs))
    never = rng.random(network.n_load) >= 0.5
    context = x.copy()
    context[:, np.r_[never, never]] = np.nan
    queries = sample_loads(network, 300, 0.1, rng)
    pseudo = sparse.pseudo_loads(None, network, context)
    covered = []
    for errors in (
        typical_loads.class_errors(context, network),
        [typical_loads.class_errors(context, network), typical_loads.customer_errors(context, network)],
    ):
        answer = method.predict(method.fit(context, y, pseudo, errors), queries)
        covered.append(float((np.abs(answer.mu - truth(queries)) <= 1.96 * answer.sigma).mean(axis=0).min()))
    assert covered[0] < 0.6 and covered[1] >= 0.95
