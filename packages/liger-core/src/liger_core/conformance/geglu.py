"""Conformance cases for `geglu`."""

from __future__ import annotations

import pytest

from liger_core.conformance import DTYPES
from liger_core.conformance._glu_cases import BAD_INPUTS, SHAPES, run_bad_input, run_non_contiguous, run_shape
from liger_core.conformance.geglu_check import check_geglu, make_inputs  # noqa: F401 (re-exported)
from liger_core.ops import geglu as contract


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_geglu_shapes(conformance_backend, conformance_device, shape, dtype):
    run_shape(conformance_backend, conformance_device, "geglu", contract.math, shape, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_geglu_in_place(conformance_backend, conformance_device, dtype):
    run_shape(conformance_backend, conformance_device, "geglu", contract.math, (3, 4099), dtype, in_place=True)


@pytest.mark.parametrize("in_place", (False, True), ids=("copy", "inplace"))
def test_geglu_non_contiguous_input(conformance_backend, conformance_device, in_place):
    run_non_contiguous(conformance_backend, conformance_device, "geglu", contract.math, in_place)


@pytest.mark.parametrize("case,error,pattern", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_geglu_bad_input(conformance_backend, conformance_device, case, error, pattern):
    run_bad_input(conformance_backend, conformance_device, "geglu", case, error, pattern)
