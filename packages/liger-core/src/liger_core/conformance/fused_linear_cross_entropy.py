"""Conformance cases for `fused_linear_cross_entropy`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.fused_linear_cross_entropy_check import check_fused_linear_cross_entropy, make_inputs

# (tokens, hidden, vocab): one token, odd sizes, vocab wider than one block, more tokens than a chunk.
SHAPES = [(1, 8, 5), (7, 16, 33), (40, 24, 300), (5, 32, 9000), (130, 16, 40)]
# weighted, bias, label_smoothing, lse_square_scale, softcap
OPTIONS = {
    "plain": (False, False, 0.0, 0.0, None),
    "bias": (False, True, 0.0, 0.0, None),
    "ce_weight": (True, False, 0.0, 0.0, None),
    "smoothing": (False, False, 0.1, 0.0, None),
    "zloss": (False, False, 0.0, 1e-2, None),
    "softcap": (False, False, 0.0, 0.0, 4.0),
    "everything": (True, True, 0.2, 1e-3, 5.0),
}
REDUCTIONS = ("mean", "sum", "none")
_ids = lambda d: str(d).removeprefix("torch.")  # noqa: E731


@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_flce_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "fused_linear_cross_entropy")
    x, w, t, _, _ = make_inputs(*shape, dtype, conformance_device)
    check_fused_linear_cross_entropy(conformance_backend, x, w, t)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("option", list(OPTIONS))
# More tokens than hidden, and fewer: an implementation may hold the logits differently when
# they fit in grad_weight's storage (tokens <= hidden).
@pytest.mark.parametrize("tokens", (37, 19))
def test_flce_options(conformance_backend, conformance_device, option, reduction, dtype, tokens):
    require_op(conformance_backend, "fused_linear_cross_entropy")
    weighted, bias, smoothing, zscale, softcap = OPTIONS[option]
    x, w, t, b, cw = make_inputs(tokens, 24, 130, dtype, conformance_device, seed=3, bias=bias, ce_weight=weighted)
    check_fused_linear_cross_entropy(
        conformance_backend,
        x,
        w,
        t,
        b,
        cw,
        lse_square_scale=zscale,
        label_smoothing=smoothing,
        reduction=reduction,
        softcap=softcap,
        return_z_loss=zscale > 0,
    )


@pytest.mark.parametrize("accum_dtype", (None, torch.float32), ids=("accum-none", "accum-fp32"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
def test_flce_accum_dtype_and_scaled_gradient(conformance_backend, conformance_device, dtype, accum_dtype):
    require_op(conformance_backend, "fused_linear_cross_entropy")
    x, w, t, b, _ = make_inputs(70, 16, 50, dtype, conformance_device, seed=4, bias=True)
    check_fused_linear_cross_entropy(conformance_backend, x, w, t, b, accum_dtype=accum_dtype, grad_scalar=0.5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_flce_all_ignored(conformance_backend, conformance_device, reduction):
    """Every target ignored: loss 0 and zero gradients, not NaN."""
    require_op(conformance_backend, "fused_linear_cross_entropy")
    x, w, t, b, cw = make_inputs(6, 8, 20, torch.float32, conformance_device, ignored="all", bias=True, ce_weight=True)
    check_fused_linear_cross_entropy(conformance_backend, x, w, t, b, cw, lse_square_scale=0.1, reduction=reduction)


def test_flce_weight_only_gradient(conformance_backend, conformance_device):
    """input without requires_grad (a frozen trunk): only the lm_head gets gradients."""
    require_op(conformance_backend, "fused_linear_cross_entropy")
    x, w, t, _, _ = make_inputs(9, 8, 30, torch.float32, conformance_device, seed=6)
    check_fused_linear_cross_entropy(conformance_backend, x, w, t, input_grad=False)


def test_flce_no_grad_forward(conformance_backend, conformance_device):
    fn = require_op(conformance_backend, "fused_linear_cross_entropy")
    x, w, t, _, _ = make_inputs(9, 8, 30, torch.float32, conformance_device, seed=7)
    from liger_core.ops.fused_linear_cross_entropy import math

    with torch.no_grad():
        got = fn(x, w, t)
    want, _ = math(x.cpu().double(), w.cpu().double(), t.cpu())
    assert abs(float(got) - float(want)) <= 1e-4 * abs(float(want)) + 1e-5


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("target_range", ValueError, r"target must be in \[0, 20\).*first: 21"),
        ("hidden_mismatch", ValueError, r"weight must have shape \(vocab, hidden\) with hidden = input.shape\[1\] = 8"),
        ("input_3d", ValueError, r"input must be 2-D \(tokens, hidden\); got shape \(1, 4, 8\)"),
        ("bias_shape", ValueError, r"bias must have shape \(vocab,\) = \(20,\); got \(3,\)"),
        ("ce_weight_shape", ValueError, r"ce_weight must have shape \(vocab,\) = \(20,\)"),
        ("weight_device", ValueError, r"one device.*weight is on"),
        ("accum", ValueError, r"accum_dtype must be None, torch.float32.*got torch.int32"),
        ("reduction", ValueError, r"reduction must be one of"),
        ("target_shape", ValueError, r"target must have shape \(tokens,\) = \(4,\)"),
    ],
)
def test_flce_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "fused_linear_cross_entropy")
    x, w, t, b, cw = make_inputs(4, 8, 20, torch.float32, conformance_device, ignored=0.0, bias=True, ce_weight=True)
    kw = dict(bias=b, ce_weight=cw)
    if case == "target_range":
        t[1] = 21
    elif case == "hidden_mismatch":
        w = w[:, :7]
    elif case == "input_3d":
        x = x.reshape(1, 4, 8)
    elif case == "bias_shape":
        kw["bias"] = b[:3]
    elif case == "ce_weight_shape":
        kw["ce_weight"] = cw[:3]
    elif case == "weight_device":
        w = w.to(_other_device(conformance_device))
    elif case == "accum":
        kw["accum_dtype"] = torch.int32
    elif case == "reduction":
        kw["reduction"] = "batchmean"
    elif case == "target_shape":
        t = t[:2]
    with pytest.raises(error, match=pattern):
        fn(x, w, t, **kw)
