"""service.engine.sparse and the pieces a sparse context passes through: content ids that hash where values
are missing, the extrapolation measure over measured loads, per-bus metering, the capability check, and
table cells read with missing values allowed."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pyarrow as pa
import pytest

import gridsim
from models.off_context import ContextGeometry
from models.registry import load_registry
from service.engine import sparse
from service.engine.context_sets import ContextSet, context_id
from service.engine.errors import InvalidInput
from service.engine.load_table import InputError, as_float, as_load
from tests.service.conftest import MODEL


@pytest.fixture(scope="module")
def context():
    result = gridsim.simulate(120, 0.2, 2)
    return result.x, result.vm_pu


def test_a_full_context_keeps_the_id_it_always_had(context):
    x, y = context
    digest = hashlib.sha256(b"gridpfn-context-v2")
    digest.update(b"ieee33\0" + struct.pack("<4q", *x.shape, *y.shape))
    digest.update(np.ascontiguousarray(x, dtype="<f8").tobytes() + np.ascontiguousarray(y, dtype="<f8").tobytes())
    assert context_id(x, y) == digest.hexdigest()


def test_missing_values_are_hashed_and_never_collide_with_a_number(context):
    x, y = context
    sparse_y = y.copy()
    sparse_y[:, 4] = np.nan
    negative = sparse_y.copy()
    negative[:, 4] = -np.nan  # another NaN bit pattern: the same missing value
    ids = {context_id(x, sparse_y), context_id(x, negative)}
    assert len(ids) == 1
    filled = y.copy()
    filled[:, 4] = 0.0
    assert context_id(x, filled) not in ids and context_id(x, y) not in ids
    assert context_id(x, sparse_y, typical_loads=x[0]) not in ids
    ctx = ContextSet.build(x, negative, typical_loads=x[0])
    back = ContextSet.from_bytes(ctx.id, ctx.to_bytes())
    assert np.array_equal(back.y, ctx.y, equal_nan=True) and np.array_equal(back.typical_loads, x[0])
    assert back.missing == "y" and back.metering.readings[4] == 0 and back.metering.metered.sum() == y.shape[1] - 1


def test_extrapolation_is_measured_over_the_loads_the_context_measured(context):
    x, y = context
    partly = x.copy()
    partly[:, 7] = np.nan  # never metered: a query's value there places it nowhere
    partly[::5, 9] = np.nan  # partly metered: missing rows take the column's mean
    geometry = sparse.geometry(partly)
    queries = x[:5].copy()
    queries[:, 7] = 50.0  # far from anything, but on a load the context never measured
    out = geometry.extrapolation(queries)
    assert np.isfinite(out).all() and (out < 1.5).all()
    kept = np.delete(np.arange(x.shape[1]), 7)
    filled = x[:, kept].copy()
    column = list(kept).index(9)
    filled[::5, column] = np.nanmean(partly[:, 9])
    np.testing.assert_allclose(out, ContextGeometry.of(filled).extrapolation(x[:5, kept]), rtol=1e-12)
    assert isinstance(sparse.geometry(x), ContextGeometry)  # a full context: the plain geometry
    nothing = sparse.geometry(np.full_like(x, np.nan))
    assert (nothing.extrapolation(queries) == 0).all()


def test_only_methods_that_declare_it_get_missing_values(model_dir):
    registry = load_registry(model_dir, warmup=False, width_free=True)
    net = gridsim.network("ieee33")
    fit, physics = registry.get("network-fit", net), registry.get("physics-fit", net)
    checkpoint = registry.get(MODEL, net)
    assert fit.method.accepts_missing and not physics.method.accepts_missing
    assert not checkpoint.method.accepts_missing
    sparse.refuse_unless_accepted(fit.method, fit.name, "x and y", None)
    sparse.refuse_unless_accepted(physics.method, physics.name, None, None)  # a full context: anyone
    with pytest.raises(InvalidInput) as refused:
        sparse.refuse_unless_accepted(physics.method, physics.name, "y", "context_id")
    entry = refused.value.entries[0]
    assert entry["field"] == "context_id" and "network-fit" in entry["expected"] and "in y" in entry["message"]
    with pytest.raises(InvalidInput) as inline:
        sparse.refuse_unless_accepted(physics.method, physics.name, "x and y", None)
    assert inline.value.entries[0]["field"] == "context.x"
    with pytest.raises(InvalidInput, match=r"body.y\[2\]"):
        sparse.check_rows(np.array([[1.0, np.nan], [np.nan, 1.0], [np.nan, np.nan]]), "body.y")


def test_table_cells_may_be_missing_in_a_context_and_never_in_queries():
    column = pa.chunked_array([[0.1, None, float("nan"), 0.2]])
    with pytest.raises(InputError, match="missing value") as refused:
        as_load(column, "p_mw_bus2", 0)
    assert refused.value.row == 2
    values = as_load(column, "p_mw_bus2", 0, missing=True)
    assert np.isnan(values[1:3]).all() and values[0] == 0.1
    assert np.isnan(as_float(pa.array([None, None]), "vm_pu_bus2", 0, missing=True)).all()  # type null
    with pytest.raises(InputError, match="not finite") as infinite:
        as_float(pa.array([1.0, float("inf")]), "vm_pu_bus2", 10, missing=True)
    assert infinite.value.row == 12
    with pytest.raises(InputError, match="outside"):
        as_load(pa.array([None, 5000.0]), "p_mw_bus2", 0, missing=True)
