"""Conformance cases for `softmax`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.softmax_check import check_softmax, make_inputs

# A single element, odd rows, several programs' worth of short rows, 3-D input, rows wider
# than any vendor's single tile, an empty batch.
SHAPES = [(1,), (5, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (3, 40000), (0, 48)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_softmax_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "softmax")
    x, dy = make_inputs(shape, dtype, conformance_device)
    check_softmax(conformance_backend, x, dy)


def test_softmax_non_contiguous_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "softmax")
    x, dy = make_inputs((40, 66), torch.float32, conformance_device)
    check_softmax(conformance_backend, x.t()[:33], dy.t()[:33])


def test_softmax_large_logits_and_minus_inf(conformance_backend, conformance_device):
    """Stable for logits far beyond exp's range; masked (-inf) entries get zero."""
    require_op(conformance_backend, "softmax")
    x, dy = make_inputs((6, 50), torch.float32, conformance_device)
    x = x * 100
    x[:, ::7] = float("-inf")
    check_softmax(conformance_backend, x, dy)


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64"),
        ("float64", TypeError, r"x must have dtype .*got float64"),
        ("scalar", ValueError, r"at least 1 dimension"),
    ],
)
def test_softmax_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "softmax")
    x, _ = make_inputs((4, 16), torch.float32, conformance_device)
    x = {"int_dtype": x.long(), "float64": x.double(), "scalar": x[0, 0]}[case]
    with pytest.raises(error, match=pattern):
        fn(x)
