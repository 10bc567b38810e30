"""Conformance cases for `sparsemax`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.sparsemax_check import check_sparsemax, make_inputs

# A single element, odd rows, several programs' worth of short rows, 3-D input, rows wider
# than any vendor's single tile, an empty batch.
SHAPES = [(1,), (5, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (2, 20000), (0, 48)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_sparsemax_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "sparsemax")
    x, dy = make_inputs(shape, dtype, conformance_device)
    check_sparsemax(conformance_backend, x, dy)


@pytest.mark.parametrize("dim", (0, 1, -2, 2, -3))
def test_sparsemax_dim(conformance_backend, conformance_device, dim):
    require_op(conformance_backend, "sparsemax")
    x, dy = make_inputs((5, 6, 7), torch.float32, conformance_device)
    check_sparsemax(conformance_backend, x, dy, dim)


def test_sparsemax_non_contiguous_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "sparsemax")
    x, dy = make_inputs((40, 66), torch.float32, conformance_device)
    check_sparsemax(conformance_backend, x.t()[:33], dy.t()[:33])


def test_sparsemax_ties_and_one_hot(conformance_backend, conformance_device):
    """Equal entries share the support; one dominant entry takes everything."""
    require_op(conformance_backend, "sparsemax")
    x = torch.tensor([[1.0, 1.0, 1.0, -1.0], [0.25, 0.25, 0.25, 0.25], [5.0, 0.0, 0.5, 1.0]])
    dy = torch.tensor([[1.0, -2.0, 0.5, 3.0], [1.0, 2.0, 3.0, 4.0], [-1.0, 2.0, 0.5, 0.25]])
    check_sparsemax(conformance_backend, x.to(conformance_device), dy.to(conformance_device))


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64"),
        ("scalar", ValueError, r"at least 1 dimension"),
        ("dim_range", IndexError, r"dim must be in \[-2, 1\] for x of 2 dimensions; got 2"),
        ("dim_type", TypeError, r"dim must be an int; got float"),
    ],
)
def test_sparsemax_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "sparsemax")
    x, _ = make_inputs((4, 16), torch.float32, conformance_device)
    dim = -1
    if case == "int_dtype":
        x = x.long()
    elif case == "scalar":
        x = x[0, 0]
    elif case == "dim_range":
        dim = 2
    elif case == "dim_type":
        dim = 1.0
    with pytest.raises(error, match=pattern):
        fn(x, dim)
