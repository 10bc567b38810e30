"""Conformance cases for `rms_norm`."""

from __future__ import annotations

import itertools

import pytest
import torch

from liger_core.conformance import DTYPES
from liger_core.conformance.rms_norm_check import check_rms_norm, make_inputs  # noqa: F401 (re-exported)
from liger_core.ops import rms_norm as contract

# Odd sizes, a single column, several programs' worth of short rows, 3-D input, rows
# wider than any vendor's single tile, and an empty batch.
SHAPES = [(1, 1), (5, 1), (3, 5), (2, 7, 33), (130, 64), (4, 1000), (3, 20000), (0, 48)]
OPTIONS = list(
    itertools.product(contract.CASTING_MODES, (0.0, 1.0), (True, False), (False, True))
)  # casting_mode, offset, has_weight, in_place


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rms_norm_shapes(conformance_backend, conformance_device, shape, dtype):
    x, w, dy = make_inputs(shape, dtype, conformance_device)
    check_rms_norm(conformance_backend, x, w, dy)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize(
    "casting_mode,offset,has_weight,in_place",
    OPTIONS,
    ids=[f"{c}-off{o:g}-{'w' if hw else 'now'}-{'inplace' if ip else 'copy'}" for c, o, hw, ip in OPTIONS],
)
def test_rms_norm_options(conformance_backend, conformance_device, dtype, casting_mode, offset, has_weight, in_place):
    x, w, dy = make_inputs((37, 96), dtype, conformance_device, has_weight=has_weight)
    check_rms_norm(conformance_backend, x, w, dy, eps=1e-5, offset=offset, casting_mode=casting_mode, in_place=in_place)


@pytest.mark.parametrize("casting_mode", contract.CASTING_MODES)
def test_rms_norm_float32_weight_with_bf16_input(conformance_backend, conformance_device, casting_mode):
    x, w, dy = make_inputs((9, 130), torch.bfloat16, conformance_device, weight_dtype=torch.float32)
    check_rms_norm(conformance_backend, x, w, dy, casting_mode=casting_mode, offset=1.0)


def test_rms_norm_non_contiguous_input(conformance_backend, conformance_device):
    base, w, _ = make_inputs((40, 66), torch.float32, conformance_device)
    x = base.t()[:33]  # (33, 40) view with strides (1, 66)
    w = w[:40].contiguous()
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(conformance_device)
    check_rms_norm(conformance_backend, x, w, dy)


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("mixed_devices", ValueError, r"one device.*x is on .*weight is on"),
        ("weight_shape", ValueError, r"weight must have shape \(hidden,\) = \(16,\).*\(15,\)"),
        ("int_dtype", TypeError, r"x must have dtype float32, bfloat16, float16; got int64"),
        ("float64", TypeError, r"x must have dtype .*got float64"),
        ("casting_mode", ValueError, r"casting_mode must be one of .*'llama'.*got 'bogus'"),
        ("negative_eps", ValueError, r"eps must be a number >= 0; got -1"),
        ("scalar", ValueError, r"at least 1 dimension"),
    ],
)
def test_rms_norm_bad_input(conformance_backend, conformance_device, case, error, pattern):
    x, w, _ = make_inputs((4, 16), torch.float32, conformance_device)
    kwargs = dict(eps=1e-6, offset=0.0, casting_mode="llama", in_place=False)
    if case == "mixed_devices":
        w = w.to(_other_device(conformance_device))
    elif case == "weight_shape":
        w = w[:15]
    elif case == "int_dtype":
        x = x.long()
    elif case == "float64":
        x = x.double()
    elif case == "casting_mode":
        kwargs["casting_mode"] = "bogus"
    elif case == "negative_eps":
        kwargs["eps"] = -1
    elif case == "scalar":
        x = x[0, 0]
    with pytest.raises(error, match=pattern):
        conformance_backend.ops["rms_norm"](x, w, **kwargs)
