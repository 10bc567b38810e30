"""The poly_norm check against the float64 oracle, without pytest: used by the conformance
cases, by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.ops import poly_norm as contract


def make_inputs(shape, dtype, device, param_dtype=None, bias_shape=(1,), seed=0):
    """``(x, weight, bias, dy)``; weights away from PolyCom's equal 1/3s so each term counts."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 1.5 + 0.2).to(dtype)
    w = torch.tensor([0.4, -0.7, 1.1]).to(param_dtype or dtype)
    b = torch.full(bias_shape, 0.3).to(param_dtype or dtype)
    dy = torch.randn(shape, generator=gen).to(dtype)
    return x.to(device), w.to(device), b.to(device), dy.to(device)


def check_poly_norm(backend, x, w, b, dy, eps=1e-6) -> None:
    """Run ``backend``'s poly_norm forward and backward; check against the float64 oracle."""
    x_in = x.clone().requires_grad_()
    w_in = w.clone().requires_grad_()
    b_in = b.clone().requires_grad_()
    dy_in = dy.clone()
    y = backend.ops["poly_norm"](x_in, w_in, b_in, eps)
    y.backward(dy_in)

    x64 = x.detach().cpu().double().requires_grad_()
    w64 = w.detach().cpu().double().requires_grad_()
    b64 = b.detach().cpu().double().requires_grad_()
    y64 = contract.math(x64, w64, b64, eps)
    y64.backward(dy.cpu().double())

    # Each term's gradient cancels like RMSNorm's: measure grad_x's error against the sum
    # over the terms of |w_i| * rstd_i * |dy| * |d(x^i)/dx|.
    with torch.no_grad():
        xd, dyd = x64.detach(), dy.cpu().double()
        scale_t = torch.zeros_like(xd)
        for i, wi in zip((3, 2, 1), w64.detach().tolist()):
            u = xd.pow(i)
            rstd = torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)
            scale_t = scale_t + abs(wi) * rstd * dyd.abs() * i * xd.abs().pow(i - 1)
        grad_x_scale = float(scale_t.max()) if xd.numel() else 1.0
    tol = loosest(x.dtype, w.dtype, b.dtype)
    assert y.dtype == x.dtype and y.device == x.device
    assert_close(y, y64, tol, "poly_norm output")
    assert x_in.grad is not None and x_in.grad.dtype == x.dtype
    assert_close(x_in.grad, x64.grad, tol, "poly_norm grad_x", scale=grad_x_scale)
    assert w_in.grad is not None and w_in.grad.dtype == w.dtype
    assert_close(w_in.grad, w64.grad, tol, "poly_norm grad_weight")
    assert b_in.grad is not None and b_in.grad.dtype == b.dtype and b_in.grad.shape == b.shape
    assert_close(b_in.grad, b64.grad, tol, "poly_norm grad_bias")
    assert torch.equal(x_in.detach(), x), "poly_norm modified its input x"
    assert torch.equal(w_in.detach(), w) and torch.equal(b_in.detach(), b), "poly_norm modified its parameters"
    assert torch.equal(dy_in, dy), "poly_norm modified the incoming gradient"
