"""The shipped checkpoints (and physics-fit) answer as they did when they were trained and calibrated.

tests/models/data/shipped_reference.json holds their answers computed with the code before the base
fit was refactored (see tests/models/data/shipped_reference.py for how it was made); a change of the
base fit's penalty grid, its leave-one-out guard, a scale floor or the leverage feature moves them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.models.data import shipped_reference as ref

REFERENCE = json.loads(ref.PATH.read_text())
FIELDS = ("loc", "mean-loc", "q025-loc", "q975-loc")


def _cases():
    by_model: dict[tuple[str, str], list[dict]] = {}
    for case in REFERENCE["cases"]:
        by_model.setdefault((case["model"], case["network"]), []).append(case)
    return [
        pytest.param(model, network, cases, id=f"{model}@{network}") for (model, network), cases in by_model.items()
    ]


def test_reference_covers_every_case_the_script_names():
    assert [(c["model"], c["network"], c["n"]) for c in REFERENCE["cases"]] == [
        (name, network, n) for name, network, sizes in ref.CASES for n in sizes
    ]


@pytest.mark.parametrize("model, network, cases", _cases())
def test_answers_equal_the_reference(model, network, cases):
    method = ref.method_of(model, network)
    for case in cases:
        now = ref.answers(method, network, case["n"])
        where = f"{model} on {network}, n={case['n']}"
        # the context itself first: if gridsim changed, the reference no longer applies
        np.testing.assert_allclose(
            [now["x_sum"], now["y_sum"]],
            [case["x_sum"], case["y_sum"]],
            rtol=1e-9,
            err_msg=f"{where}: gridsim's context changed, not the model",
        )
        for field in FIELDS:
            np.testing.assert_allclose(now[field], case[field], rtol=1e-6, atol=1e-12, err_msg=f"{where}: {field}")
