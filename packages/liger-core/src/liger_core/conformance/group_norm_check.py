"""The group_norm check against the float64 oracle, without pytest: used by the conformance
cases, by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.ops import group_norm as contract


def make_inputs(shape, dtype, device, has_weight=True, has_bias=True, param_dtype=None, seed=0):
    """``(x, weight, bias, dy)`` for x of ``(batch, channels, *spatial)``; x has a mean offset."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 2 + 1.5).to(dtype)
    w = (torch.randn(shape[1], generator=gen) * 0.5 + 1).to(param_dtype or dtype) if has_weight else None
    b = (torch.randn(shape[1], generator=gen) * 0.5).to(param_dtype or dtype) if has_bias else None
    dy = torch.randn(shape, generator=gen).to(dtype)
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return move(x), move(w), move(b), move(dy)


def check_group_norm(backend, x, w, b, dy, num_groups, eps=1e-5) -> None:
    """Run ``backend``'s group_norm forward and backward; check against the float64 oracle."""
    num_channels = x.shape[1]
    x_in = x.clone().requires_grad_()
    w_in = w.clone().requires_grad_() if w is not None else None
    b_in = b.clone().requires_grad_() if b is not None else None
    dy_in = dy.clone()
    y = backend.ops["group_norm"](x_in, w_in, b_in, num_channels, num_groups, eps)
    y.backward(dy_in)

    x64 = x.detach().cpu().double().requires_grad_()
    w64 = w.detach().cpu().double().requires_grad_() if w is not None else None
    b64 = b.detach().cpu().double().requires_grad_() if b is not None else None
    y64 = contract.math(x64, w64, b64, num_channels, num_groups, eps)
    y64.backward(dy.cpu().double())

    # grad_x cancels within each group as layer_norm's does within a row: measure its error
    # against rstd_group * |dy * weight|.
    with torch.no_grad():
        if x.numel():
            grouped = x64.detach().reshape(x.shape[0], num_groups, -1)
            var = (grouped - grouped.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
            per_channel = (num_channels,) + (1,) * (x.dim() - 2)
            g = dy.cpu().double() * (w64.detach().reshape(per_channel) if w is not None else 1.0)
            rstd = torch.rsqrt(var + eps).expand_as(grouped).reshape(x.shape)
            grad_x_scale = float((rstd * g).abs().max())
        else:
            grad_x_scale = 1.0
    tol = loosest(x.dtype, *(p.dtype for p in (w, b) if p is not None))
    assert y.dtype == x.dtype and y.device == x.device
    assert_close(y, y64, tol, "group_norm output")
    assert x_in.grad is not None and x_in.grad.dtype == x.dtype
    assert_close(x_in.grad, x64.grad, tol, "group_norm grad_x", scale=grad_x_scale)
    for name, p, p_in, p64 in (("weight", w, w_in, w64), ("bias", b, b_in, b64)):
        if p is None:
            continue
        assert p_in.grad is not None and p_in.grad.dtype == p.dtype, f"group_norm grad_{name} dtype"
        assert_close(p_in.grad, p64.grad, tol, f"group_norm grad_{name}")
        assert torch.equal(p_in.detach(), p), f"group_norm modified its {name}"
    assert torch.equal(x_in.detach(), x), "group_norm modified its input x"
    assert torch.equal(dy_in, dy), "group_norm modified the incoming gradient"
