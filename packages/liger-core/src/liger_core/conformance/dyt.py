"""Conformance cases for `dyt`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.dyt_check import check_dyt, make_inputs  # noqa: F401 (re-exported)

# Odd sizes, one column, several programs' worth of short rows, 3-D input, a row wider
# than any vendor's single tile, and an empty batch.
SHAPES = [(1, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (1, 16500), (0, 48)]


def _dtype_id(d):
    return str(d).removeprefix("torch.")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_dyt_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "dyt")
    x, alpha, gamma, beta, dy = make_inputs(shape, dtype, conformance_device)
    check_dyt(conformance_backend, x, alpha, gamma, beta, dy)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_dtype_id)
@pytest.mark.parametrize("has_beta", [True, False], ids=["beta", "nobeta"])
@pytest.mark.parametrize("alpha_shape", [(1,), ()], ids=["alpha1", "alpha0d"])
def test_dyt_options(conformance_backend, conformance_device, dtype, has_beta, alpha_shape):
    require_op(conformance_backend, "dyt")
    x, alpha, gamma, beta, dy = make_inputs(
        (37, 96), dtype, conformance_device, has_beta=has_beta, alpha_shape=alpha_shape
    )
    check_dyt(conformance_backend, x, alpha, gamma, beta, dy)


def test_dyt_float32_params_with_bf16_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "dyt")
    x, alpha, gamma, beta, dy = make_inputs((9, 130), torch.bfloat16, conformance_device, param_dtype=torch.float32)
    check_dyt(conformance_backend, x, alpha, gamma, beta, dy)


def test_dyt_non_contiguous_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "dyt")
    base, alpha, gamma, beta, _ = make_inputs((40, 66), torch.float32, conformance_device)
    x = base.t()[:33]  # (33, 40) view with strides (1, 66)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(conformance_device)
    check_dyt(conformance_backend, x, alpha, gamma[:40].contiguous(), beta[:40].contiguous(), dy)


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("mixed_devices", ValueError, r"one device.*x is on .*gamma is on"),
        ("alpha_shape", ValueError, r"alpha must have shape \(1,\) or \(\); got alpha.shape=\(2,\)"),
        ("gamma_shape", ValueError, r"gamma must have shape \(hidden,\) = \(16,\).*\(15,\)"),
        ("beta_shape", ValueError, r"beta must have shape \(hidden,\) = \(16,\).*\(17,\)"),
        ("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64"),
        ("alpha_dtype", TypeError, r"alpha must have dtype .*got float64"),
        ("scalar", ValueError, r"at least 1 dimension"),
    ],
)
def test_dyt_bad_input(conformance_backend, conformance_device, case, error, pattern):
    op = require_op(conformance_backend, "dyt")
    x, alpha, gamma, beta, _ = make_inputs((4, 16), torch.float32, conformance_device)
    if case == "mixed_devices":
        gamma = gamma.to(_other_device(conformance_device))
    elif case == "alpha_shape":
        alpha = torch.cat([alpha, alpha])
    elif case == "gamma_shape":
        gamma = gamma[:15]
    elif case == "beta_shape":
        beta = torch.cat([beta, beta[:1]])
    elif case == "int_dtype":
        x = x.long()
    elif case == "alpha_dtype":
        alpha = alpha.double()
    elif case == "scalar":
        x = x[0, 0]
    with pytest.raises(error, match=pattern):
        op(x, alpha, gamma, beta)
