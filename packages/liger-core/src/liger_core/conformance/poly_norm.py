"""Conformance cases for `poly_norm`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.poly_norm_check import check_poly_norm, make_inputs  # noqa: F401 (re-exported)

# Odd sizes, one column, several programs' worth of short rows, 3-D input, a row wider
# than any vendor's single tile, and an empty batch.
SHAPES = [(1, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (1, 16500), (0, 48)]


def _dtype_id(d):
    return str(d).removeprefix("torch.")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_poly_norm_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "poly_norm")
    x, w, b, dy = make_inputs(shape, dtype, conformance_device)
    check_poly_norm(conformance_backend, x, w, b, dy)


@pytest.mark.parametrize("bias_shape", [(1,), ()], ids=["bias1", "bias0d"])
@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_poly_norm_options(conformance_backend, conformance_device, bias_shape, eps):
    require_op(conformance_backend, "poly_norm")
    x, w, b, dy = make_inputs((37, 96), torch.float32, conformance_device, bias_shape=bias_shape)
    check_poly_norm(conformance_backend, x, w, b, dy, eps=eps)


def test_poly_norm_float32_params_with_bf16_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "poly_norm")
    x, w, b, dy = make_inputs((9, 130), torch.bfloat16, conformance_device, param_dtype=torch.float32)
    check_poly_norm(conformance_backend, x, w, b, dy)


def test_poly_norm_non_contiguous_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "poly_norm")
    base, w, b, _ = make_inputs((40, 66), torch.float32, conformance_device)
    x = base.t()[:33]  # (33, 40) view with strides (1, 66)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(conformance_device)
    check_poly_norm(conformance_backend, x, w, b, dy)


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("mixed_devices", ValueError, r"one device.*x is on .*weight is on"),
        ("weight_shape", ValueError, r"weight must have shape \(3,\); got weight.shape=\(2,\)"),
        ("bias_shape", ValueError, r"bias must have shape \(1,\) or \(\); got bias.shape=\(2,\)"),
        ("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64"),
        ("weight_dtype", TypeError, r"weight must have dtype .*got float64"),
        ("negative_eps", ValueError, r"eps must be a number >= 0; got -1"),
        ("scalar", ValueError, r"at least 1 dimension"),
    ],
)
def test_poly_norm_bad_input(conformance_backend, conformance_device, case, error, pattern):
    op = require_op(conformance_backend, "poly_norm")
    x, w, b, _ = make_inputs((4, 16), torch.float32, conformance_device)
    eps = 1e-6
    if case == "mixed_devices":
        w = w.to(_other_device(conformance_device))
    elif case == "weight_shape":
        w = w[:2]
    elif case == "bias_shape":
        b = torch.cat([b, b])
    elif case == "int_dtype":
        x = x.long()
    elif case == "weight_dtype":
        w = w.double()
    elif case == "negative_eps":
        eps = -1
    elif case == "scalar":
        x = x[0, 0]
    with pytest.raises(error, match=pattern):
        op(x, w, b, eps)
