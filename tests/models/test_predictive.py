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


def test_cdf_many_is_each_cdf_for_location_scale_answers():
    mu, scale = np.array([[1.0, 0.99], [1.01, 0.98]]), np.array([[1e-4, 2e-4], [3e-4, 1e-3]])
    values = mu[None] + np.array([-3e-4, 0.0, 5e-4])[:, None, None]
    for pred in (GaussianPredictive(mu, scale), StudentTPredictive(mu, scale, dof=4.0)):
        many = pred.cdf_many(values)
        assert many.shape == (3, 2, 2)
        np.testing.assert_array_equal(many, np.stack([pred.cdf(v) for v in values]))
        np.testing.assert_array_equal(many[1], np.full((2, 2), 0.5))


def test_an_answer_plus_a_normal_error_is_the_convolution():
    """cdf_with_error: exact for a normal answer; for a t by quadrature over its Gamma precision, to 1e-9 of the
    convolution on a fine grid, from an error 20x narrower than the answer to 30x wider, dof 15 (the fewest
    context rows a fit takes) to 20,000."""
    mu, scale = np.zeros((1, 3)), np.ones((1, 3))
    error = np.array([[0.05, 1.0, 30.0]])
    values = np.array([-6.0, -2.0, 0.3, 3.0, 60.0])[:, None, None] * np.ones((1, 1, 3))
    gauss = GaussianPredictive(mu, scale).cdf_with_error(values, error)
    np.testing.assert_allclose(gauss, stats.norm.cdf(values / np.sqrt(1.0 + error**2)), rtol=0.0, atol=1e-15)
    grid = np.linspace(-200.0, 200.0, 2_000_001)
    for dof in (15.0, 499.0, 20_000.0):
        got = StudentTPredictive(mu, scale, dof).cdf_with_error(values, error)
        density = stats.t.pdf(grid, dof) * (grid[1] - grid[0])
        for j in range(3):
            for i in range(len(values)):
                ref = np.sum(density * stats.norm.cdf((values[i, 0, j] - grid) / error[0, j]))
                assert abs(got[i, 0, j] - ref) < 1e-9, (dof, i, j)
