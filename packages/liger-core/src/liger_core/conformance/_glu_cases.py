"""Conformance cases shared by `swiglu` and `geglu` (each op's module instantiates them)."""

from __future__ import annotations

import torch

from liger_core.conformance import require_op
from liger_core.conformance._glu_check import check_glu, make_glu_inputs

# A single element, odd sizes, 3-D input, several programs' worth of a 14336-wide row
# (LLaMA-3-8B's intermediate size) and an empty batch.
SHAPES = [(1,), (5, 3), (2, 7, 33), (3, 4099), (1, 14336), (0, 48)]

BAD_INPUTS = [
    ("mixed_devices", ValueError, r"one device.*a is on .*b is on"),
    ("shape", ValueError, r"a and b must have the same shape; got a.shape=\(4, 16\), b.shape=\(4, 15\)"),
    ("dtype", TypeError, r"a and b must have the same dtype; got a.dtype=float32, b.dtype=float16"),
    ("int_dtype", TypeError, r"a must have dtype float32, bfloat16, float16; got int64"),
    ("float64", TypeError, r"b must have dtype .*got float64"),
    ("in_place", TypeError, r"in_place must be a bool; got str"),
]


def run_shape(backend, device, op, math, shape, dtype, in_place=False):
    require_op(backend, op)
    a, b, dy = make_glu_inputs(shape, dtype, device)
    check_glu(backend, op, math, a, b, dy, in_place)


def run_non_contiguous(backend, device, op, math, in_place):
    require_op(backend, op)
    a, b, dy = make_glu_inputs((40, 66), torch.float32, device)
    # (33, 40) views with strides (1, 66): columns of the stored matrices.
    check_glu(backend, op, math, a.t()[:33], b.t()[:33], dy.t()[:33].contiguous(), in_place)


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


def run_bad_input(backend, device, op, case, error, pattern):
    import pytest

    fn = require_op(backend, op)
    a, b, _ = make_glu_inputs((4, 16), torch.float32, device)
    in_place = False
    if case == "mixed_devices":
        b = b.to(_other_device(device))
    elif case == "shape":
        b = b[:, :15]
    elif case == "dtype":
        b = b.half()
    elif case == "int_dtype":
        a = a.long()
    elif case == "float64":
        b = b.double()
    elif case == "in_place":
        in_place = "yes"
    with pytest.raises(error, match=pattern):
        fn(a, b, in_place)
