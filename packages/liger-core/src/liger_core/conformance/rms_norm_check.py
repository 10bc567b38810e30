"""The rms_norm check against the float64 oracle, without pytest: used by the conformance
cases, by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.ops import rms_norm as contract


def make_inputs(shape, dtype, device, has_weight=True, weight_dtype=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 2 + 0.3).to(dtype)
    w = (torch.randn(shape[-1], generator=gen) * 0.5 + 1).to(weight_dtype or dtype) if has_weight else None
    dy = torch.randn(shape, generator=gen).to(dtype)
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return move(x), move(w), move(dy)


def check_rms_norm(backend, x, w, dy, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    """Run ``backend``'s rms_norm forward and backward and check all against the float64 oracle.

    Public so vendor tests can drive their own code paths (forced tile plans) through it.
    """
    x_in = x.clone().requires_grad_()
    w_in = w.clone().requires_grad_() if w is not None else None
    dy_in = dy.clone()
    y = backend.ops["rms_norm"](x_in, w_in, eps, offset, casting_mode, in_place)
    y.backward(dy_in)

    x64 = x.detach().cpu().double().requires_grad_()
    w64 = w.detach().cpu().double().requires_grad_() if w is not None else None
    y64 = contract.math(x64, w64, eps, offset, casting_mode)
    y64.backward(dy.cpu().double())

    # grad_x = rstd * (g - x_hat * mean(g * x_hat)) with g = dy * (offset + w): the terms
    # cancel (fully when hidden == 1), so its error is measured against rstd * |g|.
    with torch.no_grad():
        x64d = x64.detach()
        rstd = torch.rsqrt(x64d.pow(2).mean(-1, keepdim=True) + eps)
        g = dy.cpu().double() * ((offset + w64.detach()) if w is not None else 1.0)
        grad_x_scale = float((rstd * g).abs().max()) if g.numel() else 1.0
    tol_dtype = loosest(x.dtype, w.dtype if w is not None else None)
    assert y.dtype == x.dtype and y.device == x.device
    assert_close(y, y64, tol_dtype, "rms_norm output")
    assert x_in.grad is not None and x_in.grad.dtype == x.dtype
    assert_close(x_in.grad, x64.grad, tol_dtype, "rms_norm grad_x", scale=grad_x_scale)
    if w is not None:
        assert w_in.grad is not None and w_in.grad.dtype == w.dtype
        assert_close(w_in.grad, w64.grad, tol_dtype, "rms_norm grad_weight")
    assert torch.equal(x_in.detach(), x), "rms_norm modified its input x"
    if w is not None:
        assert torch.equal(w_in.detach(), w), "rms_norm modified its weight"
    if not in_place:
        assert torch.equal(dy_in, dy), "rms_norm modified the incoming gradient without in_place=True"
