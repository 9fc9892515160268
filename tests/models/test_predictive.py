"""models.predictive: the distributions every method answers with."""

import numpy as np
from scipy import stats

from models.predictive import GaussianPredictive, StudentTPredictive


def test_student_t_agrees_with_scipy_and_tends_to_the_gaussian():
    mu, scale = np.array([[1.0, 0.99]]), np.array([[1e-4, 2e-4]])
    t = StudentTPredictive(mu, scale, dof=5.0)
    ref = stats.t(df=5.0, loc=mu, scale=scale)
    assert np.allclose(t.quantile([0.025, 0.975]), np.stack([ref.ppf(0.025), ref.ppf(0.975)]), rtol=0, atol=1e-15)
    assert np.allclose(t.cdf(1.0001), ref.cdf(1.0001))
    assert np.allclose(t.log_prob(np.array([[1.0002, 0.99]])), ref.logpdf(np.array([[1.0002, 0.99]])))
    assert np.allclose(t.std, ref.std())
    wide = StudentTPredictive(mu, scale, dof=1e7)
    assert np.allclose(wide.quantile([0.975]), GaussianPredictive(mu, scale).quantile([0.975]), rtol=0, atol=1e-9)
