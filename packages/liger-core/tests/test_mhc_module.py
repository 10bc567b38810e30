"""LigerMHC: liger-kernel 0.8.5's constructor and parameters, and its forward and gradients against
mHC written out from liger-kernel's formulas (the coefficients from mhc_coeffs' reference, then
``x_in = sum_i h_pre[i] x[i]``, ``x_out[o] = sum_i h_res[o, i] x[i] + h_post[o] layer(x_in)``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from liger_core import LigerFallbackWarning
from liger_core.nn import LigerMHC
from liger_core.ops import mhc_coeffs

# On a CPU the ops run on their PyTorch references (no vendor package serves the device).
pytestmark = pytest.mark.filterwarnings(f"ignore::{LigerFallbackWarning.__module__}.{LigerFallbackWarning.__name__}")


def _module(hc=3, c=8, dtype=torch.float32):
    torch.manual_seed(0)
    layer = nn.Linear(c, c, dtype=dtype)
    return LigerMHC(layer, hc=hc, c=c, tmax=5, phi_dtype=dtype, pre_eps=0.1, post_mult=1.5)


def test_parameters_as_liger_kernel():
    mhc = LigerMHC(nn.Linear(8, 8), hc=3, c=8)
    assert mhc.phi.shape == (24, 15) and mhc.phi.dtype == torch.float16
    assert mhc.b.shape == (15,) and mhc.b.dtype == torch.float32 and not mhc.b.any()
    for alpha in (mhc.alpha_pre, mhc.alpha_post, mhc.alpha_res):
        assert alpha.shape == () and alpha.dtype == torch.float32 and alpha.item() == 1.0
    assert (mhc.tmax, mhc.rms_eps, mhc.sinkhorn_eps, mhc.post_mult) == (20, 1e-6, 1e-6, 2.0)
    assert "hc=3, c=8, tmax=20" in repr(mhc)


def test_forward_and_gradients_match_the_formulas():
    mhc = _module()
    x = torch.randn(2, 5, 3, 8, requires_grad=True)
    out = mhc(x)
    params = [x, mhc.phi, mhc.b, mhc.alpha_pre, mhc.alpha_post, mhc.alpha_res, *mhc.layer.parameters()]
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(out, params, upstream)

    # The same in float64, written out.
    p64 = [p.detach().double().requires_grad_() for p in params]
    x64, phi, b, alpha_pre, alpha_post, alpha_res, weight, bias = p64
    h_pre, h_post, h_res = mhc_coeffs.math(x64, phi, b, alpha_pre, alpha_post, alpha_res, 5, 1e-6, 0.1, 1e-6, 1.5)
    x_in = torch.einsum("...i,...ic->...c", h_pre, x64)
    f_out = torch.nn.functional.linear(x_in, weight, bias)
    want = torch.einsum("...oi,...ic->...oc", h_res, x64) + h_post[..., None] * f_out[..., None, :]
    torch.testing.assert_close(out, want.float(), rtol=1e-4, atol=1e-5)
    for g, w in zip(got, torch.autograd.grad(want, p64, upstream.double())):
        torch.testing.assert_close(g, w.float(), rtol=1e-4, atol=1e-5)


def test_layer_input_cast_to_the_layers_dtype():
    seen = []
    layer = nn.Linear(8, 8, dtype=torch.bfloat16)
    layer.register_forward_pre_hook(lambda _, args: seen.append(args[0].dtype))
    mhc = LigerMHC(layer, hc=2, c=8, phi_dtype=torch.float32)
    assert mhc(torch.randn(4, 2, 8)).dtype == torch.float32 and seen == [torch.bfloat16]


def test_wrong_stream_shape():
    with pytest.raises(
        ValueError, match=r"x must have shape \(\.\.\., hc, c\) = \(\.\.\., 3, 8\); got x.shape=\(4, 2, 8\)"
    ):
        _module()(torch.randn(4, 2, 8, dtype=torch.float64))
