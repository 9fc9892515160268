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
# Answers must equal the reference to this share of each answer's 95 % interval width (float rounding
# differs between CPUs: the stable cases agree to ~3e-6 widths between an AMD EPYC and an Intel Xeon host).
SAME = 1e-4
# Cases whose answer is not a continuous function of the context at its last digits, so another CPU's
# rounding moves them: the values are how far (in interval widths) an Intel Xeon host's answers lay from
# the reference made on an AMD EPYC host, 2026-11-26. On the same host a 1e-13 relative change of the
# context's loads moved the mv_oberrhein case's mean by 0.76 widths and transformer-dva/0.9.0's at 24 rows
# by 0.035. Held to one width: a regression of the base fit or the bars still shows; the instability
# itself is a known defect (CHANGELOG).
UNSTABLE = {
    ("transformer-dva-fast/0.3.1-mv_oberrhein_sub0", 300): 0.34,
    ("transformer-dva/0.9.0", 24): 0.16,
    ("transformer-dva/0.7.0", 24): 0.020,
    ("transformer-dva-fast/0.2.2", 24): 0.012,
    ("cnn-dva/0.3.1", 24): 0.013,
}


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
        width = np.asarray(case["q975-loc"]) - np.asarray(case["q025-loc"])
        share = 1.0 if (model, case["n"]) in UNSTABLE else SAME
        for field in FIELDS:
            moved = np.abs(np.asarray(now[field]) - np.asarray(case[field]))
            assert np.all(moved <= 1e-12 + share * width), (
                f"{where}: {field} moved by up to {float(np.max(moved / np.maximum(width, 1e-300))):.2e} "
                f"interval widths (allowed {share})"
            )
