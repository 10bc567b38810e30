"""The layer_norm check against the float64 oracle, without pytest: used by the conformance
cases, by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.ops import layer_norm as contract


def make_inputs(shape, dtype, device, has_weight=True, has_bias=True, param_dtype=None, seed=0):
    """``(x, weight, bias, dy)``; x has a mean offset so centring matters."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 2 + 1.5).to(dtype)
    w = (torch.randn(shape[-1], generator=gen) * 0.5 + 1).to(param_dtype or dtype) if has_weight else None
    b = (torch.randn(shape[-1], generator=gen) * 0.5).to(param_dtype or dtype) if has_bias else None
    dy = torch.randn(shape, generator=gen).to(dtype)
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return move(x), move(w), move(b), move(dy)


def check_layer_norm(backend, x, w, b, dy, eps=1e-5) -> None:
    """Run ``backend``'s layer_norm forward and backward; check against the float64 oracle."""
    x_in = x.clone().requires_grad_()
    w_in = w.clone().requires_grad_() if w is not None else None
    b_in = b.clone().requires_grad_() if b is not None else None
    dy_in = dy.clone()
    y = backend.ops["layer_norm"](x_in, w_in, b_in, eps)
    y.backward(dy_in)

    x64 = x.detach().cpu().double().requires_grad_()
    w64 = w.detach().cpu().double().requires_grad_() if w is not None else None
    b64 = b.detach().cpu().double().requires_grad_() if b is not None else None
    y64 = contract.math(x64, w64, b64, eps)
    y64.backward(dy.cpu().double())

    # grad_x = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = dy * w: cancelling terms,
    # so its error is measured against rstd * |g|.
    with torch.no_grad():
        x64d = x64.detach()
        var = (x64d - x64d.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
        g = dy.cpu().double() * (w64.detach() if w is not None else 1.0)
        grad_x_scale = float((torch.rsqrt(var + eps) * g).abs().max()) if g.numel() else 1.0
    tol = loosest(x.dtype, *(p.dtype for p in (w, b) if p is not None))
    assert y.dtype == x.dtype and y.device == x.device
    assert_close(y, y64, tol, "layer_norm output")
    assert x_in.grad is not None and x_in.grad.dtype == x.dtype
    assert_close(x_in.grad, x64.grad, tol, "layer_norm grad_x", scale=grad_x_scale)
    for name, p, p_in, p64 in (("weight", w, w_in, w64), ("bias", b, b_in, b64)):
        if p is None:
            continue
        assert p_in.grad is not None and p_in.grad.dtype == p.dtype, f"layer_norm grad_{name} dtype"
        assert_close(p_in.grad, p64.grad, tol, f"layer_norm grad_{name}")
        assert torch.equal(p_in.detach(), p), f"layer_norm modified its {name}"
    assert torch.equal(x_in.detach(), x), "layer_norm modified its input x"
    assert torch.equal(dy_in, dy), "layer_norm modified the incoming gradient"
