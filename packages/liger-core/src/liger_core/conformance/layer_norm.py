"""Conformance cases for `layer_norm`."""

from __future__ import annotations

import itertools

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.layer_norm_check import check_layer_norm, make_inputs  # noqa: F401 (re-exported)

# Odd sizes, one column, several programs' worth of short rows, 3-D input, a row wider
# than any vendor's single tile, and an empty batch.
SHAPES = [(1, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (1, 16500), (0, 48)]
OPTIONS = list(itertools.product((True, False), (True, False)))  # has_weight, has_bias


def _dtype_id(d):
    return str(d).removeprefix("torch.")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layer_norm_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "layer_norm")
    x, w, b, dy = make_inputs(shape, dtype, conformance_device)
    check_layer_norm(conformance_backend, x, w, b, dy)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_dtype_id)
@pytest.mark.parametrize(
    "has_weight,has_bias", OPTIONS, ids=[f"{'w' if w else 'now'}-{'b' if b else 'nob'}" for w, b in OPTIONS]
)
def test_layer_norm_options(conformance_backend, conformance_device, dtype, has_weight, has_bias):
    require_op(conformance_backend, "layer_norm")
    x, w, b, dy = make_inputs((37, 96), dtype, conformance_device, has_weight=has_weight, has_bias=has_bias)
    check_layer_norm(conformance_backend, x, w, b, dy, eps=1e-6)


def test_layer_norm_float32_params_with_bf16_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "layer_norm")
    x, w, b, dy = make_inputs((9, 130), torch.bfloat16, conformance_device, param_dtype=torch.float32)
    check_layer_norm(conformance_backend, x, w, b, dy)


def test_layer_norm_large_mean(conformance_backend, conformance_device):
    # A mean far above the spread: a one-pass E[x^2] - E[x]^2 variance would cancel.
    require_op(conformance_backend, "layer_norm")
    x, w, b, dy = make_inputs((6, 300), torch.float32, conformance_device)
    check_layer_norm(conformance_backend, x + 100.0, w, b, dy)


def test_layer_norm_non_contiguous_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "layer_norm")
    base, w, b, _ = make_inputs((40, 66), torch.float32, conformance_device)
    x = base.t()[:33]  # (33, 40) view with strides (1, 66)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(conformance_device)
    check_layer_norm(conformance_backend, x, w[:40].contiguous(), b[:40].contiguous(), dy)


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("mixed_devices", ValueError, r"one device.*x is on .*weight is on"),
        ("bias_device", ValueError, r"one device.*x is on .*bias is on"),
        ("weight_shape", ValueError, r"weight must have shape \(hidden,\) = \(16,\).*\(15,\)"),
        ("bias_shape", ValueError, r"bias must have shape \(hidden,\) = \(16,\).*\(2, 16\)"),
        ("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64"),
        ("bias_dtype", TypeError, r"bias must have dtype .*got float64"),
        ("negative_eps", ValueError, r"eps must be a number >= 0; got -1"),
        ("scalar", ValueError, r"at least 1 dimension"),
    ],
)
def test_layer_norm_bad_input(conformance_backend, conformance_device, case, error, pattern):
    op = require_op(conformance_backend, "layer_norm")
    x, w, b, _ = make_inputs((4, 16), torch.float32, conformance_device)
    eps = 1e-5
    if case == "mixed_devices":
        w = w.to(_other_device(conformance_device))
    elif case == "bias_device":
        b = b.to(_other_device(conformance_device))
    elif case == "weight_shape":
        w = w[:15]
    elif case == "bias_shape":
        b = b.expand(2, 16)
    elif case == "int_dtype":
        x = x.long()
    elif case == "bias_dtype":
        b = b.double()
    elif case == "negative_eps":
        eps = -1
    elif case == "scalar":
        x = x[0, 0]
    with pytest.raises(error, match=pattern):
        op(x, w, b, eps)
