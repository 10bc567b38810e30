"""The fused_add_rms_norm check against the float64 oracle, without pytest: used by the
conformance cases, by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.ops import fused_add_rms_norm as contract


def make_inputs(shape, dtype, device, has_weight=True, weight_dtype=None, residual_dtype=None, seed=0):
    """``(x, residual, weight, dy, d_residual)``; the two gradients are those of ``y`` and
    ``new_residual``."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 2 + 0.3).to(dtype)
    r = (torch.randn(shape, generator=gen) * 3 - 0.2).to(residual_dtype or dtype)
    w = (torch.randn(shape[-1], generator=gen) * 0.5 + 1).to(weight_dtype or dtype) if has_weight else None
    dy = torch.randn(shape, generator=gen).to(dtype)
    ds = torch.randn(shape, generator=gen).to(dtype)
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return move(x), move(r), move(w), move(dy), move(ds)


def check_fused_add_rms_norm(
    backend, x, r, w, dy, ds, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False
) -> None:
    """Run ``backend``'s fused_add_rms_norm forward and backward (``ds=None``: only ``y``
    is used downstream) and check outputs and every gradient against the float64 oracle."""
    x_in = x.clone().requires_grad_()
    r_in = r.clone().requires_grad_()
    w_in = w.clone().requires_grad_() if w is not None else None
    dy_in = dy.clone()
    ds_in = ds.clone() if ds is not None else None
    y, s = backend.ops["fused_add_rms_norm"](x_in, r_in, w_in, eps, offset, casting_mode, in_place)
    if ds is None:
        y.backward(dy_in)
    else:
        torch.autograd.backward([y, s], [dy_in, ds_in])

    x64 = x.detach().cpu().double().requires_grad_()
    r64 = r.detach().cpu().double().requires_grad_()
    w64 = w.detach().cpu().double().requires_grad_() if w is not None else None
    y64, s64 = contract.math(x64, r64, w64, eps, offset, casting_mode)
    if ds is None:
        y64.backward(dy.cpu().double())
    else:
        torch.autograd.backward([y64, s64], [dy.cpu().double(), ds.cpu().double()])

    # The RMSNorm part of the gradient cancels (see rms_norm_check): measure its error
    # against rstd * |g| (plus the residual gradient that is added to it).
    with torch.no_grad():
        s64d = s64.detach()
        rstd = torch.rsqrt(s64d.pow(2).mean(-1, keepdim=True) + eps)
        g = dy.cpu().double() * ((offset + w64.detach()) if w is not None else 1.0)
        scale_t = (rstd * g).abs() + (ds.cpu().double().abs() if ds is not None else 0.0)
        grad_scale = float(scale_t.max()) if g.numel() else 1.0
    tol = loosest(x.dtype, r.dtype, w.dtype if w is not None else None)
    assert y.dtype == x.dtype and s.dtype == x.dtype and y.device == x.device
    assert_close(s, s64, loosest(x.dtype, r.dtype), "fused_add_rms_norm new_residual")
    assert_close(y, y64, tol, "fused_add_rms_norm output")
    assert x_in.grad is not None and x_in.grad.dtype == x.dtype
    assert r_in.grad is not None and r_in.grad.dtype == r.dtype
    assert_close(x_in.grad, x64.grad, tol, "fused_add_rms_norm grad_x", scale=grad_scale)
    assert_close(r_in.grad, r64.grad, tol, "fused_add_rms_norm grad_residual", scale=grad_scale)
    if w is not None:
        assert w_in.grad is not None and w_in.grad.dtype == w.dtype
        assert_close(w_in.grad, w64.grad, tol, "fused_add_rms_norm grad_weight")
        assert torch.equal(w_in.detach(), w), "fused_add_rms_norm modified its weight"
    assert torch.equal(x_in.detach(), x), "fused_add_rms_norm modified its input x"
    assert torch.equal(r_in.detach(), r), "fused_add_rms_norm modified its input residual"
    if ds is not None:
        assert torch.equal(ds_in, ds), "fused_add_rms_norm modified the gradient of new_residual"
    if not in_place:
        assert torch.equal(dy_in, dy), "fused_add_rms_norm modified the incoming gradient without in_place=True"
