"""Conformance cases for `group_norm`."""

from __future__ import annotations

import itertools

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.group_norm_check import check_group_norm, make_inputs  # noqa: F401 (re-exported)

# (shape, num_groups): 2-D input, one channel per group, odd spatial sizes, 2-D spatial,
# a group larger than any single tile (several programs per group), an empty batch.
SHAPES = [
    ((1, 1), 1),
    ((3, 6), 2),
    ((2, 6, 5), 3),
    ((3, 8, 7), 8),
    ((2, 12, 3, 5), 4),
    ((2, 8, 2500), 2),
    ((0, 4, 3), 2),
]
OPTIONS = list(itertools.product((True, False), (True, False)))  # has_weight, has_bias


def _dtype_id(d):
    return str(d).removeprefix("torch.")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("shape,num_groups", SHAPES, ids=[f"{'x'.join(map(str, s))}-g{g}" for s, g in SHAPES])
def test_group_norm_shapes(conformance_backend, conformance_device, shape, num_groups, dtype):
    require_op(conformance_backend, "group_norm")
    x, w, b, dy = make_inputs(shape, dtype, conformance_device)
    check_group_norm(conformance_backend, x, w, b, dy, num_groups)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_dtype_id)
@pytest.mark.parametrize(
    "has_weight,has_bias", OPTIONS, ids=[f"{'w' if w else 'now'}-{'b' if b else 'nob'}" for w, b in OPTIONS]
)
def test_group_norm_options(conformance_backend, conformance_device, dtype, has_weight, has_bias):
    require_op(conformance_backend, "group_norm")
    x, w, b, dy = make_inputs((3, 12, 40), dtype, conformance_device, has_weight=has_weight, has_bias=has_bias)
    check_group_norm(conformance_backend, x, w, b, dy, 4, eps=1e-6)


def test_group_norm_float32_params_with_bf16_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "group_norm")
    x, w, b, dy = make_inputs((2, 8, 33), torch.bfloat16, conformance_device, param_dtype=torch.float32)
    check_group_norm(conformance_backend, x, w, b, dy, 4)


def test_group_norm_large_mean(conformance_backend, conformance_device):
    # A mean far above the spread: a one-pass E[x^2] - E[x]^2 variance would cancel.
    require_op(conformance_backend, "group_norm")
    x, w, b, dy = make_inputs((2, 6, 100), torch.float32, conformance_device)
    check_group_norm(conformance_backend, x + 100.0, w, b, dy, 3)


def test_group_norm_non_contiguous_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "group_norm")
    base, _, _, _ = make_inputs((2, 9, 8, 6), torch.float32, conformance_device)
    x = base.permute(0, 3, 2, 1)  # (2, 6, 8, 9): channels last in memory
    _, w, b, dy = make_inputs(tuple(x.shape), torch.float32, conformance_device, seed=1)
    check_group_norm(conformance_backend, x, w, b, dy, 3)


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("mixed_devices", ValueError, r"one device.*x is on .*weight is on"),
        ("weight_shape", ValueError, r"weight must have shape \(channels,\) = \(6,\).*\(5,\)"),
        ("bias_shape", ValueError, r"bias must have shape \(channels,\) = \(6,\).*\(7,\)"),
        ("channels", ValueError, r"num_channels=4 must equal x.shape\[1\]; got x.shape\[1\]=6"),
        ("groups_divide", ValueError, r"num_groups must be > 0 and divide num_channels=6; got num_groups=4"),
        ("groups_zero", ValueError, r"num_groups must be > 0 .*got num_groups=0"),
        ("groups_type", TypeError, r"num_groups must be an int; got float"),
        ("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64"),
        ("weight_dtype", TypeError, r"weight must have dtype .*got float64"),
        ("negative_eps", ValueError, r"eps must be a number >= 0; got -1"),
        ("one_dim", ValueError, r"at least 2-D; got 1-D"),
    ],
)
def test_group_norm_bad_input(conformance_backend, conformance_device, case, error, pattern):
    op = require_op(conformance_backend, "group_norm")
    x, w, b, _ = make_inputs((2, 6, 5), torch.float32, conformance_device)
    channels, groups, eps = 6, 3, 1e-5
    if case == "mixed_devices":
        w = w.to(_other_device(conformance_device))
    elif case == "weight_shape":
        w = w[:5]
    elif case == "bias_shape":
        b = torch.cat([b, b[:1]])
    elif case == "channels":
        channels = 4
    elif case == "groups_divide":
        groups = 4
    elif case == "groups_zero":
        groups = 0
    elif case == "groups_type":
        groups = 3.0
    elif case == "int_dtype":
        x = x.long()
    elif case == "weight_dtype":
        w = w.double()
    elif case == "negative_eps":
        eps = -1
    elif case == "one_dim":
        x = x[0, 0]
    with pytest.raises(error, match=pattern):
        op(x, w, b, channels, groups, eps)
