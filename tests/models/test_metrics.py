import numpy as np
import pytest

from models.metrics import accuracy_summary
from models.predictive import GaussianPredictive


def test_summary_of_a_known_gaussian():
    rng = np.random.default_rng(0)
    mu = np.zeros((20000, 2))
    sigma = np.ones((20000, 2)) * np.array([1.0, 2.0])
    y = rng.normal(size=mu.shape) * sigma
    s = accuracy_summary(GaussianPredictive(mu, sigma), y)
    assert s["max_mae"] == pytest.approx(2.0 * np.sqrt(2 / np.pi), rel=0.03)
    assert s["max_mse"] == pytest.approx(4.0, rel=0.05)
    assert 0.94 < s["coverage_worst"] <= s["coverage_mean"] <= s["coverage_best"] < 0.96
    expected_nll = 0.5 * np.log(2 * np.pi) + 0.5 + 0.5 * np.log(2.0)  # mean over the two outputs
    assert s["nll"] == pytest.approx(expected_nll, rel=0.02)


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="y_true"):
        accuracy_summary(GaussianPredictive(np.zeros((3, 2)), np.ones((3, 2))), np.zeros((3, 3)))
