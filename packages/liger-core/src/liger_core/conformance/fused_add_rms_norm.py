"""Conformance cases for `fused_add_rms_norm`."""

from __future__ import annotations

import itertools

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.fused_add_rms_norm_check import check_fused_add_rms_norm, make_inputs  # noqa: F401
from liger_core.ops import fused_add_rms_norm as contract

# Odd sizes, one column, several programs' worth of short rows, 3-D input, a row wider
# than any vendor's single tile, and an empty batch.
SHAPES = [(1, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (1, 16500), (0, 48)]
OPTIONS = list(
    itertools.product(contract.CASTING_MODES, (0.0, 1.0), (True, False), (False, True))
)  # casting_mode, offset, has_weight, in_place


def _dtype_id(d):
    return str(d).removeprefix("torch.")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fused_add_rms_norm_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "fused_add_rms_norm")
    x, r, w, dy, ds = make_inputs(shape, dtype, conformance_device)
    check_fused_add_rms_norm(conformance_backend, x, r, w, dy, ds)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_dtype_id)
@pytest.mark.parametrize(
    "casting_mode,offset,has_weight,in_place",
    OPTIONS,
    ids=[f"{c}-off{o:g}-{'w' if hw else 'now'}-{'inplace' if ip else 'copy'}" for c, o, hw, ip in OPTIONS],
)
def test_fused_add_rms_norm_options(
    conformance_backend, conformance_device, dtype, casting_mode, offset, has_weight, in_place
):
    require_op(conformance_backend, "fused_add_rms_norm")
    x, r, w, dy, ds = make_inputs((37, 96), dtype, conformance_device, has_weight=has_weight)
    check_fused_add_rms_norm(
        conformance_backend, x, r, w, dy, ds, eps=1e-5, offset=offset, casting_mode=casting_mode, in_place=in_place
    )


@pytest.mark.parametrize("in_place", (False, True), ids=("copy", "inplace"))
def test_fused_add_rms_norm_only_y_used(conformance_backend, conformance_device, in_place):
    # new_residual feeds nothing: its gradient is None and grad_x is RMSNorm's alone.
    require_op(conformance_backend, "fused_add_rms_norm")
    x, r, w, dy, _ = make_inputs((9, 70), torch.float32, conformance_device)
    check_fused_add_rms_norm(conformance_backend, x, r, w, dy, None, in_place=in_place)


@pytest.mark.parametrize("casting_mode", contract.CASTING_MODES)
def test_fused_add_rms_norm_mixed_dtypes(conformance_backend, conformance_device, casting_mode):
    # float32 weight and float32 residual stream with bf16 activations.
    require_op(conformance_backend, "fused_add_rms_norm")
    x, r, w, dy, ds = make_inputs(
        (9, 130), torch.bfloat16, conformance_device, weight_dtype=torch.float32, residual_dtype=torch.float32
    )
    check_fused_add_rms_norm(conformance_backend, x, r, w, dy, ds, casting_mode=casting_mode, offset=1.0)


def test_fused_add_rms_norm_non_contiguous_input(conformance_backend, conformance_device):
    require_op(conformance_backend, "fused_add_rms_norm")
    x, r, w, dy, ds = make_inputs((40, 66), torch.float32, conformance_device)
    x, r = x.t()[:33], r[:, ::2][:, :33].t()  # (33, 40) views with strides (1, 66) and (2, 66)
    dy, ds = dy[:33, :40], ds.t()[:33]
    check_fused_add_rms_norm(conformance_backend, x, r, w[:40].contiguous(), dy, ds)


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("mixed_devices", ValueError, r"one device.*x is on .*weight is on"),
        ("residual_device", ValueError, r"one device.*x is on .*residual is on"),
        ("residual_shape", ValueError, r"residual must have x's shape \(4, 16\); got residual.shape=\(4, 15\)"),
        ("weight_shape", ValueError, r"weight must have shape \(hidden,\) = \(16,\).*\(15,\)"),
        ("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64"),
        ("residual_dtype", TypeError, r"residual must have dtype .*got float64"),
        ("casting_mode", ValueError, r"casting_mode must be one of .*'llama'.*got 'bogus'"),
        ("negative_eps", ValueError, r"eps must be a number >= 0; got -1"),
        ("scalar", ValueError, r"at least 1 dimension"),
    ],
)
def test_fused_add_rms_norm_bad_input(conformance_backend, conformance_device, case, error, pattern):
    op = require_op(conformance_backend, "fused_add_rms_norm")
    x, r, w, _, _ = make_inputs((4, 16), torch.float32, conformance_device)
    kwargs = dict(eps=1e-6, offset=0.0, casting_mode="llama", in_place=False)
    if case == "mixed_devices":
        w = w.to(_other_device(conformance_device))
    elif case == "residual_device":
        r = r.to(_other_device(conformance_device))
    elif case == "residual_shape":
        r = r[:, :15]
    elif case == "weight_shape":
        w = w[:15]
    elif case == "int_dtype":
        x = x.long()
    elif case == "residual_dtype":
        r = r.double()
    elif case == "casting_mode":
        kwargs["casting_mode"] = "bogus"
    elif case == "negative_eps":
        kwargs["eps"] = -1
    elif case == "scalar":
        x, r = x[0, 0], r[0, 0]
    with pytest.raises(error, match=pattern):
        op(x, r, w, **kwargs)
